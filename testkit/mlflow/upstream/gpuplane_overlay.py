"""pytest plugin (`-p gpuplane_overlay`) that points MLflow's own tracking
tests at gpuplane-server without editing them:

1. `tests.tracking.integration_test_utils` (where the upstream fixtures get
   `ServerThread` and `_init_server`) is replaced by ours, next to this file,
   before the test module imports it.
2. The tests' raw `requests` calls to a running gpuplane-server get the
   server's token as `Authorization: Bearer …` (MLflow's own server needs
   none; gpuplane-server refuses unauthenticated calls). The mlflow client
   sends MLFLOW_TRACKING_TOKEN itself; explicit auth is left alone.
"""

import importlib.util
import sys
from pathlib import Path

import requests

import tests.tracking  # the upstream package, from the MLflow checkout on PYTHONPATH

_spec = importlib.util.spec_from_file_location(
    "tests.tracking.integration_test_utils", Path(__file__).with_name("integration_test_utils.py")
)
utils = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = utils
_spec.loader.exec_module(utils)
tests.tracking.integration_test_utils = utils

_request = requests.Session.request


def _request_with_token(self, method, url, *args, **kwargs):
    headers = kwargs.get("headers") or {}
    if kwargs.get("auth") is None and not any(k.lower() == "authorization" for k in headers):
        for base, token in utils.LIVE.items():
            if str(url).startswith(base):
                kwargs["headers"] = {**headers, "Authorization": f"Bearer {token}"}
                break
    return _request(self, method, url, *args, **kwargs)


requests.Session.request = _request_with_token
