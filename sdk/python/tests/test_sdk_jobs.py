"""The SDK inside real jobs on a real agent: a script written the W&B way
logs to its job's run; what the server refuses is kept apart, reported and
never blinds the next job; what a job spooled because the server's address
was out of its reach reaches the run through the agent; and a job cannot
make the agent read or write outside its own spool folder."""

import json
import os
import subprocess
import sys
import textwrap
import urllib.request

import gpuplane
import pytest
from conftest import Server, free_port, wait_until
from gpuplane_testkit import GPUCTL_BIN

ENDED = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def submit(server, name, code, project="default", **spec):
    """A job running `code` with this interpreter (which has the SDK)."""
    return server.post("/jobs", {
        "name": name, "project": project, "command": [sys.executable, "-c", textwrap.dedent(code)], **spec,
    })


def ended(server, job):
    return wait_until(lambda: (j := server.get(f"/jobs/{job['id']}"))["status"] in ENDED and j, timeout=60)


def steps(server, run_id, key="train/loss"):
    return server.get(f"/runs/{run_id}/metrics?key={key}&max_points=100000&format=columns")["steps"]


def events(server, job, kind):
    return server.get(f"/events?job_id={job['id']}&kind={kind}&limit=100")["items"]


def spool_of(jobs_dir, job):
    return jobs_dir / job["id"] / "attempt-1" / "spool"


def logs(server, job):
    return "\n".join(line["text"] for line in server.get(f"/jobs/{job['id']}/logs?tail=200")["lines"])


@pytest.fixture
def cluster(server, tmp_path):
    """The server, a second project with a run of its own, and an agent
    whose home holds a spool poisoned by an old SDK (refused forever)."""
    server.post("/projects", {"name": "other-team"})
    foreign = server.post("/runs", {"project": "other-team", "name": "their-run"})["id"]
    home = tmp_path / "home"
    poisoned = home / ".gpuctl" / "spool" / "sdk-poisoned.jsonl"
    poisoned.parent.mkdir(parents=True)
    poisoned.write_text(json.dumps({"type": "run", "local_id": "x", "project": "nowhere", "name": "refused"}) + "\n")
    jobs_dir = tmp_path / "jobs"
    server.start_agent(jobs_dir, env={"HOME": str(home)})
    return server, jobs_dir, foreign, poisoned


def test_a_wandb_style_script_in_a_job_logs_to_the_jobs_run(cluster):
    server, jobs_dir, _, poisoned = cluster
    before = poisoned.read_text()
    job = submit(server, "nightly", """
        import gpuplane
        run = gpuplane.init(project="default", name="my-experiment", config={"lr": 0.1, "model": {"depth": 12}},
                            tags=["baseline"], notes="from the script")
        for step in range(50):
            run.log({"train/loss": 1.0 / (step + 1)}, step=step)
        run.finish()
        """)
    assert ended(server, job)["status"] == "SUCCEEDED", logs(server, job)
    run = server.get(f"/runs/{job['run_id']}")
    assert steps(server, job["run_id"]) == list(range(50))
    assert (run["name"], server.get(f"/jobs/{job['id']}")["name"]) == ("my-experiment", "nightly"), \
        "the script names the run; the job keeps its name"
    assert run["config"] == {"lr": 0.1, "model.depth": 12}
    assert "baseline" in run["tags"] and run["notes"] == "from the script"
    assert run.get("metrics_events", []) == []
    for kind in ("NO_METRICS", "METRICS_SPOOLED", "METRICS_REFUSED"):
        assert events(server, job, kind) == [], kind
    assert os.listdir(spool_of(jobs_dir, job)) == [], "nothing spooled"
    assert poisoned.read_text() == before, "the old spool in the agent's home is not the job's"


