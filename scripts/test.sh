#!/usr/bin/env bash
# Runs every GPUPlane check: formatting, clippy, the Rust tests (real server,
# agent, CLI and SQLite), the docs (scripts/check-docs.py), the Python SDK
# and MCP tests (pytest against the real server, agent and gpuctl), and the
# browser tests (Playwright + Chromium), the benchmark report in smoke
# mode (bench/report.sh --smoke), and the release package built with the
# debug profile (cargo xtask dist --debug, checked by scripts/check-dist.py).
# On a fresh machine it first installs what it needs; every install step is
# skipped when its tool is already there. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

NEXTEST_VERSION=0.9.143
# The MCP tests use the official Python client, not one of ours.
MCP_CLIENT_VERSION=2.3.0
JSONSCHEMA_VERSION=4.26.0
# A real SMTP server process for the alert email test.
AIOSMTPD_VERSION=1.4.6
# The SDK reads metric history as Arrow when pyarrow is there (tested both ways).
PYARROW_VERSION=26.0.1
# Requests generated from the OpenAPI document (testkit/fuzz).
SCHEMATHESIS_VERSION=4.32.5
# The unmodified MLflow client (the tracking client without its server), the
# version bench/peers-venv.sh runs MLflow's server at (testkit/mlflow).
MLFLOW_CLIENT_VERSION=3.17.2
# An S3-compatible server for the artifact store's tests (moto's, with boto3).
MOTO_VERSION=5.2.6
# The real W&B client, logging offline inside jobs (testkit/wandb).
WANDB_VERSION=0.31.0
# Optuna's own pruners decide what our ASHA and Hyperband must (server/tests/server/sweep_pruner.rs).
OPTUNA_VERSION=5.1.0
started=$(date +%s)
current=""
step() {
  current="$1"
  echo
  echo "==> $1 ($(( $(date +%s) - started ))s)"
}
# On failure: the step, and the disk and memory left (a full disk fails a
# link with a one-line note that CI's excerpt may cut off).
trap 'status=$?; if [ $status -ne 0 ]; then echo; echo "FAILED: ${current} (after $(( $(date +%s) - started ))s)"; df -h . /tmp 2>/dev/null; free -m 2>/dev/null; fi' EXIT

# CI builds each crate once, from a fresh clone: incremental caches (about
# 6 GB) only fill its disk, and the symbol names that line tables keep
# (half of each 540 MB test binary) fill it and slow every link. A
# developer's own runs keep both.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

step "install: Rust components and the wasm32 target"
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install cargo-nextest --locked --version "$NEXTEST_VERSION"
fi

step "install: Debian packages (Chromium, a font for its pages, npm, Python venv, git, PostgreSQL, Slurm, munge, PyTorch, Prometheus), then npm packages"
missing=()
# git: the traceability tests make real checkouts (gpuctl and the browser test).
command -v git >/dev/null 2>&1 || missing+=(git)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
# PostgreSQL: the tests start their own servers from its binaries (testkit/src/postgres.rs).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Installed without their recommends (docs, mail, BLAS variants), which
# the tests do not need. Slurm and munge: the Slurm runner's tests start a
# cluster of their own, of one node or two (one slurmd per loopback address) (testkit/src/slurm.rs).
lean_missing=()
[ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/slurmctld ] || lean_missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || lean_missing+=(munge)
# Prometheus: the operations tests start one that scrapes a server and an
# agent and answer PromQL about jobs that ran (testkit/src/prometheus.rs).
[ -x /usr/bin/prometheus ] || lean_missing+=(prometheus)
# Debian's PyTorch (CPU, gloo): the multi-node tests run real torchrun
# (testkit/tests/system/multi_node.rs) with it: the system Python, whatever
# python3 is first on PATH (pyenv, a venv). PyPI's wheel would pull in CUDA.
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || lean_missing+=(python3-torch)
if [ ${#lean_missing[@]} -gt 0 ]; then
  echo "installing: ${lean_missing[*]}"
  [ ${#missing[@]} -gt 0 ] || as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${lean_missing[@]}" >/dev/null
fi
npm ci --prefix end2end --no-audit --no-fund --loglevel=error

step "install: Python virtualenv with the SDK, pytest, the official MCP client, an SMTP server, pyarrow, Schemathesis, the mlflow client, moto's S3 server, the wandb client and Optuna (PyPI)"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check --upgrade ./sdk/python pytest \
  "mcp==$MCP_CLIENT_VERSION" "jsonschema==$JSONSCHEMA_VERSION" "aiosmtpd==$AIOSMTPD_VERSION" \
  "pyarrow==$PYARROW_VERSION" "schemathesis==$SCHEMATHESIS_VERSION" "mlflow-skinny==$MLFLOW_CLIENT_VERSION" \
  "moto[server]==$MOTO_VERSION" "wandb==$WANDB_VERSION" "optuna==$OPTUNA_VERSION"

step "install: the peers, pinned, into target/bench-venv (MLflow 3 with its server, TensorBoard, tensorboardX): the benchmarks measure them, gpuctl import mlflow's test copies from that MLflow server"
bash bench/peers-venv.sh

step "cargo fmt --check"
cargo fmt --all --check

step "layers: the server's and the bench's modules import only down their order (cargo xtask layers)"
cargo xtask layers

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo nextest (Rust unit and integration tests)"
cargo nextest run --workspace --locked --no-fail-fast

# Not these three: `migrate` copies an SQLite install into PostgreSQL (it
# starts both itself), `replicas` starts its own PostgreSQL for its two
# servers (it ran above), and `diskfull` fills the data dir's disk, which
# PostgreSQL's files are not on.
step "cargo nextest on PostgreSQL (the server's and the system suites again, each test server on a database of its own: scripts/with-postgres.sh)"
scripts/with-postgres.sh cargo nextest run --locked --no-fail-fast -p gpuplane-server -p gpuplane-testkit \
  -E 'kind(test) - test(/^migrate::/) - test(/^replicas::/) - test(/^diskfull::/)'

step "build the console bundle and binaries"
cargo xtask site
cargo build --locked -p gpuplane-server -p gpuplane-agent -p gpuctl

step "docs: commands, config keys and paths named in the docs exist"
python3 scripts/check-docs.py --bin-dir "${CARGO_TARGET_DIR:-target}/debug"

step "pytest (the Python SDK, MCP through the official client, the mlflow and wandb clients, a sweep of trials logging through both judged as Optuna judges, alerts to real receivers, and Schemathesis, against the real server)"
.venv/bin/python -m pytest -q sdk/python/tests testkit/mcp testkit/mlflow testkit/wandb testkit/sweeps testkit/alerts testkit/fuzz

step "browser tests (Playwright, headless Chromium)"
(cd end2end && npx playwright test)

step "benchmarks: the report in smoke mode (every benchmark and the peers, installed above into target/bench-venv, at toy sizes)"
bash bench/report.sh --smoke

# Last: the packaged server embeds the console, which rebuilds the server crate.
step "package: cargo xtask dist --debug, then scripts/check-dist.py unpacks and runs it"
cargo xtask dist --debug
python3 scripts/check-dist.py "${CARGO_TARGET_DIR:-target}"/dist/gpuplane-*-linux-debug.tar.gz

current=""
echo
echo "PASSED: fmt, clippy, Rust tests, docs, SDK tests, browser tests, benchmark smoke, package in $(( $(date +%s) - started ))s"
