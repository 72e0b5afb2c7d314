"""`gpuctl import mlflow` from a real MLflow tracking server (MLflow 3's own,
installed by bench/peers-venv.sh into target/bench-venv) into a real
gpuplane-server. Runs are logged into MLflow with the unmodified mlflow
client, and what arrived is read back with the same client from GPUPlane:
the two sides' dumps must be equal. A proxy in front of MLflow's server
cuts one import off, to show the next one completing it."""

import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import GPUCTL_BIN, Server, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MLFLOW_BIN = os.environ.get("GPUPLANE_MLFLOW_BIN") or str(
    Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "bench-venv" / "bin" / "mlflow")
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    assert Path(MLFLOW_BIN).exists(), f"{MLFLOW_BIN} is missing: bash bench/peers-venv.sh"
    data = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    process = subprocess.Popen(
        [MLFLOW_BIN, "server", "--backend-store-uri", f"sqlite:///{data}/mlflow.db",
         "--artifacts-destination", f"{data}/artifacts", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, **QUIET},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            assert process.poll() is None, "MLflow's server exited"
            assert time.monotonic() < deadline, "MLflow's server did not start"
            time.sleep(0.5)
    logged = client_script(url, None, LOG_HISTORY)
    yield url, logged
    os.killpg(process.pid, signal.SIGTERM)
    process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(str(tmp_path_factory.mktemp("server")), free_port())
    server.start()
    yield server
    server.stop()


def client_script(uri, token, code):
    """Runs `code` with the mlflow client pointed at `uri`; its last stdout
    line, as JSON."""
    env = {**os.environ, **QUIET, "MLFLOW_TRACKING_URI": uri}
    env.pop("MLFLOW_TRACKING_TOKEN", None)
    if token:
        env["MLFLOW_TRACKING_TOKEN"] = token
    prelude = "import hashlib, json, math, os, tempfile, mlflow\n"
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# The history teams have: a sweep of two runs (one killed), more params and
# tags than one log-batch takes, a metric longer than one page of history
# with NaN and ±Inf in it, artifacts in folders; a run in Default; a run
# deleted in MLflow (not imported); an experiment named with a terminal
# escape.
LOG_HISTORY = """
    import tempfile
    client = mlflow.MlflowClient()
    sweep = client.create_experiment("Sweep A", tags={"owner": "vision"})
    folder = tempfile.mkdtemp()
    os.makedirs(os.path.join(folder, "model", "tokenizer"))
    with open(os.path.join(folder, "model", "weights.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    with open(os.path.join(folder, "model", "tokenizer", "vocab.txt"), "w") as f:
        f.write("a\\nb\\n")
    start = 1_764_460_800_000
    for lr, status in ((0.1, "FINISHED"), (0.01, "KILLED")):
        run = client.create_run(sweep, run_name=f"lr-{lr}", start_time=start, tags={"team": "vision"})
        run_id = run.info.run_id
        for chunk in range(0, 120, 100):
            client.log_batch(run_id, params=[mlflow.entities.Param(f"p{i}", str(i * lr)) for i in range(chunk, min(chunk + 100, 120))])
            client.log_batch(run_id, tags=[mlflow.entities.RunTag(f"t{i}", f"v{i}") for i in range(chunk, min(chunk + 100, 120))])
        values = [1.0 / (step + 1) for step in range(30_000)]
        values[13], values[14], values[15] = math.nan, math.inf, -math.inf
        for chunk in range(0, 30_000, 1000):
            client.log_batch(run_id, metrics=[mlflow.entities.Metric("loss", values[step], start + step, step)
                                              for step in range(chunk, chunk + 1000)])
        client.log_metric(run_id, "acc", 0.5 + lr, timestamp=start + 7, step=3)
        client.log_artifacts(run_id, os.path.join(folder, "model"), artifact_path="model")
        client.set_terminated(run_id, status=status, end_time=start + 60_000)
    default = client.create_run("0", run_name="in-default", start_time=start)
    client.log_metric(default.info.run_id, "acc", 0.25, timestamp=start, step=0)
    client.set_terminated(default.info.run_id, end_time=start + 1000)
    gone = client.create_run("0", run_name="deleted-in-mlflow")
    client.delete_run(gone.info.run_id)
    evil = client.create_experiment("Ops \\x1b[31m")
    client.create_run(evil, run_name="red \\x1b]0;owned\\x07")
    print(json.dumps({"sweep": sweep}))
"""

# One experiment's runs, as the client reads them, without what differs by
# nature between two servers (ids, artifact locations, the import's tags).
DUMP = """
    client = mlflow.MlflowClient()
    experiment = %r
    out = []
    for run in client.search_runs([experiment], max_results=1000):
        run_id = run.info.run_id
        history = {key: [[m.step, m.timestamp, repr(m.value)] for m in
                         sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))]
                   for key in run.data.metrics}
        artifacts, folders = {}, [""]
        while folders:
            folder = folders.pop()
            for entry in client.list_artifacts(run_id, folder or None):
                if entry.is_dir:
                    folders.append(entry.path)
                else:
                    path = client.download_artifacts(run_id, entry.path, tempfile.mkdtemp())
                    artifacts[entry.path] = hashlib.sha256(open(path, "rb").read()).hexdigest()
        out.append({
            "name": run.info.run_name, "status": run.info.status, "user": run.info.user_id,
            "start": run.info.start_time, "end": run.info.end_time, "params": run.data.params,
            "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("gpuplane.")},
            "history": history, "artifacts": artifacts,
        })
    out.sort(key=lambda run: run["name"])
    print(json.dumps({"runs": out,
                      "import_tags": sorted(k for r in client.search_runs([experiment])
                                            for k in r.data.tags if k.startswith("gpuplane."))}))
"""


def dump(uri, token, experiment_id):
    """The runs of an experiment, as the mlflow client reads them."""
    return client_script(uri, token, DUMP % experiment_id)


def experiment_ids(server, name):
    """The ids of GPUPlane's experiments named `name`, in every project."""
    return client_script(server.url, server.token, """
        found = mlflow.MlflowClient().search_experiments(filter_string="name = '%s'")
        print(json.dumps(sorted(e.experiment_id for e in found)))
    """ % name)


def gpuctl(server, *args, token=None):
    return subprocess.run(
        [GPUCTL_BIN, *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": token or server.token, "HOME": "/nonexistent"},
    )


def imported(server, *args, token=None):
    done = gpuctl(server, "--json", "import", "mlflow", *args, token=token)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_experiments_runs_histories_and_artifacts_arrive_whole_and_once(server, mlflow_server):
    source, logged = mlflow_server
    report = imported(server, "--tracking-uri", source, "--artifacts")
    names = sorted((run["experiment"], run["name"], run["outcome"]) for run in report["runs"])
    assert names == [("Default", "in-default", "imported"),
                     ("Ops ?[31m", "red ?]0;owned?", "imported"),
                     ("Sweep A", "lr-0.01", "imported"),
                     ("Sweep A", "lr-0.1", "imported")], report
    assert report["points_added"] == 2 * 30_001 + 1
    assert report["artifacts_added"] == 4

    [sweep] = experiment_ids(server, "Sweep A")
    assert sweep.startswith("0:"), "a named experiment of the default project"
    there, here = dump(source, None, logged["sweep"]), dump(server.url, server.token, sweep)
    assert here["runs"] == there["runs"]
    assert here["import_tags"] == ["gpuplane.import.done"] * 2 + ["gpuplane.import.source"] * 2
    lr = next(run for run in here["runs"] if run["name"] == "lr-0.1")
    # NaN arrives as NaN; ±Inf as MLflow's SQL store keeps them (the largest
    # floats, which it writes for infinities).
    assert lr["history"]["loss"][13:16] == [[13, 1_764_460_800_013, "nan"],
                                            [14, 1_764_460_800_014, "1.7976931348623157e+308"],
                                            [15, 1_764_460_800_015, "-1.7976931348623157e+308"]]
    assert len(lr["params"]) == 120 and len(lr["artifacts"]) == 2
    assert dump(server.url, server.token, "0")["runs"] == dump(source, None, "0")["runs"]

    # A second import adds nothing, and says so.
    again = imported(server, "--tracking-uri", source, "--artifacts")
    assert {run["outcome"] for run in again["runs"]} == {"skipped"}
    assert again["points_added"] == 0 and again["artifacts_added"] == 0
    text = gpuctl(server, "import", "mlflow", "--tracking-uri", source)
    assert text.returncode == 0 and "4 already imported; 0 point(s) added" in text.stdout, text
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout


class CutOff(http.server.BaseHTTPRequestHandler):
    """A proxy to MLflow's server that fails one request once: the second
    page of a `loss` history, as a network would."""
    upstream = ""
    failed = False

    def forward(self):
        if "get-history" in self.path and "metric_key=loss" in self.path and "page_token" in self.path \
                and not CutOff.failed:
            CutOff.failed = True
            body = json.dumps({"error_code": "TEMPORARILY_UNAVAILABLE", "message": "the test cut this off"}).encode()
            return self.answer(503, body, "application/json")
        length = int(self.headers.get("Content-Length") or 0)
        request = urllib.request.Request(
            CutOff.upstream + self.path, data=self.rfile.read(length) if length else None, method=self.command,
            headers={name: self.headers[name] for name in ("Content-Type",) if self.headers.get(name)})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                self.answer(response.status, response.read(), response.headers.get("Content-Type"))
        except urllib.error.HTTPError as error:
            self.answer(error.code, error.read(), error.headers.get("Content-Type"))

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = forward

    def log_message(self, *args):
        pass


def test_an_import_cut_off_is_completed_by_the_next_without_a_point_twice(server, mlflow_server):
    source, logged = mlflow_server
    server.post("/projects", {"name": "resumed"})
    CutOff.upstream = source
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CutOff)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    via_proxy = f"http://127.0.0.1:{proxy.server_address[1]}"
    try:
        cut = gpuctl(server, "import", "mlflow", "--tracking-uri", via_proxy, "--experiment", "Sweep A",
                     "--project", "resumed", "--artifacts")
        assert cut.returncode != 0 and "the test cut this off" in cut.stderr, cut
        assert CutOff.failed
        report = imported(server, "--tracking-uri", via_proxy, "--experiment", "Sweep A", "--project", "resumed",
                          "--artifacts")
    finally:
        proxy.shutdown()
    outcomes = sorted((run["outcome"], run["points_added"]) for run in report["runs"])
    # The cut run had its acc point and the first 25,000 loss points.
    assert outcomes == [("imported", 30_001), ("resumed", 5_000)], report
    # The runs went to the project's experiment of that name, each point once.
    [theirs] = [id for id in experiment_ids(server, "Sweep A") if id.startswith("resumed:")]
    assert dump(server.url, server.token, theirs)["runs"] == dump(source, None, logged["sweep"])["runs"]


def test_imports_go_only_where_the_token_may_write(server, mlflow_server):
    source, _ = mlflow_server
    server.post("/projects", {"name": "guarded-import"})
    server.post("/projects", {"name": "elsewhere"})
    for user, role in (("imp-viewer", "viewer"), ("imp-reader", "editor")):
        server.admin("create-user", user, "--password-stdin", input="a-password-12345\n")
        server.post("/projects/guarded-import/members", {"user": user, "role": role})
    server.admin("create-user", "imp-outsider", "--password-stdin", input="a-password-12345\n")
    server.post("/projects/elsewhere/members", {"user": "imp-outsider", "role": "editor"})
    viewer = server.admin("create-token", "--user", "imp-viewer", "--scope", "write")
    reader = server.admin("create-token", "--user", "imp-reader", "--scope", "read")
    outsider = server.admin("create-token", "--user", "imp-outsider", "--scope", "write")
    limited = server.post("/tokens", {"name": "elsewhere-only", "scope": "write", "project": "elsewhere"})["secret"]
    for token, why in ((viewer, "PERMISSION_DENIED"), (reader, "PERMISSION_DENIED"),
                       (outsider, "RESOURCE_DOES_NOT_EXIST"), (limited, "RESOURCE_DOES_NOT_EXIST")):
        done = gpuctl(server, "--json", "import", "mlflow", "--tracking-uri", source, "--experiment", "Sweep A",
                      "--project", "guarded-import", token=token)
        assert done.returncode != 0, done.stdout
        assert json.loads(done.stdout)["error"]["code"] == why, done.stdout
    runs = server.get("/runs?project=guarded-import")
    assert runs["items"] == [], "a refused import writes nothing"
    # A source that is not an MLflow server, and an address that is not http.
    refused = gpuctl(server, "import", "mlflow", "--tracking-uri", "file:///etc")
    assert refused.returncode != 0 and "http:// or https://" in refused.stderr
    missing = gpuctl(server, "import", "mlflow", "--tracking-uri", source, "--experiment", "No such")
    assert missing.returncode != 0 and 'no active experiment named "No such"' in missing.stderr
