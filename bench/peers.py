"""Side by side with the peers, in one run: MLflow 3's tracking server (SQLite
store) and TensorBoard's readers (Python EventAccumulator, Rust data server),
against GPUPlane on the same machine. Run through bench/peers.sh, which
installs the peers from PyPI into a virtualenv and builds GPUPlane.

Figures: metric ingest (points/s) and reading back one 100,000-point metric;
parsing a 1,000,000-scalar TensorBoard file written by tensorboardX, and the
bytes a point of that file against GPUPlane's database holding its scalars.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
RELEASE = os.path.join(TARGET, "release")
VENV_BIN = os.path.dirname(sys.executable)
POINTS = 100_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def http(method, url, token=None, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read() or b"null")


def gpuplane(results):
    data = tempfile.mkdtemp(prefix="bench-gpuplane-")
    server_bin = os.path.join(RELEASE, "gpuplane-server")
    run = lambda *args, input=None: subprocess.run([server_bin, "--data-dir", data, *args], input=input, capture_output=True, text=True, check=True).stdout.strip()
    run("admin", "create-user", "bench", "--admin", "--password-stdin", input="bench-password\n")
    token = run("admin", "create-token", "--user", "bench", "--scope", "write")
    port = free_port()
    server = subprocess.Popen([server_bin, "--data-dir", data, "serve", "--bind", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        wait_http(f"{base}/health")
        for batch in (1000, 10_000):
            run_id = http("POST", f"{base}/runs", token, {"name": f"bench-{batch}"})["id"]
            bodies = []
            for start in range(0, POINTS, batch):
                points = [{"key": "train/loss", "step": s, "wall_time": 1.7e9 + s, "value": 1.0 / (s + 1)} for s in range(start, start + batch)]
                bodies.append(json.dumps({"batch_id": f"b{start}", "points": points}).encode())
            started = time.perf_counter()
            for body in bodies:
                request = urllib.request.Request(f"{base}/runs/{run_id}/metrics", data=body, method="POST")
                request.add_header("Authorization", f"Bearer {token}")
                request.add_header("Content-Type", "application/json")
                urllib.request.urlopen(request).read()
            seconds = time.perf_counter() - started
            results.append(("ingest", f"GPUPlane, {batch:,} per request, 1 client (Python urllib)", POINTS / seconds, "points/s"))
        started = time.perf_counter()
        series = http("GET", f"{base}/runs/{run_id}/metrics?key=train/loss&max_points=100000", token)
        seconds = time.perf_counter() - started
        assert len(series["points"]) == POINTS
        results.append(("history", "GPUPlane, all 100,000 points of one metric, an object a point (urllib + json)", seconds, "s"))
        history_with_the_sdk(results, f"http://127.0.0.1:{port}", token, run_id)
        started = time.perf_counter()
        series = http("GET", f"{base}/runs/{run_id}/metrics?key=train/loss&max_points=2000", token)
        results.append(("history", "GPUPlane, the same metric as 2,000 buckets", time.perf_counter() - started, "s"))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def median_seconds(read, repeat=9):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def history_with_the_sdk(results, server, token, run_id):
    """gpuplane.history() end to end: as Arrow (pyarrow installed) and as JSON columns (without)."""
    sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
    import gpuplane

    def read():
        history = gpuplane.history(run_id, "train/loss", server=server, token=token)
        assert len(history.values) == POINTS

    results.append(("history", "GPUPlane SDK history(), 100,000 points as Arrow into pyarrow (median of 9)", median_seconds(read), "s"))
    arrow = sys.modules.pop("pyarrow.ipc", None)
    sys.modules["pyarrow.ipc"] = None  # read as where pyarrow is not installed
    try:
        results.append(("history", "GPUPlane SDK history(), 100,000 points as JSON columns (median of 9)", median_seconds(read), "s"))
    finally:
        del sys.modules["pyarrow.ipc"]
        if arrow is not None:
            sys.modules["pyarrow.ipc"] = arrow


def mlflow(results):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    data = tempfile.mkdtemp(prefix="bench-mlflow-")
    port = free_port()
    server = subprocess.Popen(
        [os.path.join(VENV_BIN, "mlflow"), "server", "--backend-store-uri", f"sqlite:///{data}/mlflow.db",
         "--default-artifact-root", f"{data}/artifacts", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout=120)
        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
        experiment = client.create_experiment("bench")
        run = client.create_run(experiment)
        run_id = run.info.run_id
        started = time.perf_counter()
        for start in range(0, POINTS, 1000):
            metrics = [Metric("train_loss", 1.0 / (s + 1), int(1.7e12 + s), s) for s in range(start, start + 1000)]
            client.log_batch(run_id, metrics=metrics)
        seconds = time.perf_counter() - started
        results.append(("ingest", "MLflow 3 server (SQLite), log_batch 1,000 per request, 1 client", POINTS / seconds, "points/s"))
        started = time.perf_counter()
        history = client.get_metric_history(run_id, "train_loss")
        seconds = time.perf_counter() - started
        assert len(history) == POINTS, len(history)
        results.append(("history", "MLflow 3, get_metric_history of 100,000 points", seconds, "s"))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def tensorboard_file():
    """A 1,000,000-scalar event file written by tensorboardX (cached in target/)."""
    directory = os.path.join(TARGET, "bench-tfevents")
    marker = os.path.join(directory, "complete")
    if not os.path.exists(marker):
        shutil.rmtree(directory, ignore_errors=True)
        from tensorboardX import SummaryWriter

        writer = SummaryWriter(os.path.join(directory, "run"))
        for step in range(1_000_000):
            writer.add_scalar("loss", 1.0 / (step + 1), step, walltime=1.7e9 + step)
        writer.close()
        open(marker, "w").close()
    (name,) = os.listdir(os.path.join(directory, "run"))
    return os.path.join(directory, "run", name)


def tensorboard(results):
    path = tensorboard_file()
    size_mb = os.path.getsize(path) / 1e6
    output = subprocess.run([os.path.join(RELEASE, "gpuplane-bench"), "tfevents", path], capture_output=True, text=True, check=True).stdout
    scalars, seconds = output.split()
    results.append(("tfevents", f"GPUPlane agent reader, CRC on every record ({size_mb:.0f} MB)", int(scalars) / float(seconds), "scalars/s"))
    results.append(("storage", "TensorBoard event file, bytes a point", os.path.getsize(path) / int(scalars), "B"))
    output = subprocess.run([os.path.join(RELEASE, "gpuplane-bench"), "storage", path], capture_output=True, text=True, check=True).stdout
    in_use = re.search(r"([0-9.]+) bytes a point in use", output)
    results.append(("storage", "GPUPlane database, the same scalars through the server, bytes a point", float(in_use.group(1)), "B"))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    started = time.perf_counter()
    accumulator = EventAccumulator(path, size_guidance={"scalars": 0})
    accumulator.Reload()
    seconds = time.perf_counter() - started
    assert len(accumulator.Scalars("loss")) == 1_000_000
    results.append(("tfevents", "TensorBoard EventAccumulator (Python)", 1_000_000 / seconds, "scalars/s"))

    import tensorboard_data_server

    rustboard = os.path.join(os.path.dirname(tensorboard_data_server.__file__), "bin", "server")
    for flags, label in (([], "no CRC unless parsing fails (its default)"), (["--checksum"], "CRC on every record")):
        started = time.perf_counter()
        process = subprocess.Popen(
            [rustboard, "--logdir", os.path.dirname(os.path.dirname(path)), "--port", "0", "-v", *flags],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        elapsed = None
        for line in process.stderr:
            if re.search(r"finished load cycle", line, re.IGNORECASE):
                elapsed = time.perf_counter() - started
                break
        process.kill()
        process.wait()
        if elapsed:
            results.append(("tfevents", f"TensorBoard data server (Rust, \"rustboard\"), {label}, first load cycle", 1_000_000 / elapsed, "scalars/s"))


def main():
    results = []
    gpuplane(results)
    mlflow(results)
    tensorboard(results)
    print()
    print(f"{'measure':<9} {'what':<92} {'figure':>14}")
    for measure, what, value, unit in results:
        figure = f"{value:.3f} s" if unit == "s" else f"{value:.2f} B" if unit == "B" else f"{value:,.0f} {unit}"
        print(f"{measure:<9} {what:<92} {figure:>14}")


if __name__ == "__main__":
    main()
