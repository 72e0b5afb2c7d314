"""A sweep whose trials log through the clients teams already use — the real
`mlflow` client (to this server, through the variables a job gets) and the
real `wandb` package (offline, read by the agent as it writes) — is judged
from those points, end to end through the server, agent and clients, and
stops the same trials at the same steps as Optuna's own
SuccessiveHalvingPruner given the same reports in the same order.

Trials run one at a time (`max_concurrent: 1`) in grid order, so the order
in which they report is known and Optuna can be replayed in it.
"""

import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import Server, free_port, wait_until  # noqa: E402

STEPS = 20
# In grid order: the best first, so that later trials of both clients
# have rungs to lose against.
LRS = [0.1, 0.01, 1.0, 0.3, 0.05, 3.0]
TRIALS = len(LRS)

# Even trials log with mlflow, odd ones with wandb; each rests after its last
# point so the controller judges it while the trial still runs (the agent
# has the wandb package write its file every second).
TRAIN = textwrap.dedent("""
    import json, math, os, sys, time
    params = json.loads(os.environ["GPUCTL_SWEEP_PARAMS"])
    trial = int(os.environ["GPUCTL_SWEEP_TRIAL"])
    lr = float(sys.argv[1].split("=", 1)[1])
    assert lr == params["lr"], (lr, params)

    def loss(step):
        return math.log(lr / 0.1) ** 2 / 10 + 1.0 / (step + 1)

    if trial % 2 == 0:
        import mlflow
        with mlflow.start_run():
            for step in range(STEPS):
                mlflow.log_metric("loss", loss(step), step=step)
                time.sleep(0.1)
            time.sleep(5)
    else:
        import wandb
        run = wandb.init(project="sweep", config=params)
        for step in range(STEPS):
            run.log({"loss": loss(step)}, step=step)
            time.sleep(0.1)
        time.sleep(5)
        run.finish()
""").replace("STEPS", str(STEPS))


def loss(lr, step):
    return math.log(lr / 0.1) ** 2 / 10 + 1.0 / (step + 1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(str(tmp_path_factory.mktemp("server")), free_port())
    server.start()
    server.start_agent(tmp_path_factory.mktemp("jobs"), gpus=1)
    yield server
    server.stop()


def optuna_stops(stop, trials):
    """What Optuna's pruner stops when the trials report one after another."""
    events = []
    for trial in trials:
        lr = trial["params"]["lr"]
        events.append({"trial": trial["number"], "start": True})
        events += [{"trial": trial["number"], "step": s, "value": loss(lr, s)} for s in range(STEPS)]
        events.append({"trial": trial["number"], "finish": loss(lr, STEPS - 1)})
    case = {"key": "client-sweep", "goal": "min", "stop": stop, "events": events}
    replay = subprocess.run([sys.executable, str(Path(__file__).parent / "optuna_decisions.py")],
                            input=json.dumps(case), capture_output=True, text=True, check=True)
    return {number: step for number, step in json.loads(replay.stdout)["pruned"]}


def test_trials_logging_through_mlflow_and_wandb_are_pruned_as_optuna_prunes(server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    created = server.post("/sweeps", {
        "name": "clients",
        "method": "grid",
        "metric": {"name": "loss", "goal": "minimize"},
        "parameters": {"lr": {"values": LRS}},
        "max_concurrent": 1,
        "early_terminate": {"type": "asha", "min_step": 2, "reduction_factor": 2},
        "job": {"command": [sys.executable, "train.py", "--lr=${lr}"], "working_dir": str(work),
                "wandb": "offline", "env": {"WANDB_SILENT": "true"}},
    })
    sweep_id = created["id"]
    finished = wait_until(lambda: (lambda s: s if s["state"] in ("FINISHED", "FAILED") else None)(
        server.get(f"/sweeps/{sweep_id}")), timeout=300)
    assert finished["state"] == "FINISHED", finished
    trials = finished["trials"]
    assert [t["number"] for t in trials] == list(range(TRIALS)), finished

    stopped = {}
    for trial in trials:
        job = server.get(f"/jobs/{trial['job_id']}")
        if trial.get("failure_reason") == "SWEEP_PRUNED":
            assert trial["state"] == "CANCELLED", trial
            stopped[trial["number"]] = int(re.match(r"stopped early at step (\d+)", job["failure_detail"]).group(1))
        else:
            assert trial["state"] == "SUCCEEDED", (trial, job)
        # The rungs hold the client's points at the rung steps (2, 4, 8, 16)
        # the trial reached, as logged.
        reached = [s for s in (2, 4, 8, 16) if s <= stopped.get(trial["number"], STEPS - 1)]
        expected = [loss(trial["params"]["lr"], s) for s in reached]
        assert trial.get("rungs", []) == pytest.approx(expected, rel=1e-12), (trial, job)

    reference = optuna_stops(finished["early_terminate"], trials)
    assert stopped == reference, f"ours {stopped}, Optuna's {reference}"
    # Both clients' trials were judged, and some of each stopped.
    assert {n % 2 for n in stopped} == {0, 1}, f"stopped {stopped} of {trials}"
    assert finished["best"]["state"] == "SUCCEEDED"
