"""Fixtures for the SDK tests: a real server from the test kit."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "testkit" / "python"))

from gpuplane_testkit import Server, free_port, wait_until  # noqa: E402,F401


@pytest.fixture
def spool(monkeypatch, tmp_path):
    directory = tmp_path / "spool"
    monkeypatch.setenv("GPUCTL_SPOOL_DIR", str(directory))
    for name in ("GPUCTL_SERVER", "GPUCTL_TOKEN", "GPUCTL_RUN_ID", "GPUCTL_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    return directory


@pytest.fixture
def server(spool, tmp_path):
    data_dir = str(tmp_path / "server")
    server = Server(data_dir, free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def stopped_server(spool, tmp_path):
    """A server that is not running yet (its port and token are known)."""
    data_dir = str(tmp_path / "server")
    server = Server(data_dir, free_port())
    yield server
    server.stop()
