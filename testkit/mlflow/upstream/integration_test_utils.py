"""Stands in for MLflow's `tests/tracking/integration_test_utils.py` when
MLflow's own `tests/tracking/test_rest_tracking.py` runs against
gpuplane-server (see run.sh). It keeps that module's names, so the
upstream tests run unchanged, but every "tracking server" they start is a
real gpuplane-server (the binary in target/debug/, or GPUPLANE_SERVER_BIN)
over a fresh data dir, with an admin `write` token in
MLFLOW_TRACKING_TOKEN. The FastAPI `app` and the backend/artifact URIs the
tests pass are MLflow's in-process server's: they are ignored here.

Upstream, the tests' fluent calls and CLI commands (which go to the global
tracking URI, the test's SQLite file) reach the same database as the server.
Here that database is gpuplane-server's, so while a server runs the global
tracking URI is the server: what the test logs, the server sees."""

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from gpuplane_testkit import Server  # noqa: E402

from tests.helper_functions import LOCALHOST, get_safe_port  # noqa: E402,F401

# Base URL -> token of each gpuplane-server running now, for the
# Authorization header that gpuplane_overlay adds to the tests' raw requests.
LIVE = {}


@contextlib.contextmanager
def _gpuplane_server(port=None):
    """A fresh gpuplane-server on `port`: yields its base URL."""
    from mlflow.tracking._tracking_service import utils as tracking

    data_dir = tempfile.mkdtemp(prefix="gpuplane-mlflow-")
    server = Server(data_dir, port or get_safe_port())  # creates the admin user and its token
    server.start()
    previous = os.environ.get("MLFLOW_TRACKING_TOKEN")
    os.environ["MLFLOW_TRACKING_TOKEN"] = server.token
    LIVE[server.url] = server.token
    previous_uri = tracking._tracking_uri
    tracking.set_tracking_uri(server.url)
    try:
        yield server.url
    finally:
        tracking.set_tracking_uri(previous_uri)
        LIVE.pop(server.url, None)
        if previous is None:
            os.environ.pop("MLFLOW_TRACKING_TOKEN", None)
        else:
            os.environ["MLFLOW_TRACKING_TOKEN"] = previous
        server.stop()
        if os.environ.get("GPUPLANE_KEEP_LOGS"):
            Path(data_dir, "server.log").write_text("".join(server.log))
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


def _await_server_up_or_die(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex((LOCALHOST, port)) == 0:
                return
        time.sleep(0.2)
    raise Exception(f"Failed to connect on {LOCALHOST}:{port} within {timeout} seconds")


@contextlib.contextmanager
def _init_server(backend_uri, root_artifact_uri, extra_env=None, app=None, server_type="fastapi"):
    """Upstream: launches `mlflow server` over backend_uri. Here: gpuplane-server."""
    import mlflow

    mlflow.set_tracking_uri(None)
    with _gpuplane_server() as url:
        yield url


def _send_rest_tracking_post_request(tracking_server_uri, api_path, json_payload, auth=None):
    url = tracking_server_uri + api_path
    return requests.post(url, json=json_payload, auth=auth)


class ServerThread:
    """Upstream: runs the FastAPI `app` in a thread. Here: gpuplane-server on `port`."""

    def __init__(self, app, port):
        self.port = port
        self._server = None

    def __enter__(self):
        self._server = _gpuplane_server(self.port)
        return self._server.__enter__()

    def __exit__(self, *exc):
        self._server.__exit__(*exc)
        return None
