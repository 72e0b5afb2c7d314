#!/usr/bin/env bash
# Builds and runs GPUPlane on this machine: a server on 127.0.0.1:8600 with its
# SQLite data in .gpuplane/, and an agent connected to it (simulated GPUs when
# the host has no NVIDIA driver). Ctrl-C stops both.
#
# Environment: GPUPLANE_DATA_DIR (default .gpuplane), GPUPLANE_BIND (default
# 127.0.0.1:8600), GPUPLANE_FAKE_GPUS (default 2 without a driver, none with one).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

export GPUPLANE_DATA_DIR="${GPUPLANE_DATA_DIR:-$root/.gpuplane}"
bind="${GPUPLANE_BIND:-127.0.0.1:8600}"
url="http://$bind"

echo "==> building (first time: a few minutes)"
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
cargo xtask site
cargo build --quiet -p gpuplane-server -p gpuplane-agent -p gpuctl
bin="${CARGO_TARGET_DIR:-$root/target}/debug"

mkdir -p "$GPUPLANE_DATA_DIR"
chmod 700 "$GPUPLANE_DATA_DIR"
secrets="$GPUPLANE_DATA_DIR/secrets"
if [ ! -f "$secrets/admin-token" ]; then
  echo "==> first run: creating the admin account and tokens in $secrets"
  mkdir -p "$secrets"
  umask 077
  head -c 18 /dev/urandom | base64 | tr '+/' '-_' > "$secrets/admin-password"
  "$bin/gpuplane-server" admin create-user admin --admin --password-stdin < "$secrets/admin-password"
  "$bin/gpuplane-server" admin create-token --user admin --scope write --name run-sh > "$secrets/admin-token"
  "$bin/gpuplane-server" admin create-agent-token --name local-agent > "$secrets/agent-token"
fi

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo
  echo "==> stopping"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

"$bin/gpuplane-server" serve --bind "$bind" &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "$url/api/v1/health" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "the server did not start (see above)"; exit 1; }
  sleep 0.1
done

# The token file is 0600 (umask above); never put a token in argv, where
# other users of the host can read it in /proc.
agent_args=(--server "$url" --token-file "$secrets/agent-token")
if [ -n "${GPUPLANE_FAKE_GPUS:-}" ]; then
  [ "$GPUPLANE_FAKE_GPUS" != 0 ] && agent_args+=(--fake-gpus "$GPUPLANE_FAKE_GPUS")
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  agent_args+=(--fake-gpus 2)
fi
env -u GPUPLANE_FAKE_GPUS "$bin/gpuplane-agent" "${agent_args[@]}" &
pids+=($!)

cat <<INFO

GPUPlane is running.
  Console   $url/
  Account   admin / $(cat "$secrets/admin-password")
  API token $(cat "$secrets/admin-token")   (scope write)
  CLI       export GPUCTL_SERVER=$url GPUCTL_TOKEN=\$(cat $secrets/admin-token)
            $bin/gpuctl status
  Data      $GPUPLANE_DATA_DIR
Press Ctrl-C to stop.

INFO
wait -n "${pids[@]}"
