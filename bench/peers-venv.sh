#!/usr/bin/env bash
# The peers, pinned, from PyPI into target/bench-venv: MLflow 3 (its tracking
# server), TensorBoard and tensorboardX. The benchmark report measures them
# beside GPUPlane (bench/report.sh runs this first), and the MLflow import's
# test copies from this MLflow's server (testkit/mlflow/test_import_mlflow.py).
set -euo pipefail
cd "$(dirname "$0")/.."

MLFLOW_VERSION=3.17.2
TENSORBOARD_VERSION=2.21.0
TENSORBOARDX_VERSION=2.6.5

venv="${CARGO_TARGET_DIR:-target}/bench-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "mlflow==$MLFLOW_VERSION" \
  "tensorboard==$TENSORBOARD_VERSION" "tensorboardX==$TENSORBOARDX_VERSION"
