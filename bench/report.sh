#!/usr/bin/env bash
# The benchmark report, the one command for every headline figure:
#   ./bench/report.sh            release build, 3 repetitions (REPEAT=N to
#                                change), writes bench/report/BENCHMARKS.md,
#                                benchmarks.json and benchmarks.png
#   ./bench/report.sh --smoke    the same at toy sizes with the debug build,
#                                in a temporary directory (the test command
#                                runs it, so no benchmark rots)
# Installs the peers (MLflow 3, TensorBoard, tensorboardX; pinned) from PyPI
# into target/bench-venv first (bench/peers-venv.sh), then runs `gpuplane-bench report`.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
if [ "${1:-}" = "--smoke" ]; then
  cargo build --locked --quiet -p gpuplane-server -p gpuplane-agent -p gpuplane-bench
  bench="$target/debug/gpuplane-bench"
  out="${OUT:-$(mktemp -d)}"
  args=(--smoke --repeat 1 --out "$out")
else
  cargo build --release --locked --quiet -p gpuplane-server -p gpuplane-agent -p gpuplane-bench
  bench="$target/release/gpuplane-bench"
  args=(--repeat "${REPEAT:-3}" --out bench/report)
fi
bash bench/peers-venv.sh
venv="$target/bench-venv"
"$bench" report "${args[@]}" --peers "$venv/bin/python"
