"""GPUPlane and its peers, measured in one run on the same machine: MLflow
3's tracking server (SQLite store) and TensorBoard's readers (the Python
EventAccumulator and the Rust data server). `gpuplane-bench report` runs it
(see bench/report.sh, which installs the peers into target/bench-venv);
alone it prints a table.

Figures, each for GPUPlane and its peer from a Python client: metric ingest
(1 client, and 4 processes at once, 1,000 points a request); all points of
one metric (100,000 and 1,000,000) read back; the same metrics downsampled
to 2,000 points (GPUPlane's buckets, MLflow's get-history-bulk-interval);
bytes on disk a point; parsing a 1,000,000-scalar event file written by
tensorboardX. The unmodified mlflow client runs the same ingest, history,
downsampling and a run search against GPUPlane (`mlflow_client.*`) and
against MLflow's own server (`mlflow.*`).

  --json   one figure a line: {"id", "what", "value", "unit"}
  --smoke  toy sizes (seconds), so the script never rots
"""

import json
import multiprocessing
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
BIN_DIR = os.environ.get("GPUPLANE_BENCH_BIN_DIR", os.path.join(TARGET, "release"))
VENV_BIN = os.path.dirname(sys.executable)
SMOKE = "--smoke" in sys.argv
JSON = "--json" in sys.argv
# Points of the small and the large metric; scalars of the event file.
SMALL = 2_000 if SMOKE else 100_000
LARGE = 20_000 if SMOKE else 1_000_000
SCALARS = 10_000 if SMOKE else 1_000_000
CLIENTS = 4
PER_REQUEST = 1_000
READS = 3 if SMOKE else 9
# Runs a search looks through.
SEARCH_RUNS = 50 if SMOKE else 1_000
# The mlflow client sends nothing to MLflow's telemetry.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"

results = []


def emit(id, what, value, unit):
    results.append((id, what, value, unit))
    if JSON:
        print(json.dumps({"id": id, "what": what, "value": value, "unit": unit}), flush=True)
    print(f"peers: {what}: {value:,.4g} {unit}", file=sys.stderr, flush=True)


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
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read() or b"null")