def test_an_attempt_after_a_failure_resumes_from_the_checkpoint_the_first_saved_and_continues_one_curve(cluster):
    server, jobs_dir, _, _ = cluster
    # Attempt 1 logs steps 0-55 but saves its last checkpoint at step 30,
    # then fails; attempt 2 resumes from that checkpoint and logs 31-81.
    # What attempt 1 logged past step 30 is set aside: one curve, no step twice.
    job = submit(server, "resumes", """
        import os, sys, time, gpuplane
        attempt = int(os.environ["GPUCTL_ATTEMPT"])
        run = gpuplane.init()
        start = (gpuplane.resume_step() or -1) + 1
        if gpuplane.resume_path():
            print("resumed from", open(gpuplane.resume_path()).read(), "at", gpuplane.resume_step())
        for step in range(start, 82 if attempt > 1 else 56):
            run.log({"train/loss": attempt * 1000 + step}, step=step)
            if step % 25 == 0:
                run.log_text("sample", f"attempt {attempt} at {step}", step=step)
            if attempt == 1 and step == 30:
                folder = os.path.join(os.environ["GPUCTL_JOB_DIR"], "checkpoint-30")
                os.makedirs(folder)
                with open(os.path.join(folder, "model.safetensors"), "w") as file:
                    file.write("weights of step 30")
        if attempt == 1:
            run.flush()
            time.sleep(1.5)  # the agent records the checkpoint
            sys.exit(1)
        run.finish()
        """, max_attempts=2, retry_cooldown_s=0,
        # The spec cannot move the job folder, nor point a later attempt elsewhere.
        env={"GPUCTL_JOB_DIR": "/tmp/not-the-job-folder", "GPUCTL_RESUME_FROM": "", "GPUCTL_RESUME_STEP": ""})
    done = ended(server, job)
    assert done["status"] == "SUCCEEDED", logs(server, job)
    assert [a["failure_reason"] for a in done["attempts"]] == ["EXIT_CODE", None]
    saved = str(jobs_dir / job["id"] / "job" / "checkpoint-30" / "model.safetensors")
    assert "resumed from weights of step 30 at 30" in logs(server, job)
    assert server.get(f"/runs/{job['run_id']}/checkpoints")["items"][0]["path"] == saved
    first, second = done["attempts"]
    assert "resume_from" not in first and "resume_step" not in first
    assert (second["resume_from"], second["resume_step"]) == (saved, 30)
    # One curve: steps 0-30 from the first attempt, 31-81 from the second.
    curve = server.get(f"/runs/{job['run_id']}/metrics?key=train/loss&max_points=100000&format=columns")
    assert curve["steps"] == list(range(82))
    assert curve["values"] == [1000 + s for s in range(31)] + [2000 + s for s in range(31, 82)]
    latest = server.get(f"/runs/{job['run_id']}")["latest"]["train/loss"]
    assert (latest["step"], latest["value"], latest["count"]) == (81, 2081, 82), latest
    texts = [t["text"] for t in server.get(f"/runs/{job['run_id']}/texts?limit=100")["items"]]
    assert texts == ["attempt 2 at 75", "attempt 2 at 50", "attempt 1 at 25", "attempt 1 at 0"]
    # The run's chart marks where attempt 2 began.
    request = urllib.request.Request(f"{server.url}/api/v1/runs/{job['run_id']}/chart.svg?key=train/loss",
                                     headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        chart = response.read().decode()
    assert "attempt 2" in chart, chart[:300]


def test_a_checkpoint_named_with_terminal_escapes_reaches_the_next_attempt_exactly_and_the_cli_shows_it_inert(cluster):
    server, jobs_dir, _, _ = cluster
    hostile = "step_5\x1b]0;owned\x07\x1b[2J.pt"
    job = submit(server, "hostile-checkpoint", f"""
        import os, sys, time
        if os.environ["GPUCTL_ATTEMPT"] == "1":
            with open(os.path.join(os.environ["GPUCTL_JOB_DIR"], {hostile!r}), "w") as file:
                file.write("weights")
            time.sleep(1.5)  # the agent records the checkpoint
            sys.exit(1)
        print("resume", repr(os.environ["GPUCTL_RESUME_FROM"]), os.environ["GPUCTL_RESUME_STEP"])
        """, max_attempts=2, retry_cooldown_s=0)
    done = ended(server, job)
    assert done["status"] == "SUCCEEDED", logs(server, job)
    saved = str(jobs_dir / job["id"] / "job" / hostile)
    assert done["attempts"][1]["resume_from"] == saved
    assert f"resume {saved!r} 5" in logs(server, job)
    env = {**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": server.token}
    cli = subprocess.run([GPUCTL_BIN, "job", "show", job["id"]], env=env, capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert "\x1b" not in cli.stdout and "\x07" not in cli.stdout, repr(cli.stdout)
    assert "resumed from step 5 (" in cli.stdout and "step_5\\u{1b}]0;owned\\u{7}\\u{1b}[2J.pt)" in cli.stdout, cli.stdout


def test_resume_helpers_read_the_attempts_variables(monkeypatch):
    monkeypatch.delenv("GPUCTL_RESUME_FROM", raising=False)
    monkeypatch.delenv("GPUCTL_RESUME_STEP", raising=False)
    assert (gpuplane.resume_path(), gpuplane.resume_step()) == (None, None)
    monkeypatch.setenv("GPUCTL_RESUME_FROM", "")
    monkeypatch.setenv("GPUCTL_RESUME_STEP", "")
    assert (gpuplane.resume_path(), gpuplane.resume_step()) == (None, None), "an attempt with nothing recorded"
    monkeypatch.setenv("GPUCTL_RESUME_FROM", "/jobs/j1/job/step_7.pt")
    monkeypatch.setenv("GPUCTL_RESUME_STEP", "7")
    assert (gpuplane.resume_path(), gpuplane.resume_step()) == ("/jobs/j1/job/step_7.pt", 7)
    monkeypatch.setenv("GPUCTL_RESUME_STEP", "seven")
    with pytest.raises(ValueError, match="GPUCTL_RESUME_STEP is 'seven'"):
        gpuplane.resume_step()


def test_init_inside_a_job_refuses_another_project_or_run_at_once(cluster):
    server, _, foreign, _ = cluster
    elsewhere = submit(server, "elsewhere", 'import gpuplane; gpuplane.init(project="other-team", name="x")')
    done = ended(server, elsewhere)
    assert done["status"] == "FAILED", done
    assert "this job runs in project 'default'" in logs(server, elsewhere)
    resumed = submit(server, "resumed", f'import gpuplane; gpuplane.init(resume="{foreign}")')
    assert ended(server, resumed)["status"] == "FAILED"
    assert "names another run" in logs(server, resumed)
    # Its own run is fine to name.
    own = submit(server, "own", """
        import os, gpuplane
        run = gpuplane.init(resume=os.environ["GPUCTL_RUN_ID"])
        run.log({"train/loss": 1.0}, step=7)
        run.finish()
        """)
    assert ended(server, own)["status"] == "SUCCEEDED", logs(server, own)
    assert steps(server, own["run_id"]) == [7]


def test_what_the_server_refuses_is_quarantined_and_reported_and_the_next_job_sees_none_of_it(cluster):
    """A script that also writes into another team's run: the server refuses
    those points (404: no such run for its token), the SDK keeps them in the job's quarantine and warns,
    the agent reports METRICS_REFUSED, the run page and `gpuctl run show`
    say where they went; the job's own metrics arrive, and the next job on
    the host logs as if nothing happened."""
    server, jobs_dir, foreign, _ = cluster
    intruder = submit(server, "intruder", f"""
        import os, gpuplane
        run = gpuplane.init()
        theirs = gpuplane.Run(os.environ["GPUCTL_SERVER"], os.environ["GPUCTL_TOKEN"], run_id="{foreign}")
        for step in range(20):
            run.log({{"train/loss": float(step)}}, step=step)
            theirs.log({{"train/loss": -1.0}}, step=step)
        theirs.finish()
        run.finish()
        """)
    assert ended(server, intruder)["status"] == "SUCCEEDED", logs(server, intruder)
    assert "refused" in logs(server, intruder), "the script was told"
    assert steps(server, intruder["run_id"]) == list(range(20))
    assert steps(server, foreign) == [], "nothing reached the other team's run"
    [refused] = events(server, intruder, "METRICS_REFUSED")
    quarantine = spool_of(jobs_dir, intruder) / "quarantine"
    [held] = os.listdir(quarantine)
    assert "404" in refused["message"] and str(quarantine / held) in refused["message"], refused
    assert "gpuctl sync --quarantined" in refused["message"]
    kept = [json.loads(line) for line in (quarantine / held).read_text().splitlines()]
    assert kept[0] == {"type": "run", "run_id": foreign}
    assert sum(len(r.get("points", [])) for r in kept) == 20, "every refused point kept"
    assert events(server, intruder, "NO_METRICS") == []
    shown = server.get(f"/runs/{intruder['run_id']}")["metrics_events"]
    assert [e["kind"] for e in shown] == ["METRICS_REFUSED"]
    env = {**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": server.token}
    cli = subprocess.run([GPUCTL_BIN, "run", "show", intruder["run_id"]], env=env, capture_output=True, text=True)
    assert cli.returncode == 0 and "METRICS_REFUSED" in cli.stdout and held in cli.stdout, cli.stdout

    after = submit(server, "after", """
        import gpuplane
        run = gpuplane.init()
        for step in range(10):
            run.log({"train/loss": float(step)}, step=step)
        run.finish()
        """)
    assert ended(server, after)["status"] == "SUCCEEDED", logs(server, after)
    assert steps(server, after["run_id"]) == list(range(10))
    assert events(server, after, "METRICS_REFUSED") == [] and events(server, after, "METRICS_SPOOLED") == []
    assert os.listdir(quarantine) == [held], "the intruder's quarantine is left as it was"


def test_a_job_that_cannot_reach_the_server_spools_and_the_agent_sends_it(spool, tmp_path):
    """The server's public URL is out of the jobs' reach (a common mistake):
    the SDK spools, saying why; when the job ends the agent, which reaches
    the server, sends the spool with the job's token, and what that token
    may not write (another team's run) is quarantined and reported."""
    dead = f"http://127.0.0.1:{free_port()}"
    server = Server(str(tmp_path / "server"), free_port(), flags=["--public-url", dead])
    server.start()
    try:
        server.post("/projects", {"name": "other-team"})
        foreign = server.post("/runs", {"project": "other-team", "name": "their-run"})["id"]
        jobs_dir = tmp_path / "jobs"
        server.start_agent(jobs_dir)
        job = submit(server, "offline", f"""
            import os, gpuplane
            run = gpuplane.init(name="spooled", config={{"lr": 0.5}})
            theirs = gpuplane.Run(os.environ["GPUCTL_SERVER"], os.environ["GPUCTL_TOKEN"], run_id="{foreign}")
            for step in range(100):
                run.log({{"train/loss": float(step)}}, step=step)
            theirs.log({{"train/loss": -1.0}}, step=0)
            theirs.finish()
            run.finish()
            """)
        assert ended(server, job)["status"] == "SUCCEEDED", logs(server, job)
        assert steps(server, job["run_id"]) == list(range(100)), "the agent sent what the job spooled"
        run = server.get(f"/runs/{job['run_id']}")
        assert run["config"] == {"lr": 0.5} and run["name"] == "spooled"
        assert steps(server, foreign) == []
        spooled = events(server, job, "METRICS_SPOOLED")
        warned = [e for e in spooled if e["severity"] == "warning"]
        assert warned and all("could not be reached" in e["message"] for e in warned), spooled
        assert any(e["severity"] == "info" and "sent the 100 metric point(s)" in e["message"] for e in spooled), spooled
        [refused] = events(server, job, "METRICS_REFUSED")
        assert "404" in refused["message"], refused
        assert events(server, job, "NO_METRICS") == []
        spool_dir = spool_of(jobs_dir, job)
        assert os.listdir(spool_dir) == ["quarantine"], "sent, or quarantined"
    finally:
        server.stop()


def test_a_job_cannot_make_the_agent_read_or_write_outside_its_spool(cluster, tmp_path):
    """The attack, in two jobs: one plants, in its spool folder, a link to
    another job's spool file (followed, the agent would send it with this
    job's token, be refused, and copy it into this job's quarantine, where
    the job reads it); the other makes `quarantine` a link to a folder
    outside and leaves a file the server refuses (followed, the agent would
    write there). The agent follows neither."""
    server, jobs_dir, foreign, _ = cluster
    victim = tmp_path / "victim"
    victim.mkdir()
    theirs = victim / "sdk-theirs.jsonl"
    point = {"key": "secret/value", "step": 0, "wall_time": 1.7e9, "value": 42.0}
    theirs.write_text(json.dumps({"type": "run", "run_id": foreign}) + "\n"
                      + json.dumps({"type": "batch", "batch_id": "b", "points": [point]}) + "\n")
    before = theirs.read_text()
    reader = submit(server, "link-planter", f"""
        import os
        os.symlink({str(theirs)!r}, os.path.join(os.environ["GPUCTL_SPOOL_DIR"], "sdk-link.jsonl"))
        """)
    assert ended(server, reader)["status"] == "SUCCEEDED", logs(server, reader)
    assert theirs.read_text() == before, "the other file is untouched"
    copied = [p.read_text() for p in spool_of(jobs_dir, reader).rglob("*") if p.is_file() and not p.is_symlink()]
    assert not any("secret/value" in text for text in copied), "nothing of it copied into the job's folder"

    outside = tmp_path / "outside"
    outside.mkdir()
    writer = submit(server, "quarantine-planter", f"""
        import json, os
        spool = os.environ["GPUCTL_SPOOL_DIR"]
        os.symlink({str(outside)!r}, os.path.join(spool, "quarantine"))
        # A spool file the server refuses, so the agent needs the quarantine.
        with open(os.path.join(spool, "sdk-own.jsonl"), "w") as file:
            file.write(json.dumps({{"type": "run", "run_id": "{foreign}"}}) + "\\n")
            file.write(json.dumps({{"type": "config", "config": {{"planted": 1}}}}) + "\\n")
        """)
    assert ended(server, writer)["status"] == "SUCCEEDED", logs(server, writer)
    assert os.listdir(outside) == [], "nothing written through the link"
    assert server.get(f"/runs/{foreign}")["config"] == {}
    messages = [e["message"] for e in events(server, writer, "METRICS_SPOOLED")]
    assert any("could not send" in m for m in messages), messages
