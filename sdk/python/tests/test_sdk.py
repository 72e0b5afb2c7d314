"""The SDK against the real server: values kept exactly, nothing lost or
duplicated across an unreachable server, a restart, replays and crashes."""

import json
import math
import os
import sys

import gpuplane
from gpuplane._spool import spool_dir


def series(server, run_id, key):
    answer = server.get(f"/runs/{run_id}/metrics?key={key}&max_points=100000")
    return [(p["step"], p["value"]) for p in answer["points"]]


def test_log_keeps_nan_and_infinities_and_every_namespace(server):
    run = gpuplane.init(project="default", name="sdk-basic", server=server.url, token=server.token)
    for step in range(300):
        loss = float("nan") if step == 150 else 1.0 / (step + 1)
        run.log({"train/loss": loss, "eval/acc": step / 300, "other/inf": float("inf") if step == 7 else -math.inf}, step=step)
    run.finish()
    loss = series(server, run.run_id, "train/loss")
    assert [step for step, _ in loss] == list(range(300))
    assert loss[150][1] == "NaN"
    assert loss[0][1] == 1.0
    assert series(server, run.run_id, "other/inf")[7] == (7, "Infinity")
    assert series(server, run.run_id, "other/inf")[8] == (8, "-Infinity")
    summary = server.get(f"/runs/{run.run_id}")
    assert summary["status"] == "FINISHED"
    assert summary["latest"]["train/loss"]["step"] == 299
    assert summary["latest"]["other/inf"]["non_finite"] is True
    assert not os.listdir(spool_dir()) if os.path.isdir(spool_dir()) else True


def test_inside_a_job_the_environment_names_the_run(server, monkeypatch):
    created = gpuplane.init(project="default", name="job-run", server=server.url, token=server.token)
    created.flush()
    monkeypatch.setenv("GPUCTL_SERVER", server.url)
    monkeypatch.setenv("GPUCTL_TOKEN", server.token)
    monkeypatch.setenv("GPUCTL_RUN_ID", created.run_id)
    run = gpuplane.init()
    assert run.run_id == created.run_id
    run.log({"train/loss": 0.5}, step=1)
    run.flush()
    assert series(server, created.run_id, "train/loss") == [(1, 0.5)]
    run.finish()
    created.finish()


def test_without_a_server_everything_is_spooled_then_replayed_once(stopped_server):
    run = gpuplane.init(project="default", name="offline", server=stopped_server.url, token=stopped_server.token)
    for step in range(1000):
        run.log({"train/loss": float(step)}, step=step)
    run.alert("loss stalled", "raised while offline", level="critical")
    run.finish()
    files = os.listdir(spool_dir())
    assert len(files) == 1 and files[0].startswith("sdk-") and files[0].endswith(".jsonl")

    stopped_server.start()
    result = gpuplane.sync(server=stopped_server.url, token=stopped_server.token)
    assert result.sent == 1000 and result.skipped == 0
    assert os.listdir(spool_dir()) == []
    run_id = result.run_ids[run.local_id]
    assert series(stopped_server, run_id, "train/loss") == [(s, float(s)) for s in range(1000)]
    assert stopped_server.get(f"/runs/{run_id}")["status"] == "FINISHED"
    [alert] = stopped_server.get(f"/events?run_id={run_id}&kind=RUN_ALERT")["items"]
    assert (alert["severity"], alert["message"]) == ("critical", "loss stalled: raised while offline")
    # Syncing again adds nothing.
    assert gpuplane.sync(server=stopped_server.url, token=stopped_server.token).sent == 0
    assert len(series(stopped_server, run_id, "train/loss")) == 1000


