"""The unmodified `mlflow` client (mlflow-skinny from PyPI, the version the
benchmarks pin) against a real gpuplane-server: `MLFLOW_TRACKING_URI` is
the server, `MLFLOW_TRACKING_TOKEN` a GPUPlane token. Each script runs in
its own Python process, as a training script would."""

import json
import math
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import Server, free_port  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("server"))
    server = Server(data_dir, free_port())
    server.start()
    yield server
    server.stop()


def script(server, code, token=None, retries=0):
    """Runs `code` with the mlflow client pointed at the server; its last
    stdout line, as JSON. `retries`: how often the client tries a request
    again after a dropped connection or a 5xx (never after a refusal)."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": server.url,
        "MLFLOW_TRACKING_TOKEN": token or server.token,
        # No retries by default: a refusal is the answer.
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
        # No telemetry to MLflow's servers.
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }
    prelude = "import json, math, mlflow\nfrom mlflow.exceptions import MlflowException\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    server_log = "".join(server.log[-20:])
    assert done.returncode == 0, f"{done.stderr[-3000:]}\nthe server's log, last lines:\n{server_log}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def raw(server, method, path, body=None, token=None):
    """An MLflow REST call by hand: (status, answer)."""
    headers = {"Content-Type": "application/json"}
    if token != "":
        headers["Authorization"] = f"Bearer {token or server.token}"
    request = urllib.request.Request(
        f"{server.url}/api/2.0/mlflow{path}", method=method,
        data=None if body is None else json.dumps(body).encode(), headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def test_a_training_script_logs_params_metrics_and_tags_into_a_run(server):
    answer = script(server, """
        mlflow.set_experiment("default")
        with mlflow.start_run(run_name="mlflow-sft") as run:
            mlflow.log_params({"lr": "0.001", "optimizer": "adam"})
            mlflow.log_param("lr", "0.001")  # the same value again is fine
            for step in range(5):
                mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
            mlflow.log_metric("loss", float("nan"), step=5)
            mlflow.log_metric("grad_norm", float("inf"), step=0)
            mlflow.log_metric("grad_norm", float("-inf"), step=1)
            mlflow.log_metrics({"acc": 0.5, "f1": 0.25}, step=1)
            mlflow.set_tag("team", "vision")
            run_id = run.info.run_id
        client = mlflow.MlflowClient()
        try:
            client.log_param(run_id, "lr", "0.01")
            changed = None
        except MlflowException as error:
            changed = [error.error_code, str(error)]
        got = client.get_run(run_id)
        history = client.get_metric_history(run_id, "loss")
        grads = client.get_metric_history(run_id, "grad_norm")
        shown = lambda v: "nan" if math.isnan(v) else v
        print(json.dumps({
            "run_id": run_id,
            "status": got.info.status,
            "name": got.info.run_name,
            "experiment_id": got.info.experiment_id,
            "ended": got.info.end_time is not None,
            "params": got.data.params,
            "tags": {k: v for k, v in got.data.tags.items()},
            "latest": {k: shown(v) for k, v in got.data.metrics.items()},
            "loss": [[m.step, shown(m.value)] for m in history],
            "grads": [[m.step, str(m.value)] for m in grads],
            "changed": changed,
        }))
    """)
    assert answer["status"] == "FINISHED"
    assert answer["name"] == "mlflow-sft"
    assert answer["experiment_id"] == "0"
    assert answer["ended"]
    assert answer["params"] == {"lr": "0.001", "optimizer": "adam"}
    assert answer["tags"]["team"] == "vision"
    assert answer["tags"]["mlflow.runName"] == "mlflow-sft"
    assert answer["loss"] == [[0, 1.0], [1, 0.5], [2, 1 / 3], [3, 0.25], [4, 0.2], [5, "nan"]]
    assert answer["grads"] == [[0, "inf"], [1, "-inf"]]
    assert answer["latest"]["acc"] == 0.5 and answer["latest"]["loss"] == "nan"
    assert answer["changed"][0] == "INVALID_PARAMETER_VALUE"
    assert "Changing param values is not allowed" in answer["changed"][1]

    # The same run through GPUPlane's own API: config, tags, points, status.
    run = server.get(f"/runs/{answer['run_id']}")
    assert run["project"] == "default" and run["name"] == "mlflow-sft"
    assert run["config"] == {"lr": "0.001", "optimizer": "adam"}
    assert "team:vision" in run["tags"]
    assert run["status"] == "FINISHED"
    assert run["latest"]["loss"]["non_finite"] is True
    assert run["latest"]["loss"]["count"] == 6


def test_log_batch_keeps_mlflows_limits_and_a_refused_batch_writes_nothing(server):
    run_id = script(server, """
        run = mlflow.MlflowClient().create_run("0", run_name="batch-limits")
        print(json.dumps(run.info.run_id))
    """)
    metric = lambda step: {"key": "loss", "value": 1.0, "timestamp": 1, "step": step}
    for body in (
        {"run_id": run_id, "metrics": [metric(step) for step in range(1001)]},
        {"run_id": run_id, "params": [{"key": f"p{n}", "value": "1"} for n in range(101)]},
        {"run_id": run_id, "tags": [{"key": f"t{n}", "value": "1"} for n in range(101)]},
    ):
        status, answer = raw(server, "POST", "/runs/log-batch", body)
        assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), answer
        assert "A batch logging request can contain at most" in answer["message"]
    # A changed param refuses the whole batch: its metrics are not written.
    status, _ = raw(server, "POST", "/runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "1"})
    assert status == 200
    status, answer = raw(server, "POST", "/runs/log-batch", {
        "run_id": run_id, "metrics": [metric(0)], "params": [{"key": "lr", "value": "2"}],
    })
    assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), answer
    status, answer = raw(server, "GET", f"/metrics/get-history?run_id={run_id}&metric_key=loss")
    assert (status, answer.get("metrics", [])) == (200, [])
    # 1,000 metrics is within the limit, and the client splits more itself.
    history = script(server, f"""
        from mlflow.entities import Metric
        client = mlflow.MlflowClient()
        client.log_batch("{run_id}", metrics=[Metric("loss", float(s), 1700000000000 + s, s) for s in range(2500)])
        print(json.dumps([[m.step, m.value, m.timestamp] for m in client.get_metric_history("{run_id}", "loss")]))
    """)
    assert history == [[s, float(s), 1700000000000 + s] for s in range(2500)]


def test_experiments_live_in_projects_and_are_renamed_tagged_deleted_and_restored(server):
    server.post("/projects", {"name": "vision-team"})
    answer = script(server, """
        client = mlflow.MlflowClient()
        # set_experiment creates a named experiment in the home project (default).
        sweep = mlflow.set_experiment("My Sweep (lr)")
        # A project is an experiment of its own, found by its name.
        project = mlflow.get_experiment_by_name("vision-team")
        # The gpuplane.project tag places a new experiment in another project.
        placed = client.create_experiment("ablations", tags={"gpuplane.project": "vision-team", "owner": "ana"})
        errors = {}
        def attempt(name, call):
            try:
                call()
                errors[name] = "ok"
            except MlflowException as error:
                errors[name] = error.error_code
        attempt("again", lambda: client.create_experiment("My Sweep (lr)"))
        attempt("project name", lambda: client.create_experiment("vision-team"))
        attempt("empty", lambda: client.create_experiment("   "))
        attempt("rename project", lambda: client.rename_experiment(project.experiment_id, "x"))
        attempt("delete project", lambda: client.delete_experiment(project.experiment_id))
        attempt("unknown", lambda: client.get_experiment("default:999"))
        with mlflow.start_run(run_name="in-sweep") as run:
            mlflow.log_metric("loss", 0.5)
        client.set_experiment_tag(sweep.experiment_id, "dataset", "imagenet")
        client.set_experiment_tag(sweep.experiment_id, "dataset", "birds")
        client.rename_experiment(sweep.experiment_id, "Sweep B")
        renamed = client.get_experiment(sweep.experiment_id)
        in_sweep = [r.info.run_id for r in client.search_runs([sweep.experiment_id])]
        in_default = [r.info.run_id for r in client.search_runs(["0"])]
        filtered = [e.name for e in client.search_experiments(filter_string="name LIKE 'Sweep%' AND tags.dataset = 'birds'")]
        by_name = [e.name for e in client.search_experiments(order_by=["name DESC"], filter_string="name != 'default'")]
        client.delete_experiment(sweep.experiment_id)
        deleted = client.get_experiment(sweep.experiment_id).lifecycle_stage
        run_after_delete = client.get_run(run.info.run_id).info.lifecycle_stage
        attempt("run in deleted", lambda: client.create_run(sweep.experiment_id))
        active = [e.name for e in client.search_experiments()]
        gone = [e.name for e in client.search_experiments(view_type=mlflow.entities.ViewType.DELETED_ONLY)]
        client.restore_experiment(sweep.experiment_id)
        restored = client.get_experiment(sweep.experiment_id).lifecycle_stage
        run_after_restore = client.get_run(run.info.run_id).info.lifecycle_stage
        print(json.dumps({
            "sweep": sweep.experiment_id, "project": project.experiment_id, "placed": placed,
            "errors": errors, "renamed": [renamed.name, renamed.tags], "run_experiment": run.info.experiment_id,
            "in_sweep": in_sweep == [run.info.run_id], "in_default": run.info.run_id in in_default,
            "filtered": filtered, "by_name": by_name, "deleted": [deleted, run_after_delete],
            "active": active, "gone": gone, "restored": [restored, run_after_restore],
        }))
    """)
    assert answer["sweep"].startswith("0:") and answer["run_experiment"] == answer["sweep"]
    assert answer["project"] == "vision-team" and answer["placed"].startswith("vision-team:")
    assert answer["errors"] == {
        "again": "RESOURCE_ALREADY_EXISTS", "project name": "RESOURCE_ALREADY_EXISTS", "empty": "INVALID_PARAMETER_VALUE",
        "rename project": "INVALID_PARAMETER_VALUE", "delete project": "INVALID_PARAMETER_VALUE",
        "unknown": "RESOURCE_DOES_NOT_EXIST", "run in deleted": "INVALID_PARAMETER_VALUE",
    }
    assert answer["renamed"] == ["Sweep B", {"dataset": "birds"}]
    assert answer["in_sweep"] and not answer["in_default"]
    assert answer["filtered"] == ["Sweep B"]
    assert answer["by_name"] == sorted(answer["by_name"], reverse=True) and "ablations" in answer["by_name"]
    assert answer["deleted"] == ["deleted", "deleted"] and answer["restored"] == ["active", "active"]
    assert "Sweep B" not in answer["active"] and answer["gone"] == ["Sweep B"]


def test_experiment_changes_need_an_editor_of_their_project(server):
    server.post("/projects", {"name": "exp-guarded"})
    sweep = script(server, """
        print(json.dumps(mlflow.MlflowClient().create_experiment("guarded sweep", tags={"gpuplane.project": "exp-guarded"})))
    """)
    server.admin("create-user", "exp-viewer", "--password-stdin", input="viewer-password-123\n")
    server.post("/projects/exp-guarded/members", {"user": "exp-viewer", "role": "viewer"})
    server.admin("create-user", "exp-outsider", "--password-stdin", input="outsider-password-123\n")
    server.post("/projects/default/members", {"user": "exp-outsider", "role": "editor"})
    viewer = server.admin("create-token", "--user", "exp-viewer", "--scope", "write")
    outsider = server.admin("create-token", "--user", "exp-outsider", "--scope", "write")
    limited = server.post("/tokens", {"name": "default-only", "scope": "sdk", "project": "default"})["secret"]
    attempt = """
        client = mlflow.MlflowClient()
        out = {}
        for name, call in [("get", lambda: client.get_experiment("%s")),
                           ("rename", lambda: client.rename_experiment("%s", "mine now")),
                           ("tag", lambda: client.set_experiment_tag("%s", "k", "v")),
                           ("delete", lambda: client.delete_experiment("%s")),
                           ("create there", lambda: client.create_experiment("sneaky", tags={"gpuplane.project": "exp-guarded"}))]:
            try:
                call()
                out[name] = "ok"
            except MlflowException as error:
                out[name] = error.error_code
        print(json.dumps(out))
    """ % ((sweep,) * 4)
    # A viewer reads it and changes nothing; another project's editor and a
    # token limited to another project do not see it at all.
    assert script(server, attempt, token=viewer) == {
        "get": "ok", "rename": "PERMISSION_DENIED", "tag": "PERMISSION_DENIED", "delete": "PERMISSION_DENIED",
        "create there": "PERMISSION_DENIED"}
    hidden = {"get": "RESOURCE_DOES_NOT_EXIST", "rename": "RESOURCE_DOES_NOT_EXIST", "tag": "RESOURCE_DOES_NOT_EXIST",
              "delete": "RESOURCE_DOES_NOT_EXIST", "create there": "RESOURCE_DOES_NOT_EXIST"}
    assert script(server, attempt, token=outsider) == hidden
    assert script(server, attempt, token=limited) == hidden
    # A project-limited token creates its experiments in its project.
    placed = script(server, """
        print(json.dumps(mlflow.set_experiment("limited sweep").experiment_id))
    """, token=limited)
    assert placed.startswith("0:")
    # Hostile names are kept as text, never as paths or markup.
    hostile = script(server, """
        client = mlflow.MlflowClient()
        name = "<script>alert(1)</script> ../../etc/passwd '; DROP TABLE runs; --"
        eid = client.create_experiment(name)
        print(json.dumps([eid, client.get_experiment(eid).name == name, client.get_experiment_by_name(name).experiment_id]))
    """)
    assert hostile[1] is True and hostile[2] == hostile[0]
    status, answer = raw(server, "POST", "/experiments/create", {"name": "bell\u0007"})
    assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    status, answer = raw(server, "POST", "/experiments/update", {"experiment_id": sweep, "new_name": "x" * 501})
    assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE")


def test_tokens_and_projects_bound_what_the_client_may_do(server):
    server.admin("create-user", "mlflow-viewer", "--password-stdin", input="viewer-password-123\n")
    server.post("/projects/default/members", {"user": "mlflow-viewer", "role": "viewer"})
    viewer = server.admin("create-token", "--user", "mlflow-viewer", "--scope", "write")
    read = server.admin("create-token", "--user", "sdk-user", "--scope", "read")
    sdk = server.admin("create-token", "--user", "sdk-user", "--scope", "sdk")
    run_id = script(server, """
        run = mlflow.MlflowClient().create_run("0", run_name="guarded")
        print(json.dumps(run.info.run_id))
    """, token=sdk)
    attempt = """
        client = mlflow.MlflowClient()
        out = {}
        for name, call in [("get", lambda: client.get_run("%s")),
                           ("log", lambda: client.log_metric("%s", "loss", 1.0)),
                           ("create", lambda: client.create_run("0"))]:
            try:
                call()
                out[name] = "ok"
            except MlflowException as error:
                out[name] = error.error_code
        print(json.dumps(out))
    """ % (run_id, run_id)
    assert script(server, attempt, token=read) == {"get": "ok", "log": "PERMISSION_DENIED", "create": "PERMISSION_DENIED"}
    assert script(server, attempt, token=viewer) == {"get": "ok", "log": "PERMISSION_DENIED", "create": "PERMISSION_DENIED"}
    # A token limited to another project does not see the run at all.
    server.post("/projects", {"name": "elsewhere"})
    elsewhere = server.post("/tokens", {"name": "elsewhere-only", "scope": "write", "project": "elsewhere"})["secret"]
    assert script(server, attempt, token=elsewhere) == {
        "get": "RESOURCE_DOES_NOT_EXIST", "log": "RESOURCE_DOES_NOT_EXIST", "create": "RESOURCE_DOES_NOT_EXIST"}
    # An editor of another project sees nothing of this one.
    server.admin("create-user", "elsewhere-editor", "--password-stdin", input="editor-password-123\n")
    server.post("/projects/elsewhere/members", {"user": "elsewhere-editor", "role": "editor"})
    editor = server.admin("create-token", "--user", "elsewhere-editor", "--scope", "write")
    server.post("/projects", {"name": "guarded"})
    guarded = script(server, """
        print(json.dumps(mlflow.MlflowClient().create_run("guarded").info.run_id))
    """)
    attempt = attempt.replace(run_id, guarded).replace('create_run("0")', 'create_run("guarded")')
    assert script(server, attempt, token=editor) == {
        "get": "RESOURCE_DOES_NOT_EXIST", "log": "RESOURCE_DOES_NOT_EXIST", "create": "RESOURCE_DOES_NOT_EXIST"}
    # No token, or a made-up one: MLflow's 401.
    for token in ("", "not-a-token"):
        status, answer = raw(server, "GET", f"/runs/get?run_id={run_id}", token=token)
        assert (status, answer["error_code"]) == (401, "UNAUTHENTICATED")


def test_hostile_and_malformed_requests_get_mlflows_errors(server):
    run_id = script(server, """
        print(json.dumps(mlflow.MlflowClient().create_run("0", run_name="hostile").info.run_id))
    """)
    for path, body, status, code in [
        ("/runs/log-metric", b"{not json", 400, "INVALID_PARAMETER_VALUE"),
        ("/runs/log-metric", {"run_id": run_id, "key": "loss", "value": "lots", "timestamp": 1}, 400, "INVALID_PARAMETER_VALUE"),
        ("/runs/log-metric", {"run_id": run_id, "key": "x\u0000y", "value": 1, "timestamp": 1}, 400, "INVALID_PARAMETER_VALUE"),
        ("/runs/log-parameter", {"run_id": run_id, "key": "k", "value": "v" * 6001}, 400, "INVALID_PARAMETER_VALUE"),
        ("/runs/set-tag", {"run_id": run_id, "key": "", "value": "v"}, 400, "INVALID_PARAMETER_VALUE"),
        ("/runs/update", {"run_id": run_id, "status": "EXPLODED"}, 400, "INVALID_PARAMETER_VALUE"),
        ("/runs/log-metric", {"run_id": "run_nope", "key": "loss", "value": 1, "timestamp": 1}, 404, "RESOURCE_DOES_NOT_EXIST"),
        ("/runs/create", {"experiment_id": "no-such-project"}, 404, "RESOURCE_DOES_NOT_EXIST"),
    ]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(f"{server.url}/api/2.0/mlflow{path}", method="POST", data=data,
                                         headers={"Authorization": f"Bearer {server.token}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                got = (response.status, json.loads(response.read()))
        except urllib.error.HTTPError as error:
            got = (error.code, json.loads(error.read()))
        assert (got[0], got[1].get("error_code")) == (status, code), (path, body, got)
        assert isinstance(got[1]["message"], str) and got[1]["message"]
    run = server.get(f"/runs/{run_id}")
    assert run["config"] == {} and run["latest"] == {}
    # The largest page a client can ask for is a large page, or MLflow's limit on runs.
    status, answer = raw(server, "POST", "/experiments/search", {"max_results": 2**63 - 1, "page_token": "1"})
    assert status == 200 and "next_page_token" not in answer, answer
    status, answer = raw(server, "POST", "/runs/search", {"experiment_ids": ["0"], "max_results": 50_001})
    assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), answer
    status, answer = raw(server, "GET", f"/metrics/get-history?run_id={run_id}&metric_key=loss&max_results={2**63 - 1}")
    assert status == 200, answer
    # A part of MLflow's API not answered says so in MLflow's shape.
    status, answer = raw(server, "POST", "/registered-models/create", {"name": "m"})
    assert (status, answer["error_code"]) == (404, "ENDPOINT_NOT_FOUND"), answer
    # The MLflow UI's prefix answers the same.
    status, answer = raw(server, "GET", f"/runs/get?run_id={run_id}")
    request = urllib.request.Request(f"{server.url}/ajax-api/2.0/mlflow/runs/get?run_id={run_id}",
                                     headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["run"]["info"]["run_id"] == answer["run"]["info"]["run_id"] == run_id
    # A POST there with a bearer token needs no Origin (no cookie is ever read).
    request = urllib.request.Request(f"{server.url}/ajax-api/2.0/mlflow/runs/search", method="POST",
                                     data=json.dumps({"experiment_ids": ["0"], "max_results": 1}).encode(),
                                     headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert len(json.loads(response.read())["runs"]) == 1
    # MLflow 3's API is not here, and says so in MLflow's shape, not as a page.
    request = urllib.request.Request(f"{server.url}/api/3.0/mlflow/traces/search", method="POST", data=b"{}",
                                     headers={"Authorization": f"Bearer {server.token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert (refused.value.code, json.loads(refused.value.read())["error_code"]) == (404, "ENDPOINT_NOT_FOUND")


def test_mlflows_own_wording_and_run_states(server):
    answer = script(server, """
        from mlflow.entities import ViewType
        client = mlflow.MlflowClient()
        run = client.create_run("0", tags={"mlflow.user": "ana"})
        default = client.get_experiment("0")
        named = client.get_experiment_by_name("Default").experiment_id
        client.log_param(run.info.run_id, "p", "1")
        client.delete_run(run.info.run_id)
        errors = {}
        for name, call in [("param", lambda: client.log_param(run.info.run_id, "q", "1")),
                           ("metric", lambda: client.log_metric(run.info.run_id, "m", 1.0)),
                           ("tag", lambda: client.set_tag(run.info.run_id, "t", "1")),
                           ("missing run", lambda: client.get_run("run_nope"))]:
            try:
                call()
                errors[name] = "ok"
            except MlflowException as error:
                errors[name] = [error.error_code, error.message]
        client.restore_run(run.info.run_id)
        client.log_param(run.info.run_id, "q", "1")
        print(json.dumps({"run_id": run.info.run_id, "user": run.info.user_id, "default": [default.name, named],
                          "errors": errors, "params": client.get_run(run.info.run_id).data.params}))
    """)
    assert answer["user"] == "ana"
    assert answer["default"] == ["Default", "0"]
    deleted = f"The run {answer['run_id']} must be in the 'active' state"
    for name in ("param", "metric", "tag"):
        assert answer["errors"][name][0] == "INVALID_PARAMETER_VALUE" and deleted in answer["errors"][name][1], answer
    assert answer["errors"]["missing run"][0] == "RESOURCE_DOES_NOT_EXIST"
    assert "Run with id=run_nope not found" in answer["errors"]["missing run"][1]
    assert answer["params"] == {"p": "1", "q": "1"}
    # A field of the wrong kind is named, with the value given, as MLflow does.
    for path, body, said in [
        ("/experiments/create", {"name": 123}, "Invalid value 123 for parameter 'name' supplied"),
        ("/experiments/create", {"name": "x", "artifact_location": 9.0}, "Invalid value 9.0 for parameter 'artifact_location' supplied"),
        ("/runs/log-batch", {"run_id": "r", "metrics": "foo"}, "Invalid value \"foo\" for parameter 'metrics' supplied"),
        ("/runs/search", {"experiment_ids": ["0"], "max_results": 123456789}, "Invalid value 123456789 for parameter 'max_results' supplied"),
    ]:
        status, answer = raw(server, "POST", path, body)
        assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), answer
        assert said in answer["message"], answer


def test_the_mlflow_uis_own_routes(server):
    run_id = script(server, """
        client = mlflow.MlflowClient()
        run = client.create_run("0", run_name="ui-routes")
        for step in range(3):
            client.log_metric(run.info.run_id, "loss", 1.0 / (step + 1), timestamp=1000 + step, step=step)
        print(json.dumps(run.info.run_id))
    """)
    auth = {"Authorization": f"Bearer {server.token}"}

    def call(method, path, data=None):
        request = urllib.request.Request(f"{server.url}{path}", method=method, data=data, headers=auth)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    # Upload and download by run and path, and the listing by path from the root.
    assert call("POST", f"/ajax-api/2.0/mlflow/upload-artifact?run_uuid={run_id}&path=notes/a.txt", b"hello")[0] == 200
    assert call("GET", f"/get-artifact?run_uuid={run_id}&path=notes/a.txt") == (200, b"hello")
    status, listed = call("GET", f"/ajax-api/2.0/mlflow/artifacts/list?run_uuid={run_id}&path=notes")
    assert status == 200 and json.loads(listed)["files"] == [{"path": "notes/a.txt", "is_dir": False, "file_size": 5}]
    status, answer = call("GET", f"/api/2.0/mlflow/artifacts/list?run_id={run_id}&path=../x")
    assert (status, json.loads(answer)["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    assert "Invalid path" in json.loads(answer)["message"]
    # A run that does not exist and one of a project the token cannot see look the same.
    server.post("/projects", {"name": "ui-other"})
    other = server.post("/tokens", {"name": "ui-other-only", "scope": "write", "project": "ui-other"})["secret"]
    auth = {"Authorization": f"Bearer {other}"}
    hidden = call("GET", f"/get-artifact?run_uuid={run_id}&path=notes/a.txt")
    missing = call("GET", "/get-artifact?run_uuid=run_nope&path=notes/a.txt")
    assert hidden[0] == missing[0] == 404
    assert call("POST", f"/ajax-api/2.0/mlflow/upload-artifact?run_uuid={run_id}&path=x.txt", b"no")[0] == 404
    auth = {"Authorization": f"Bearer {server.token}"}
    # The older UI's history of a metric across runs, in time order.
    status, answer = call("GET", f"/ajax-api/2.0/mlflow/metrics/get-history-bulk?run_id={run_id}&metric_key=loss&max_results=2")
    assert status == 200
    assert [(m["step"], m["timestamp"], m["run_id"]) for m in json.loads(answer)["metrics"]] == [(0, 1000, run_id), (1, 1001, run_id)]
    status, answer = call("GET", "/ajax-api/2.0/mlflow/metrics/get-history-bulk?metric_key=loss")
    assert status == 400 and "at least one run_id" in json.loads(answer)["message"]
    # MLflow's required fields: a metric's timestamp, a run id of the right kind.
    for path, body, said in [
        ("/runs/log-metric", {"run_id": run_id, "key": "k", "value": 1.0}, "Missing value for required parameter 'timestamp'"),
        ("/runs/log-batch", {"run_id": run_id, "metrics": [{"key": "k", "value": 1.0}]},
         "Missing value for required parameter 'metrics[0].timestamp'"),
        ("/runs/log-parameter", {"run_id": 31, "key": "k", "value": 41}, "Invalid value 31 for parameter 'run_id' supplied"),
    ]:
        status, answer = raw(server, "POST", path, body)
        assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE") and said in answer["message"], answer


def test_inside_a_job_mlflow_start_run_logs_into_the_jobs_own_run(server, tmp_path):
    server.start_agent(tmp_path / "jobs", gpus=1)
    code = textwrap.dedent("""
        import os, mlflow
        given = os.environ["MLFLOW_RUN_ID"]
        with mlflow.start_run() as run:
            assert run.info.run_id == given, run.info.run_id
            os.makedirs("ckpt", exist_ok=True)
            with open("ckpt/step_3.pt", "wb") as out:
                out.write(b"w" * 10)
            mlflow.log_param("lr", "0.1")
            for step in range(3):
                mlflow.log_metric("train/loss", 1.0 / (step + 1), step=step)
            mlflow.log_metric("train/loss", float("nan"), step=3)
        print("logged into", run.info.run_id, "of experiment", run.info.experiment_id)
        # Its token reaches its own run only.
        from mlflow.exceptions import MlflowException
        client = mlflow.MlflowClient()
        found = [run.info.run_id for run in client.search_runs(["0"])]
        print("search finds", "only its own run" if found == [given] else found)
        projects = sorted({e.experiment_id.split(":")[0] for e in client.search_experiments()})
        print("experiments seen in projects:", ",".join(projects))
        for name, call in [("other", lambda: client.log_metric(os.environ["OTHER_RUN"], "loss", 1.0)),
                           ("read", lambda: client.get_run(os.environ["OTHER_RUN"])),
                           ("create", lambda: client.create_run("0"))]:
            try:
                call()
                print(name, "ok")
            except MlflowException as error:
                print(name, error.error_code)
    """)
    other = script(server, """
        print(json.dumps(mlflow.MlflowClient().create_run("0", run_name="not-the-jobs").info.run_id))
    """)
    work = tmp_path / "work"
    work.mkdir()
    job = server.post("/jobs", {"name": "mlflow-in-a-job", "command": [sys.executable, "-c", code],
                                "env": {"OTHER_RUN": other}, "working_dir": str(work), "watch_dirs": ["ckpt"]})
    deadline = time.monotonic() + 60
    while server.get(f"/jobs/{job['id']}")["status"] not in ("SUCCEEDED", "FAILED"):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.2)
    done = server.get(f"/jobs/{job['id']}")
    output = "\n".join(
        line["text"] for stream in ("stdout", "stderr")
        for line in server.get(f"/jobs/{job['id']}/logs?stream={stream}")["lines"])
    assert done["status"] == "SUCCEEDED", output
    run = server.get(f"/runs/{job['run_id']}")
    assert run["config"] == {"lr": "0.1"}
    assert run["latest"]["train/loss"]["count"] == 4 and run["latest"]["train/loss"]["non_finite"]
    # The job's run follows its job, whatever the script said at its end.
    assert run["status"] == "SUCCEEDED"
    events = server.get(f"/events?run_id={job['run_id']}&kind=LOSS_NAN")["items"]
    assert len(events) == 1, events
    # Its token is limited to its run: it could not have made another.
    assert "logged into " + job["run_id"] + " of experiment 0" in output
    assert "other RESOURCE_DOES_NOT_EXIST" in output and "create PERMISSION_DENIED" in output, output
    assert "read RESOURCE_DOES_NOT_EXIST" in output and "search finds only its own run" in output, output
    assert "experiments seen in projects: 0\n" in output + "\n", output
    assert server.get(f"/runs/{other}")["latest"] == {}
    # The checkpoint it wrote is listed among the run's artifacts; its bytes
    # stay on the host, and a download says where.
    deadline = time.monotonic() + 30
    while not server.get(f"/runs/{job['run_id']}/checkpoints")["items"]:
        assert time.monotonic() < deadline, "the checkpoint was not recorded"
        time.sleep(0.2)
    listed = script(server, f"""
        client = mlflow.MlflowClient()
        root = [[f.path, f.is_dir] for f in client.list_artifacts("{job['run_id']}")]
        inside = [[f.path, f.is_dir, f.file_size] for f in client.list_artifacts("{job['run_id']}", "checkpoints")]
        print(json.dumps([root, inside]))
    """)
    assert listed[0] == [["checkpoints", True]]
    assert listed[1] == [["checkpoints/step_3.pt", False, 10]]
    request = urllib.request.Request(
        f"{server.url}/api/2.0/mlflow-artifacts/artifacts/0/{job['run_id']}/artifacts/checkpoints/step_3.pt",
        headers={"Authorization": f"Bearer {server.token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    answer = json.loads(refused.value.read())
    assert (refused.value.code, answer["error_code"]) == (404, "RESOURCE_DOES_NOT_EXIST")
    assert "is recorded, not uploaded" in answer["message"] and str(work / "ckpt" / "step_3.pt") in answer["message"]


def test_search_runs_filters_orders_and_pages_with_mlflows_grammar(server):
    answer = script(server, """
        from mlflow.entities import ViewType
        client = mlflow.MlflowClient()
        experiment = mlflow.create_experiment("search-team")
        made = {}
        for name, loss, optimizer, team, status in [
            ("run-a", 0.9, "adam", "vision", "FINISHED"),
            ("run-b", 0.3, "sgd", "vision", "FAILED"),
            ("run-c", 0.1, "adam", "speech", "FINISHED"),
            ("run-d", None, "adam", "visual", "KILLED"),
        ]:
            run = client.create_run(experiment, run_name=name, tags={"team": team})
            client.log_param(run.info.run_id, "optimizer", optimizer)
            if loss is not None:
                client.log_metric(run.info.run_id, "loss", loss, step=1)
            client.set_terminated(run.info.run_id, status)
            made[run.info.run_id] = name
        names = lambda runs: [made[run.info.run_id] for run in runs]
        search = lambda **kwargs: names(client.search_runs([experiment], **kwargs))
        out = {
            "all": search(),
            "low loss": search(filter_string="metrics.loss < 0.5"),
            "adam in vis*": search(filter_string="params.optimizer = 'adam' and tags.team LIKE 'vis%'"),
            "failed": search(filter_string="attributes.status = 'FAILED'"),
            "ilike": search(filter_string="attributes.run_name ILIKE 'RUN-_'"),
            "by loss desc": search(order_by=["metrics.loss DESC"]),
            "by loss": search(order_by=["metrics.loss"]),
            "by name": search(order_by=["attributes.run_name DESC"]),
        }
        ids = [id for id, name in made.items() if name in ("run-a", "run-c")]
        out["in"] = sorted(search(filter_string="attributes.run_id IN ('%s', '%s')" % tuple(ids)))
        first = client.search_runs([experiment], max_results=3, order_by=["attributes.run_name"])
        second = client.search_runs([experiment], max_results=3, order_by=["attributes.run_name"], page_token=first.token)
        out["pages"] = [names(first), names(second), second.token]
        deleted = [id for id, name in made.items() if name == "run-b"][0]
        client.delete_run(deleted)
        out["after delete"] = search()
        out["deleted only"] = search(run_view_type=ViewType.DELETED_ONLY)
        out["stage"] = client.get_run(deleted).info.lifecycle_stage
        client.restore_run(deleted)
        out["restored"] = sorted(search())
        try:
            client.search_runs([experiment], filter_string="metrics.loss < 'low'")
        except MlflowException as error:
            out["bad filter"] = [error.error_code, str(error)]
        print(json.dumps(out))
    """)
    assert answer["all"] == ["run-d", "run-c", "run-b", "run-a"]  # newest first
    assert answer["low loss"] == ["run-c", "run-b"]
    assert answer["adam in vis*"] == ["run-d", "run-a"]
    assert answer["failed"] == ["run-b"]
    assert answer["ilike"] == ["run-d", "run-c", "run-b", "run-a"]
    assert answer["by loss desc"] == ["run-a", "run-b", "run-c", "run-d"]  # no loss: last
    assert answer["by loss"] == ["run-c", "run-b", "run-a", "run-d"]
    assert answer["by name"] == ["run-d", "run-c", "run-b", "run-a"]
    assert answer["in"] == ["run-a", "run-c"]
    assert answer["pages"] == [["run-a", "run-b", "run-c"], ["run-d"], None]
    assert answer["after delete"] == ["run-d", "run-c", "run-a"]
    assert answer["deleted only"] == ["run-b"]
    assert answer["stage"] == "deleted"
    assert answer["restored"] == ["run-a", "run-b", "run-c", "run-d"]
    assert answer["bad filter"][0] == "INVALID_PARAMETER_VALUE"
    assert "compares with a number" in answer["bad filter"][1]
    # A token limited to another project finds nothing there.
    limited = server.post("/tokens", {"name": "search-limited", "scope": "read", "project": "default"})["secret"]
    found = script(server, """
        print(json.dumps(len(mlflow.MlflowClient().search_runs(["search-team"]))))
    """, token=limited)
    assert found == 0


def peak_memory_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_artifacts_go_up_and_down_byte_for_byte_streamed(server, tmp_path):
    big = tmp_path / "weights.bin"
    with open(big, "wb") as out:
        block = os.urandom(1 << 20)
        for n in range(256):
            out.write(block[n:] + block[:n])
    folder = tmp_path / "model"
    (folder / "tokenizer").mkdir(parents=True)
    (folder / "config.json").write_text('{"layers": 2}')
    (folder / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    before = peak_memory_kib(server.process.pid)
    answer = script(server, f"""
        import hashlib, os
        client = mlflow.MlflowClient()
        run = client.create_run("0", run_name="with-artifacts")
        run_id = run.info.run_id
        client.log_artifact(run_id, "{big}")
        client.log_artifacts(run_id, "{folder}", artifact_path="model")
        listed = [[f.path, f.is_dir, f.file_size] for f in client.list_artifacts(run_id)]
        nested = [[f.path, f.is_dir, f.file_size] for f in client.list_artifacts(run_id, "model/tokenizer")]
        out = "{tmp_path / 'downloaded'}"
        os.makedirs(out)
        got = client.download_artifacts(run_id, "weights.bin", out)
        digest = lambda path: hashlib.sha256(open(path, "rb").read()).hexdigest()
        tree = client.download_artifacts(run_id, "model", out)
        print(json.dumps({{
            "run_id": run_id, "uri": run.info.artifact_uri, "listed": listed, "nested": nested,
            "same": digest(got) == digest("{big}"),
            "config": open(os.path.join(tree, "config.json")).read(),
            "vocab": open(os.path.join(tree, "tokenizer", "vocab.txt")).read(),
        }}))
    """)
    assert answer["uri"] == f"mlflow-artifacts:/0/{answer['run_id']}/artifacts"
    assert answer["listed"] == [["model", True, None], ["weights.bin", False, 256 << 20]]
    assert answer["nested"] == [["model/tokenizer/vocab.txt", False, 4]]
    assert answer["same"]
    assert answer["config"] == '{"layers": 2}' and answer["vocab"] == "a\nb\n"
    # 256 MiB went up and came down; the server never held it.
    grown_mib = (peak_memory_kib(server.process.pid) - before) / 1024
    assert grown_mib < 64, f"the server's peak memory grew by {grown_mib:.0f} MiB"
    # Deleting the run deletes its artifacts.
    folder = Path(server.data_dir) / "artifacts" / "0" / answer["run_id"]
    assert (folder / "artifacts" / "weights.bin").stat().st_size == 256 << 20
    assert raw(server, "POST", "/runs/update", {"run_id": answer["run_id"], "status": "FINISHED"})[0] == 200
    server.call("DELETE", f"/runs/{answer['run_id']}")
    assert not folder.exists()


def test_artifact_paths_cannot_leave_their_run_and_follow_its_project(server):
    server.post("/projects", {"name": "artifact-other"})
    owner = script(server, """
        client = mlflow.MlflowClient()
        run = client.create_run("0", run_name="artifact-owner")
        other = client.create_run("artifact-other", run_name="elsewhere")
        print(json.dumps([run.info.run_id, other.info.run_id]))
    """)
    run_id, other_id = owner
    base = f"{server.url}/api/2.0/mlflow-artifacts/artifacts"

    def put(path, token=None, data=b"x"):
        request = urllib.request.Request(f"{base}/{path}", method="PUT", data=data,
                                         headers={"Authorization": f"Bearer {token or server.token}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    assert put(f"0/{run_id}/artifacts/ok.txt")[0] == 200
    for path, status in [
        (f"0/{run_id}/artifacts/../../{other_id}/artifacts/x", 400),
        (f"0/{run_id}/artifacts/%2e%2e/%2e%2e/{other_id}/artifacts/x", 400),
        (f"0/{run_id}/artifacts/a%5c..%5cb", 400),
        (f"0/{run_id}/artifacts/a%1b", 400),
        (f"0/{run_id}/elsewhere/x", 400),
        (f"artifact-other/{run_id}/artifacts/x", 404),  # the run is not in that experiment
        (f"0/run_nope/artifacts/x", 404),
    ]:
        got = put(path)
        assert got[0] == status, (path, got)
        assert got[1].get("error_code"), (path, got)
    # Tokens and roles as for the run: read 403, a viewer 403, another project's view 404.
    read = server.admin("create-token", "--user", "sdk-user", "--scope", "read")
    assert put(f"0/{run_id}/artifacts/x", token=read)[1]["error_code"] == "PERMISSION_DENIED"
    server.admin("create-user", "artifact-viewer", "--password-stdin", input="viewer-password-123\n")
    server.post("/projects/default/members", {"user": "artifact-viewer", "role": "viewer"})
    viewer = server.admin("create-token", "--user", "artifact-viewer", "--scope", "write")
    assert put(f"0/{run_id}/artifacts/x", token=viewer)[1]["error_code"] == "PERMISSION_DENIED"
    limited = server.post("/tokens", {"name": "artifact-limited", "scope": "write", "project": "artifact-other"})["secret"]
    assert put(f"0/{run_id}/artifacts/x", token=limited)[0] == 404
    status, answer = raw(server, "GET", "", token=limited)  # a listing needs a path
    request = urllib.request.Request(f"{base}?path=0/{run_id}/artifacts",
                                     headers={"Authorization": f"Bearer {limited}"})
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("listed another project's artifacts")
    except urllib.error.HTTPError as error:
        assert error.code == 404
    # Nothing was written outside the run's folder.
    root = Path(server.data_dir) / "artifacts"
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert [p for p in written if run_id in p or other_id in p] == [f"0/{run_id}/artifacts/ok.txt"]


def test_the_ui_bulk_interval_history_samples_each_run(server):
    runs = script(server, """
        from mlflow.entities import Metric
        client = mlflow.MlflowClient()
        made = []
        for size in (5000, 30):
            run_id = client.create_run("0", run_name=f"bulk-{size}").info.run_id
            client.log_batch(run_id, metrics=[Metric("loss", 1.0 / (s + 1), 1700000000000 + s, s) for s in range(size)])
            made.append(run_id)
        print(json.dumps(made))
    """)
    big, small = runs

    def bulk(query):
        request = urllib.request.Request(f"{server.url}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?{query}",
                                         headers={"Authorization": f"Bearer {server.token}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    status, answer = bulk(f"run_ids={big}&run_ids={small}&metric_key=loss&max_results=100")
    assert status == 200
    of_big = [m for m in answer["metrics"] if m["run_id"] == big]
    of_small = [m for m in answer["metrics"] if m["run_id"] == small]
    assert 50 <= len(of_big) <= 100 and of_big[-1]["step"] == 4999
    assert [m["step"] for m in of_big] == sorted(m["step"] for m in of_big)
    assert [m["step"] for m in of_small] == list(range(30))  # all of them: they fit
    assert of_small[3]["value"] == 0.25 and of_small[3]["timestamp"] == 1700000000003
    status, answer = bulk(f"run_ids={small}&metric_key=loss&start_step=10&end_step=12")
    assert [m["step"] for m in answer["metrics"]] == [10, 11, 12]
    for query in (f"run_ids={small}&metric_key=loss&max_results=2501", f"run_ids={small}&metric_key=loss&start_step=3",
                  "metric_key=loss", f"run_ids={small}&metric_key=loss&start_step=5&end_step=1"):
        status, answer = bulk(query)
        assert (status, answer["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), (query, answer)
