#!/usr/bin/env bash
# Builds GPUPlane (release), installs the peers (MLflow 3, TensorBoard,
# tensorboardX) from PyPI into target/bench-venv, and prints figures side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p gpuplane-server -p gpuplane-agent -p gpuplane-bench
venv="${CARGO_TARGET_DIR:-target}/bench-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "mlflow>=3" tensorboard tensorboardX
exec "$venv/bin/python" bench/peers.py