def test_a_server_restart_mid_run_loses_and_duplicates_nothing(server):
    run = gpuplane.init(project="default", name="restart", server=server.url, token=server.token)
    for step in range(0, 500):
        run.log({"train/loss": float(step)}, step=step)
    run.flush()
    server.stop()
    for step in range(500, 1000):
        run.log({"train/loss": float(step)}, step=step)
    run.flush()
    assert os.listdir(spool_dir()), "the unreachable server's share went to the spool"
    server.start()
    run._retry_at = 0  # do not wait out the retry delay in a test
    for step in range(1000, 1500):
        run.log({"train/loss": float(step)}, step=step)
    run.finish()
    assert series(server, run.run_id, "train/loss") == [(s, float(s)) for s in range(1500)]
    assert os.listdir(spool_dir()) == []


def test_a_partial_last_line_is_skipped_and_counted(stopped_server):
    run = gpuplane.init(project="default", name="crashed", server=stopped_server.url, token=stopped_server.token)
    for step in range(10):
        run.log({"train/loss": 1.0}, step=step)
    run.flush()
    for step in range(10, 20):
        run.log({"train/loss": 2.0}, step=step)
    run.flush()
    path = os.path.join(spool_dir(), os.listdir(spool_dir())[0])
    with open(path, "a", encoding="utf-8") as file:
        file.write('{"type": "batch", "batch_id": "torn", "poi')  # the process died mid-write
    stopped_server.start()
    result = gpuplane.sync(server=stopped_server.url, token=stopped_server.token)
    assert result.sent == 20
    assert result.skipped == 1
    assert len(series(stopped_server, result.run_ids[run.local_id], "train/loss")) == 20


def test_a_batch_already_sent_is_not_stored_twice_when_replayed(server):
    run = gpuplane.init(project="default", name="dup", server=server.url, token=server.token)
    run.flush()
    batch = {"batch_id": "fixed-id", "points": [{"key": "train/loss", "step": 1, "wall_time": 1.0, "value": "NaN"}]}
    run._client.send_batch(run.run_id, batch)
    os.makedirs(spool_dir(), exist_ok=True)
    with open(os.path.join(spool_dir(), "sdk-manual.jsonl"), "w", encoding="utf-8") as file:
        file.write(json.dumps({"type": "run", "run_id": run.run_id}) + "\n")
        file.write(json.dumps({"type": "batch", **batch}) + "\n")
    result = gpuplane.sync(server=server.url, token=server.token)
    assert result.files == 1
    assert series(server, run.run_id, "train/loss") == [(1, "NaN")]
    run.finish()


def test_no_token_means_spool(stopped_server):
    run = gpuplane.init(project="default", name="tokenless", server=stopped_server.url, token=None)
    run.log({"train/loss": 3.0}, step=0)
    run.finish()
    assert len(os.listdir(spool_dir())) == 1


def test_write_eval_result(tmp_path, monkeypatch):
    target = tmp_path / "eval_result.json"
    monkeypatch.setenv("GPUCTL_EVAL_OUTPUT", str(target))
    gpuplane.write_eval_result({"accuracy": 0.91, "loss": float("nan")})
    assert json.loads(target.read_text()) == {"metrics": {"accuracy": 0.91, "loss": "NaN"}}


def test_an_evaluation_job_reports_write_eval_result_to_the_run(server, tmp_path):
    """A real agent runs a real EVALUATE job whose script uses the SDK helper."""
    from conftest import wait_until

    server.start_agent(tmp_path / "jobs")
    work = tmp_path / "work"
    work.mkdir()
    train = server.post("/jobs", {
        "name": "train", "working_dir": str(work), "watch_dirs": ["ckpt"],
        "command": ["sh", "-c", "mkdir -p ckpt && echo w > ckpt/step_40.pt"],
    })
    wait_until(lambda: server.get(f"/jobs/{train['id']}")["status"] == "SUCCEEDED")

    script = "import gpuplane; gpuplane.write_eval_result({'accuracy': 0.75, 'loss': float('inf')})"
    evaluation = server.post("/evaluations", {
        "run_id": train["run_id"], "checkpoint": str(work / "ckpt" / "step_40.pt"),
        "command": [sys.executable, "-c", script],
    })
    done = wait_until(lambda: (e := server.get(f"/evaluations/{evaluation['job_id']}"))["status"] in ("SUCCEEDED", "FAILED") and e)
    assert done["status"] == "SUCCEEDED", done
    assert done["metrics"] == {"accuracy": 0.75, "loss": "Infinity"}
    assert series(server, train["run_id"], "eval/accuracy") == [(40, 0.75)]
    assert series(server, train["run_id"], "eval/loss") == [(40, "Infinity")]