def median_seconds(read, repeat=READS, clock=time.perf_counter):
    times = []
    for _ in range(repeat):
        started = clock()
        read()
        times.append(clock() - started)
    return sorted(times)[len(times) // 2]


def loss(step):
    return 1.0 / (step + 1)


def in_processes(work, args):
    """Runs `work(barrier, *arg)` in a process for each of `args`; the seconds
    from the moment all are ready (bodies prepared) until the last is done."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(args) + 1)
    processes = [context.Process(target=work, args=(barrier, *arg)) for arg in args]
    for process in processes:
        process.start()
    barrier.wait()
    started = time.perf_counter()
    for process in processes:
        process.join()
        assert process.exitcode == 0, f"a client failed: {process.exitcode}"
    return time.perf_counter() - started


# GPUPlane


def gpuplane_bodies(points, per_request):
    bodies = []
    for start in range(0, points, per_request):
        batch = [{"key": "train/loss", "step": s, "wall_time": 1.7e9 + s, "value": loss(s)} for s in range(start, min(points, start + per_request))]
        bodies.append(json.dumps({"batch_id": f"b{start}", "points": batch}).encode())
    return bodies


def gpuplane_send(base, token, run_id, bodies):
    for body in bodies:
        request = urllib.request.Request(f"{base}/runs/{run_id}/metrics", data=body, method="POST")
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        urllib.request.urlopen(request).read()


def gpuplane_client(barrier, base, token, run_id, points):
    bodies = gpuplane_bodies(points, PER_REQUEST)
    barrier.wait()
    gpuplane_send(base, token, run_id, bodies)


def gpuplane():
    data = tempfile.mkdtemp(prefix="bench-gpuplane-")
    server_bin = os.path.join(BIN_DIR, "gpuplane-server")
    run = lambda *args, input=None: subprocess.run([server_bin, "--data-dir", data, *args], input=input, capture_output=True, text=True, check=True).stdout.strip()
    run("admin", "create-user", "bench", "--admin", "--password-stdin", input="bench-password\n")
    token = run("admin", "create-token", "--user", "bench", "--scope", "write")
    port = free_port()
    server = subprocess.Popen([server_bin, "--data-dir", data, "serve", "--bind", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/api/v1"
    new_run = lambda name: http("POST", f"{base}/runs", token, {"name": name})["id"]
    try:
        wait_http(f"{base}/health")
        small = new_run("small")
        bodies = gpuplane_bodies(SMALL, PER_REQUEST)
        started = time.perf_counter()
        gpuplane_send(base, token, small, bodies)
        emit("ingest.python.1", f"1 client (Python urllib), {PER_REQUEST:,} points a request", SMALL / (time.perf_counter() - started), "points/s")
        runs = [(base, token, new_run(f"client-{c}"), SMALL) for c in range(CLIENTS)]
        seconds = in_processes(gpuplane_client, runs)
        emit("ingest.python.4", f"{CLIENTS} clients at once (Python processes), {PER_REQUEST:,} points a request, a run each", CLIENTS * SMALL / seconds, "points/s")
        large = new_run("large")
        gpuplane_send(base, token, large, gpuplane_bodies(LARGE, 10_000))
        history_with_the_sdk(f"http://127.0.0.1:{port}", token, small, large)
        with_the_mlflow_client("mlflow_client", "the unmodified mlflow client → GPUPlane", f"http://127.0.0.1:{port}", token)

        def objects():
            series = http("GET", f"{base}/runs/{small}/metrics?key=train/loss&max_points={SMALL}", token)
            assert len(series["points"]) == SMALL

        emit("history.small.objects", f"all {SMALL:,} points of a metric, an object a point (urllib + json)", median_seconds(objects) * 1000, "ms")
        for size, run_id, name in ((SMALL, small, "small"), (LARGE, large, "large")):
            def buckets():
                series = http("GET", f"{base}/runs/{run_id}/metrics?key=train/loss&max_points=2000", token)
                assert 0 < len(series.get("buckets") or series["points"]) <= 2000

            emit(f"downsample.{name}", f"a metric of {size:,} points → 2,000 buckets (urllib + json)", median_seconds(buckets) * 1000, "ms")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def history_with_the_sdk(server, token, small, large):
    """gpuplane.history() end to end: as Arrow (pyarrow installed) and as JSON columns (without)."""
    sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
    import gpuplane

    def reader(run_id, points):
        def read():
            history = gpuplane.history(run_id, "train/loss", server=server, token=token, max_points=points)
            assert len(history.values) == points

        return read

    emit("history.small.sdk", f"all {SMALL:,} points of a metric, SDK history() as Arrow into pyarrow", median_seconds(reader(small, SMALL)) * 1000, "ms")
    emit("history.large.sdk", f"all {LARGE:,} points of a metric, SDK history() as Arrow into pyarrow", median_seconds(reader(large, LARGE)) * 1000, "ms")
    arrow = sys.modules.pop("pyarrow.ipc", None)
    sys.modules["pyarrow.ipc"] = None  # read as where pyarrow is not installed
    try:
        emit("history.small.columns", f"all {SMALL:,} points of a metric, SDK history() as JSON columns (no pyarrow)", median_seconds(reader(small, SMALL)) * 1000, "ms")
    finally:
        del sys.modules["pyarrow.ipc"]
        if arrow is not None:
            sys.modules["pyarrow.ipc"] = arrow


# MLflow


def mlflow_metrics(points, first=0):
    from mlflow.entities import Metric

    return [[Metric("train_loss", loss(s), int(1.7e12 + s), s) for s in range(start, min(first + points, start + PER_REQUEST))] for start in range(first, first + points, PER_REQUEST)]


def mlflow_client(barrier, uri, run_id, points, first=0):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    batches = mlflow_metrics(points, first)
    barrier.wait()
    for metrics in batches:
        client.log_batch(run_id, metrics=metrics)


def with_the_mlflow_client(prefix, label, uri, token=None):
    """Ingest, history, downsampling and a run search through the mlflow
    client against the server at `uri` (GPUPlane or MLflow's own); the
    points it stored."""
    from mlflow.tracking import MlflowClient
    from mlflow.entities import Metric, Param

    if token:
        os.environ["MLFLOW_TRACKING_TOKEN"] = token
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("bench")
    new_run = lambda: client.create_run(experiment).info.run_id
    small = new_run()
    batches = mlflow_metrics(SMALL)
    started, computed = time.perf_counter(), time.process_time()
    for metrics in batches:
        client.log_batch(small, metrics=metrics)
    emit(f"{prefix}.ingest.1", f"{label}, 1 client, log_batch of {PER_REQUEST:,}", SMALL / (time.perf_counter() - started), "points/s")
    # The client's own CPU time bounds what any server can take from it.
    emit(f"{prefix}.ingest.client_bound", f"{label}: the most the client's own CPU time allows, log_batch of {PER_REQUEST:,}", SMALL / (time.process_time() - computed), "points/s")
    runs = [(uri, new_run(), SMALL) for _ in range(CLIENTS)]
    seconds = in_processes(mlflow_client, runs)
    emit(f"{prefix}.ingest.4", f"{label}, {CLIENTS} clients at once (processes), log_batch of {PER_REQUEST:,}, a run each", CLIENTS * SMALL / seconds, "points/s")
    # The large metric is not timed: sent by 4 processes, a quarter of the steps each.
    large = new_run()
    in_processes(mlflow_client, [(uri, large, LARGE // CLIENTS, c * LARGE // CLIENTS) for c in range(CLIENTS)])
    for size, run_id, name in ((SMALL, small, "small"), (LARGE, large, "large")):
        def history():
            assert len(client.get_metric_history(run_id, "train_loss")) == size

        emit(f"{prefix}.history.{name}", f"{label}, get_metric_history of {size:,} points", median_seconds(history, 1 if size == LARGE else READS) * 1000, "ms")
        if size == SMALL:
            emit(f"{prefix}.history.small.client_bound", f"{label}: the client's own CPU time in get_metric_history of {size:,} points", median_seconds(history, clock=time.process_time) * 1000, "ms")

        def sampled():
            answer = http("GET", f"{uri}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids={run_id}&metric_key=train_loss&max_results=2000", token)
            assert 0 < len(answer["metrics"]) <= 2000 + 2, len(answer["metrics"])

        emit(f"{prefix}.downsample.{name}", f"{label}, get-history-bulk-interval of {size:,} points to 2,000", median_seconds(sampled) * 1000, "ms")
    # A search over runs with a param and a metric each.
    searched = client.create_experiment("bench-search")
    for n in range(SEARCH_RUNS):
        run_id = client.create_run(searched).info.run_id
        client.log_batch(run_id, metrics=[Metric("train_loss", loss(n), int(1.7e12), 0)], params=[Param("lr", str(n % 10 / 10))])

    def search():
        found = client.search_runs([searched], filter_string="metrics.train_loss < 10 and params.lr = '0.1'", max_results=1000)
        assert len(found) == SEARCH_RUNS // 10, len(found)

    emit(f"{prefix}.search", f"{label}, search_runs of {SEARCH_RUNS:,} runs by a metric and a param", median_seconds(search) * 1000, "ms")
    return SMALL * (1 + CLIENTS) + LARGE


def mlflow():
    data = tempfile.mkdtemp(prefix="bench-mlflow-")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [os.path.join(VENV_BIN, "mlflow"), "server", "--backend-store-uri", f"sqlite:///{data}/mlflow.db",
         "--default-artifact-root", f"{data}/artifacts", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_http(f"{uri}/health", timeout=180)
        stored = with_the_mlflow_client("mlflow", "MLflow 3 server (SQLite)", uri)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
    database = sum(os.path.getsize(os.path.join(data, name)) for name in os.listdir(data) if name.startswith("mlflow.db"))
    emit("storage.mlflow", f"MLflow 3's SQLite database, {stored:,} points", database / stored, "B")
    shutil.rmtree(data, ignore_errors=True)


# TensorBoard


def tensorboard_file(directory):
    """An event file of SCALARS scalars written by tensorboardX (the full one cached in target/)."""
    marker = os.path.join(directory, "complete")
    if not os.path.exists(marker):
        shutil.rmtree(directory, ignore_errors=True)
        from tensorboardX import SummaryWriter

        writer = SummaryWriter(os.path.join(directory, "run"))
        for step in range(SCALARS):
            writer.add_scalar("loss", loss(step), step, walltime=1.7e9 + step)
        writer.close()
        open(marker, "w").close()
    (name,) = os.listdir(os.path.join(directory, "run"))
    return os.path.join(directory, "run", name)


def tensorboard():
    scratch = tempfile.mkdtemp(prefix="bench-tfevents-") if SMOKE else None
    path = tensorboard_file(scratch or os.path.join(TARGET, "bench-tfevents"))
    size_mb = os.path.getsize(path) / 1e6
    bench = os.path.join(BIN_DIR, "gpuplane-bench")
    output = subprocess.run([bench, "tfevents", path], capture_output=True, text=True, check=True).stdout
    scalars, seconds = output.split()
    assert int(scalars) == SCALARS, scalars
    emit("tfevents.gpuplane", f"GPUPlane agent's reader, CRC on every record, {SCALARS:,} scalars ({size_mb:.0f} MB)", SCALARS / float(seconds), "scalars/s")
    emit("storage.tfevents.file", f"a TensorBoard event file (tensorboardX), {SCALARS:,} scalars", os.path.getsize(path) / SCALARS, "B")
    output = subprocess.run([bench, "storage", path], capture_output=True, text=True, check=True).stdout
    in_use = re.search(r"([0-9.]+) bytes a point in use", output)
    emit("storage.tfevents.gpuplane", f"GPUPlane's database holding the event file's {SCALARS:,} scalars", float(in_use.group(1)), "B")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    started = time.perf_counter()
    accumulator = EventAccumulator(path, size_guidance={"scalars": 0})
    accumulator.Reload()
    seconds = time.perf_counter() - started
    assert len(accumulator.Scalars("loss")) == SCALARS
    emit("tfevents.accumulator", "TensorBoard's EventAccumulator (Python)", SCALARS / seconds, "scalars/s")

    import tensorboard_data_server

    rustboard = os.path.join(os.path.dirname(tensorboard_data_server.__file__), "bin", "server")
    for flags, id, label in (([], "tfevents.rustboard", "no CRC unless parsing fails (its default)"), (["--checksum"], "tfevents.rustboard.crc", "CRC on every record")):
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
        assert elapsed, "the TensorBoard data server never finished a load cycle"
        emit(id, f"TensorBoard's Rust data server, {label}, its first load cycle", SCALARS / elapsed, "scalars/s")
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    gpuplane()
    mlflow()
    tensorboard()
    if not JSON:
        print(f"\n{'what':<100} {'figure':>16}")
        for _, what, value, unit in results:
            print(f"{what:<100} {value:>12,.4g} {unit}")


if __name__ == "__main__":
    main()
