"""W&B offline runs: a job whose spec says `wandb = "offline"` runs an
unmodified `wandb` script (the real package from PyPI) with
`WANDB_MODE=offline`, and the agent reads the run file the package writes
into the job's run as it grows: history as metrics (NaN kept, nested keys
joined with `.`), config and hand-set summary values as config."""

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import Server, free_port  # noqa: E402

TRAIN = textwrap.dedent("""
    import math, os, time, wandb
    assert os.environ["WANDB_MODE"] == "offline", os.environ.get("WANDB_MODE")
    # The package writes its file every second, not every 15 s.
    assert os.environ["WANDB__TRANSACTION_LOG_FLUSH_INTERVAL"] == "1"
    run = wandb.init(project="demo", config={"lr": 0.1, "model": {"layers": 4}})
    for step in range(40):
        run.log({"train/loss": math.nan if step == 13 else 1.0 / (step + 1), "eval": {"acc": step / 40},
                 "evil\\x1b]0;owned\\x07": step})
        if step == 20:
            # Halfway, the points so far are already on the run page.
            open("halfway", "w").close()
            while not os.path.exists("go-on"):
                time.sleep(0.05)
    run.summary["best_acc"] = 0.975
    run.finish()
""")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(str(tmp_path_factory.mktemp("server")), free_port())
    server.start()
    server.start_agent(tmp_path_factory.mktemp("jobs"), gpus=1)
    yield server
    server.stop()


def wait(what, check, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited for {what}"
        time.sleep(0.2)


def output(server, job_id):
    return "\n".join(line["text"] for stream in ("stdout", "stderr")
                     for line in server.get(f"/jobs/{job_id}/logs?stream={stream}")["lines"])


def test_a_wandb_script_logs_offline_into_the_jobs_run_as_it_runs(server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    job = server.post("/jobs", {"name": "wandb-offline", "command": [sys.executable, "-c", TRAIN],
                                "working_dir": str(work), "wandb": "offline",
                                "env": {"WANDB_MODE": "online", "WANDB_SILENT": "true"}})
    assert job["spec"]["wandb"] == "offline"
    wait("the script to reach step 20", lambda: (work / "halfway").exists())
    # Live: the rows logged so far arrive while the script waits.
    live = wait("the first rows on the run", lambda: server.get(f"/runs/{job['run_id']}")["latest"].get("train/loss"))
    assert live["count"] >= 1
    (work / "go-on").touch()
    done = wait("the job to end", lambda: (lambda j: j if j["status"] in ("SUCCEEDED", "FAILED") else None)(
        server.get(f"/jobs/{job['id']}")))
    assert done["status"] == "SUCCEEDED", output(server, job["id"])

    def whole():
        run = server.get(f"/runs/{job['run_id']}")
        return run if run["latest"].get("train/loss", {}).get("count") == 40 and "summary.best_acc" in run["config"] \
            else None
    run = wait("every row and the summary", whole, timeout=30)
    loss = server.get(f"/runs/{job['run_id']}/metrics?key=train/loss&max_points=100000")["points"]
    assert [point["step"] for point in loss] == list(range(40))
    assert loss[13]["value"] == "NaN" and loss[2]["value"] == 1 / 3
    assert run["latest"]["eval.acc"]["step"] == 39
    assert run["config"]["lr"] == 0.1 and run["config"]["model.layers"] == 4
    assert run["config"]["summary.best_acc"] == 0.975
    assert not [key for key in run["config"] if key.startswith("_")], run["config"]
    events = server.get(f"/events?run_id={job['run_id']}&kind=LOSS_NAN")["items"]
    assert len(events) == 1, "a NaN from W&B is diagnosed as any other"
    # A key no metric may have (a terminal escape) is left out, said once,
    # and the rows it was in arrive without it.
    assert not [key for key in run["latest"] if "\x1b" in key], run["latest"]
    dropped = server.get(f"/events?job_id={job['id']}&kind=REPORT_DROPPED")["items"]
    assert len(dropped) == 1 and "cannot be metric keys" in dropped[0]["message"], dropped
    # Nothing landed in the working directory: WANDB_DIR is the attempt's.
    assert not (work / "wandb").exists()


def test_without_the_spec_key_nothing_changes_and_other_modes_are_refused(server, tmp_path):
    job = server.post("/jobs", {"name": "no-wandb", "working_dir": str(tmp_path),
                                "command": [sys.executable, "-c", "import os; print('mode', os.environ.get('WANDB_MODE'))"]})
    done = wait("the job to end", lambda: (lambda j: j if j["status"] in ("SUCCEEDED", "FAILED") else None)(
        server.get(f"/jobs/{job['id']}")))
    assert done["status"] == "SUCCEEDED"
    assert "mode None" in output(server, job["id"])
    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.post("/jobs", {"name": "online", "command": ["true"], "wandb": "online"})
    assert refused.value.code == 422
    assert "wandb" in refused.value.read().decode()