def test_config_tags_and_notes_are_recorded_flat_and_checked_at_once(server):
    run = gpuplane.init(
        project="default",
        name="with-config",
        server=server.url,
        token=server.token,
        config={"lr": 1e-3, "optimizer": "adam", "amp": True, "seed": None, "model": {"depth": 12, "act": "gelu"}},
        tags=["baseline", "sweep:lr"],
        notes="first try",
    )
    run.config.update({"batch_size": 64}, warmup=float("nan"))
    assert run.config["model.depth"] == 12
    run.log({"train/loss": 0.5}, step=1)
    run.finish()
    summary = server.get(f"/runs/{run.run_id}")
    assert summary["config"] == {
        "amp": True, "batch_size": 64, "lr": 0.001, "model.act": "gelu", "model.depth": 12,
        "optimizer": "adam", "seed": None, "warmup": "NaN",
    }
    assert summary["tags"] == ["baseline", "sweep:lr"]
    assert summary["notes"] == "first try"
    # The list filters on them.
    found = server.get("/runs?config.lr=%3E0.0001&config.optimizer=adam&tag=baseline")["items"]
    assert [r["id"] for r in found] == [run.run_id]
    assert server.get("/runs?config.lr=%3E0.01")["items"] == []
    # Bad values are refused before anything is sent.
    for bad in ({"layers": [1, 2]}, {"x" * 201: 1}, {"text": "y" * 5000}):
        try:
            gpuplane.init(project="default", name="bad", server=server.url, token=server.token, config=bad)
        except (TypeError, ValueError) as error:
            assert "gpuplane: config" in str(error)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_config_logged_while_the_server_is_down_is_replayed_in_order(stopped_server):
    run = gpuplane.init(project="default", name="offline-config", server=stopped_server.url, token=stopped_server.token,
                        config={"lr": 0.1}, tags=["offline"])
    run.log({"train/loss": 1.0}, step=0)
    run.config.update({"lr": 0.05})
    run.set_notes("lowered the learning rate at step 1")
    run.finish()
    stopped_server.start()
    result = gpuplane.sync(server=stopped_server.url, token=stopped_server.token)
    summary = stopped_server.get(f"/runs/{result.run_ids[run.local_id]}")
    assert summary["config"] == {"lr": 0.05}, "the later update wins, as it was logged"
    assert summary["tags"] == ["offline"]
    assert summary["notes"] == "lowered the learning rate at step 1"
    assert summary["latest"]["train/loss"]["count"] == 1


def test_resume_goes_on_after_the_highest_step_and_reopens_a_finished_run(server):
    first = gpuplane.init(project="default", name="long-job", server=server.url, token=server.token)
    for step in range(5):
        first.log({"train/loss": 1.0 / (step + 1)}, step=step)
    first.finish()
    assert server.get(f"/runs/{first.run_id}")["status"] == "FINISHED"

    # The machine rebooted: the script starts again and resumes the same run.
    again = gpuplane.init(server=server.url, token=server.token, resume=first.run_id)
    assert (again.run_id, again.name) == (first.run_id, "long-job")
    assert server.get(f"/runs/{first.run_id}")["status"] == "RUNNING", "reopened"
    again.log({"train/loss": 0.1})
    again.finish()
    run = server.get(f"/runs/{first.run_id}")
    assert run["status"] == "FINISHED"
    assert run["latest"]["train/loss"]["step"] == 5, "the step after the highest one"
    assert run["latest"]["train/loss"]["count"] == 6

    try:
        gpuplane.init(server=server.url, token=server.token, resume="run_does_not_exist")
    except ValueError as error:
        assert "cannot resume run run_does_not_exist" in str(error) and "404" in str(error)
    else:
        raise AssertionError("resuming a missing run must raise")


