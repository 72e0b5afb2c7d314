#!/usr/bin/env bash
# Runs MLflow's own tracking integration tests, tests/tracking/test_rest_tracking.py,
# against gpuplane-server (as FastTrackML runs them against its server):
#
#   testkit/mlflow/upstream/run.sh MLFLOW_DIR [pytest args…]
#
# MLFLOW_DIR is an MLflow checkout, or a folder holding the parts of its tests/
# package the module needs (__init__.py, conftest.py, helper_functions.py,
# simple_repository_server.py, autologging/, tracing/helper.py, integration/,
# tracking/). It is only read: gpuplane_overlay.py swaps in our
# integration_test_utils.py, so each test's "tracking server" is a fresh
# gpuplane-server from target/debug/ (GPUPLANE_SERVER_BIN overrides).
# The client is the mlflow-skinny in .venv; MLflow's server-side modules that the
# test module imports (requirements.txt) go to $DEPS, not into the venv.
#
# BASELINE=1 runs the same tests against MLflow's own in-process server, to tell
# a gpuplane-server gap from a test that fails with this client anyway.
# GPUPLANE_KEEP_LOGS=1 keeps each server's data dir, with its log, in /tmp.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
MLFLOW_DIR=$(cd "${1:?usage: run.sh MLFLOW_DIR [pytest args…]}" && pwd); shift
PY="$ROOT/.venv/bin/python"
DEPS=${DEPS:-/tmp/gpuplane-mlflow-deps}

if [ ! -e "$DEPS/.installed" ]; then
  "$PY" -m pip install --quiet --no-deps --target "$DEPS" -r "$HERE/requirements.txt"
  touch "$DEPS/.installed"
fi

overlay=(-p gpuplane_overlay)
[ "${BASELINE:-}" = 1 ] && overlay=()

cd "$MLFLOW_DIR"
# $DEPS holds nothing the venv has (requirements.txt), so the client is the venv's.
PYTHONPATH="$MLFLOW_DIR:$HERE:$DEPS" \
MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true \
  exec "$PY" -m pytest "$MLFLOW_DIR/tests/tracking/test_rest_tracking.py" \
    --rootdir "$MLFLOW_DIR" -o addopts= -p no:cacheprovider -p no:legacypath \
    -rfEs "${overlay[@]}" "$@"
