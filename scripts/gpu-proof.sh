#!/usr/bin/env bash
# Proves GPU telemetry on a host with a real NVIDIA GPU and PyTorch: starts a
# server and an agent (NVML, no simulated GPUs), runs a job that idles, then
# multiplies bf16 matrices for 30 s, then idles, and prints what the run's
# System tab holds for it (utilisation, power, SM clock, memory, temperature)
# next to what nvidia-smi read at the same time, and the agent's CPU while
# it samples the GPU through NVML every second.
#
#   scripts/gpu-proof.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds release builds of gpuplane-server, gpuplane-agent and gpuctl;
# OUT_DIR receives the JSON, the chart and the logs. Needs python3 with torch.
set -euo pipefail
bin=$(realpath "$1")
out=$(realpath "$2")
python=$(command -v python3)
work=$(mktemp -d)
export GPUPLANE_DATA_DIR="$work/data"
url=http://127.0.0.1:8600
mkdir -p "$GPUPLANE_DATA_DIR/secrets" "$out"
secrets="$GPUPLANE_DATA_DIR/secrets"
(
  umask 077
  "$bin/gpuplane-server" admin create-user admin --admin --password-stdin <<<"proof-password-$RANDOM$RANDOM" >/dev/null
  "$bin/gpuplane-server" admin create-token --user admin --scope write --name proof >"$secrets/admin-token"
  "$bin/gpuplane-server" admin create-agent-token --name proof-agent >"$secrets/agent-token"
)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
"$bin/gpuplane-server" serve --bind 127.0.0.1:8600 >"$out/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "$url/api/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin/gpuplane-agent" --server "$url" --token-file "$secrets/agent-token" \
  --jobs-dir "$work/jobs" --telemetry-interval 1 >"$out/agent.log" 2>&1 &
agent=$!
pids+=($agent)
# CPU seconds the agent has used so far (user + system).
agent_cpu() { awk -v tck="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / tck }' "/proc/$agent/stat"; }
export GPUCTL_SERVER=$url GPUCTL_TOKEN
GPUCTL_TOKEN=$(cat "$secrets/admin-token")
for _ in $(seq 1 100); do
  "$bin/gpuctl" node status --json 2>/dev/null | grep -q '"ONLINE"' && break
  sleep 0.2
done
echo "== the node as the agent reported it (NVML)"
"$bin/gpuctl" node status

nvidia-smi --query-gpu=timestamp,utilization.gpu,power.draw,clocks.sm,memory.used,temperature.gpu \
  --format=csv,noheader -l 1 >"$out/nvidia-smi.csv" &
pids+=($!)

echo "== the agent at rest for 30 s, sampling the GPU every second"
cpu_before=$(agent_cpu)
sleep 30
awk -v a="$cpu_before" -v b="$(agent_cpu)" 'BEGIN { printf "agent CPU: %.2f %% of a core\n", (b - a) / 30 * 100 }'

cat >"$work/load.py" <<'PY'
import time, torch
time.sleep(8)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
start, n = time.time(), 0
while time.time() - start < 30:
    c = a @ b
    n += 1
    if n % 100 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
seconds = time.time() - start
print(f"{n} products of 8192x8192 bf16 in {seconds:.1f} s: {n * 2 * 8192**3 / seconds / 1e12:.0f} TFLOP/s", flush=True)
del a, b, c
torch.cuda.empty_cache()
time.sleep(8)
PY
# Outside any git checkout: the job traces no commit.
cd "$work"
job=$("$bin/gpuctl" job submit --json --gpus 1 --name matmul-proof -- "$python" "$work/load.py")
job_id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$job")
run_id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["run_id"])' "$job")
echo "== job $job_id (run $run_id) submitted"
timeout 120 "$bin/gpuctl" logs -f "$job_id" || true
"$bin/gpuctl" job show "$job_id"
# The agent sends telemetry every 5 samples; let the last batch arrive.
sleep 8
curl -fsS -H "Authorization: Bearer $GPUCTL_TOKEN" "$url/api/v1/runs/$run_id/system?max_points=5000" >"$out/system.json"
curl -fsS -H "Authorization: Bearer $GPUCTL_TOKEN" "$url/api/v1/runs/$run_id/system.svg?field=utilization_percent" >"$out/system-utilization.svg" || true
curl -fsS -H "Authorization: Bearer $GPUCTL_TOKEN" "$url/api/v1/runs/$run_id/system.svg?field=power_w" >"$out/system-power.svg" || true
echo "== gpuctl run system $run_id"
"$bin/gpuctl" run system "$run_id"
echo "== the System tab's data, GPU 0, second by second (utilisation %, power W, SM clock MHz, memory MiB, temperature C)"
python3 - "$out/system.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
rows = {}
for series in data["series"]:
    if series["gpu"] != 0:
        continue
    for point in series["series"]["points"] or []:
        rows.setdefault(round(point["step"] / 1000), {})[series["field"]] = float(point["value"])
start = min(rows) if rows else 0
fields = ["utilization_percent", "power_w", "sm_clock_mhz", "memory_used_mib", "temperature_c"]
for time in sorted(rows):
    print(f"t+{time - start:3d}s  " + "  ".join(f"{rows[time].get(f, float('nan')):8.1f}" for f in fields))
PY
echo "== nvidia-smi at the same time (timestamp, util, power, SM clock, memory, temperature)"
cat "$out/nvidia-smi.csv"