def test_texts_are_logged_per_step_and_listed_newest_step_first(server):
    run = gpuplane.init(project="default", name="texts", server=server.url, token=server.token)
    for step in range(3):
        run.log({"train/loss": 1.0 / (step + 1)}, step=step)
        run.log_text("samples/generation", f"sample at step {step}\nsecond line")
    run.log_text("prompts", "Once upon a time", step=0)
    try:
        run.log_text("samples/generation", "x" * (64 * 1024 + 1))
        raise AssertionError("an oversized text must be refused at once")
    except ValueError as error:
        assert "64 KiB" in str(error)
    run.finish()
    page = server.get(f"/runs/{run.run_id}/texts")
    assert page["keys"] == ["prompts", "samples/generation"]
    assert [(t["step"], t["key"]) for t in page["items"]] == [
        (2, "samples/generation"),
        (1, "samples/generation"),
        (0, "prompts"),
        (0, "samples/generation"),
    ]
    assert page["items"][0]["text"] == "sample at step 2\nsecond line"
    only = server.get(f"/runs/{run.run_id}/texts?key=prompts")
    assert [t["text"] for t in only["items"]] == ["Once upon a time"]
    first = server.get(f"/runs/{run.run_id}/texts?limit=3")
    assert len(first["items"]) == 3 and first["next_before"] is not None
    rest = server.get(f"/runs/{run.run_id}/texts?limit=3&before={first['next_before']}")
    assert [t["step"] for t in rest["items"]] == [0] and rest["next_before"] is None


def test_gpuctl_sync_replays_what_the_sdk_spooled_offline(stopped_server):
    import subprocess

    from gpuplane_testkit import GPUCTL_BIN

    run = gpuplane.init(project="default", name="offline-cli", server=stopped_server.url, token=stopped_server.token,
                        config={"lr": 0.01}, tags=["offline"])
    for step in range(500):
        run.log({"train/loss": float(step)}, step=step)
    run.log_text("samples", "spooled text", step=499)
    run.alert("diverged", level="warning")
    run.finish()
    assert len(os.listdir(spool_dir())) == 1
    env = {**os.environ, "GPUCTL_SERVER": stopped_server.url, "GPUCTL_TOKEN": stopped_server.token}

    down = subprocess.run([GPUCTL_BIN, "sync"], env=env, capture_output=True, text=True)
    assert down.returncode == 8, down.stderr
    assert "stay in the spool" in down.stderr
    assert len(os.listdir(spool_dir())) == 1

    stopped_server.start()
    done = subprocess.run([GPUCTL_BIN, "--json", "sync"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["files"], report["points"], report["texts"], report["skipped_lines"]) == (1, 500, 1, 0)
    assert len(report["runs_created"]) == 1
    run_id = report["runs_created"][0]
    assert os.listdir(spool_dir()) == []
    assert series(stopped_server, run_id, "train/loss") == [(s, float(s)) for s in range(500)]
    summary = stopped_server.get(f"/runs/{run_id}")
    assert summary["status"] == "FINISHED" and summary["name"] == "offline-cli"
    assert summary["config"] == {"lr": 0.01} and summary["tags"] == ["offline"]
    assert stopped_server.get(f"/runs/{run_id}/texts")["items"][0]["text"] == "spooled text"
    [alert] = stopped_server.get(f"/events?run_id={run_id}&kind=RUN_ALERT")["items"]
    assert (alert["severity"], alert["message"]) == ("warning", "diverged")

    again = subprocess.run([GPUCTL_BIN, "sync"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "replayed 0 spool file(s)" in again.stdout


def logged_run(server, name):
    """A run whose loss has 5,000 points with NaN, both infinities and -0.0 among them."""
    run = gpuplane.init(project="default", name=name, server=server.url, token=server.token)
    special = {10: math.nan, 11: math.inf, 12: -math.inf, 13: -0.0}
    expected = []
    for step in range(5000):
        value = special.get(step, 1.0 / (step + 1))
        run.log({"train/loss": value}, step=step, wall_time=1.7e9 + step / 8)
        expected.append(value)
    run.finish()
    return run.run_id, expected


def bits(values):
    import struct

    return [struct.pack("<d", v) for v in values]


def test_history_reads_every_point_exactly_as_arrow_and_as_json(server, monkeypatch):
    run_id, expected = logged_run(server, "history")
    arrow = gpuplane.history(run_id, "train/loss", server=server.url, token=server.token)
    assert arrow._table is not None, "pyarrow is installed, so the answer came as Arrow"
    monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)  # as where pyarrow is missing
    columns = gpuplane.history(run_id, "train/loss", server=server.url, token=server.token)
    assert columns._table is None
    for history in (arrow, columns):
        assert not history.downsampled and len(history) == 5000
        assert history.steps == list(range(5000))
        assert history.times[4999] == 1.7e9 + 4999 / 8
        assert bits(history.values) == bits(expected)
    # A range, by wall time.
    part = gpuplane.history(run_id, "train/loss", x="time", start=1.7e9 + 100, end=1.7e9 + 101, server=server.url, token=server.token)
    assert part.steps == list(range(800, 809))
    assert columns.to_arrow().num_rows == 5000


def test_history_of_more_points_than_asked_is_buckets_and_says_so(server, monkeypatch):
    run_id, _ = logged_run(server, "history-buckets")
    for without_arrow in (False, True):
        if without_arrow:
            monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)
        history = gpuplane.history(run_id, "train/loss", max_points=100, server=server.url, token=server.token)
        assert history.downsampled and len(history) == 100
        assert sum(history.columns["count"]) == 5000
        assert sum(history.columns["non_finite"]) == 3
        assert history.columns["min"][0] == 0.0 and history.columns["max"][0] == 1.0
        try:
            history.values
        except ValueError as error:
            assert "buckets" in str(error)
        else:
            raise AssertionError("values of buckets must not pass for points")


def test_points_logged_just_before_sigterm_are_sent_and_the_process_still_ends_by_it(server):
    """Jobs are stopped with SIGTERM (cancel, preemption, time limit): what
    the script logged in its last second reaches the server first."""
    import signal
    import subprocess
    script = (
        "import os, signal, sys, gpuplane\n"
        "run = gpuplane.init(project='default', name='stopped', server=sys.argv[1], token=sys.argv[2])\n"
        "print(run.run_id, flush=True)\n"
        "for step in range(50):\n"
        "    run.log({'train/loss': 1.0 / (step + 1)}, step=step)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "signal.pause()\n"
    )
    sdk = os.path.dirname(os.path.dirname(os.path.abspath(gpuplane.__file__)))
    done = subprocess.run([sys.executable, "-c", script, server.url, server.token], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": sdk}, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr
    run_id = done.stdout.split()[0]
    assert series(server, run_id, "train/loss") == [(s, 1.0 / (s + 1)) for s in range(50)]

    # A handler the script installed first still runs, after the flush.
    own = script.replace("import os, signal, sys, gpuplane\n",
                         "import os, signal, sys, gpuplane\n"
                         "signal.signal(signal.SIGTERM, lambda *_: (print('saved', flush=True), sys.exit(3)))\n")
    done = subprocess.run([sys.executable, "-c", own, server.url, server.token], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": sdk}, timeout=60)
    assert done.returncode == 3 and done.stdout.split()[1] == "saved", (done.stdout, done.stderr)
    assert len(series(server, done.stdout.split()[0], "train/loss")) == 50
