"""The SDK under faults, with real script processes (RELIABILITY.md): a
server down while a script logs 100,000 points, a script killed with
SIGKILL while it spools, two processes of one run spooling at once, a
replay while another process spools, a replay with a refused token, a run
started offline replayed by another process while it logs, a replay cut
off after creating its run, and a token refused while a script logs (its
data goes to the quarantine, not the spool).
Every point once after replay; a second replay adds nothing."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import gpuplane
import pytest
from gpuplane._spool import spool_dir
from gpuplane_testkit import GPUCTL_BIN, free_port


def steps(server, run_id, key):
    answer = server.get(f"/runs/{run_id}/metrics?key={key}&max_points=1000000&format=columns")
    return answer["steps"]


def script(code, **env):
    """A Python process running `code` with the SDK, the test's spool dir and `env`."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process, timeout=120):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


def test_a_server_down_while_a_script_logs_100000_points_loses_and_repeats_nothing(server):
    logger = script(
        """
        import time, gpuplane
        run = gpuplane.init(project="default", name="down-meanwhile")
        print(run.run_id, flush=True)
        for step in range(100_000):
            run.log({"train/loss": 1.0 / (step + 1)}, step=step)
            if step % 1000 == 0:
                time.sleep(0.05)
        run.finish()
        """,
        GPUCTL_SERVER=server.url,
        GPUCTL_TOKEN=server.token,
    )
    run_id = logger.stdout.readline().strip()
    time.sleep(1.0)
    server.stop()  # down while the script goes on logging
    time.sleep(3.0)
    server.start()
    finished(logger)
    # What the script could not send before it ended waits in the spool.
    first = gpuplane.sync(server=server.url, token=server.token)
    assert first.skipped == 0
    assert steps(server, run_id, "train/loss") == list(range(100_000))
    assert gpuplane.sync(server=server.url, token=server.token).sent == 0, "a second replay adds nothing"
    assert len(steps(server, run_id, "train/loss")) == 100_000
    assert server.get(f"/runs/{run_id}")["status"] == "FINISHED"


def test_a_script_killed_mid_spool_replays_its_complete_records_and_counts_the_torn_one(stopped_server):
    logger = script(
        """
        import gpuplane
        run = gpuplane.init(project="default", name="killed")
        step = 0
        while True:
            run.log({"train/loss": float(step)}, step=step)
            step += 1
            if step % 50 == 0:
                run.flush()
        """,
        GPUCTL_SERVER=stopped_server.url,
        GPUCTL_TOKEN=stopped_server.token,
    )
    time.sleep(2.0)
    logger.send_signal(signal.SIGKILL)
    logger.wait()
    stopped_server.start()
    result = gpuplane.sync(server=stopped_server.url, token=stopped_server.token)
    assert result.skipped <= 1, "at most the record being written when it died is torn"
    [run_id] = result.run_ids.values()
    found = steps(stopped_server, run_id, "train/loss")
    assert result.sent > 0 and len(found) == result.sent
    assert found == list(range(len(found))), "the complete records, each once, in order"
    assert gpuplane.sync(server=stopped_server.url, token=stopped_server.token).sent == 0
    print(f"killed mid-spool: {result.sent} points replayed, {result.skipped} torn record skipped")


def test_two_processes_of_one_run_spool_at_once_and_both_are_replayed(server):
    run = gpuplane.init(project="default", name="two-writers", server=server.url, token=server.token)
    run.flush()
    server.stop()
    writers = [
        script(
            f"""
            import gpuplane
            run = gpuplane.init()
            for step in range(5000):
                run.log({{"proc{n}/loss": float(step)}}, step=step)
            run.finish()
            """,
            GPUCTL_SERVER=server.url,
            GPUCTL_TOKEN=server.token,
            GPUCTL_RUN_ID=run.run_id,
        )
        for n in range(2)
    ]
    for writer in writers:
        finished(writer)
    assert len(os.listdir(spool_dir())) == 2, "a spool file each"
    server.start()
    result = gpuplane.sync(server=server.url, token=server.token)
    assert (result.sent, result.skipped) == (10_000, 0)
    for n in range(2):
        assert steps(server, run.run_id, f"proc{n}/loss") == list(range(5000))
    assert gpuplane.sync(server=server.url, token=server.token).sent == 0


def test_a_replay_while_another_process_of_the_run_spools_loses_nothing(server):
    """The spool of a live process replayed from another one, over and over
    (`gpuctl sync` on a node whose training script cannot reach the server):
    a replay never reads half a record nor deletes what is appended next."""
    run = gpuplane.init(project="default", name="replayed-while-spooling", server=server.url, token=server.token)
    run.flush()
    dead = f"http://127.0.0.1:{free_port()}"  # the script's server address answers nothing
    writer = script(
        """
        import gpuplane
        run = gpuplane.init()
        for step in range(20_000):
            run.log({"train/loss": float(step)}, step=step)
            if step % 100 == 99:
                run.flush()
        run.finish()
        """,
        GPUCTL_SERVER=dead,
        GPUCTL_TOKEN=server.token,
        GPUCTL_RUN_ID=run.run_id,
    )
    replays = 0
    while writer.poll() is None:
        gpuplane.sync(server=server.url, token=server.token)
        replays += 1
    finished(writer)
    gpuplane.sync(server=server.url, token=server.token)
    assert replays > 1
    assert steps(server, run.run_id, "train/loss") == list(range(20_000)), "every point once"
    assert os.listdir(spool_dir()) == []


def test_a_refused_token_keeps_the_spool_for_a_later_replay(server):
    """A 401 is about the token, not the data: neither `gpuctl sync` nor the
    SDK drops spooled points for it."""
    run = gpuplane.init(project="default", name="token-refused", server=server.url, token=server.token)
    run.flush()
    server.stop()
    logger = script(
        """
        import gpuplane
        run = gpuplane.init()
        for step in range(1000):
            run.log({"train/loss": float(step)}, step=step)
        run.finish()
        """,
        GPUCTL_SERVER=server.url,
        GPUCTL_TOKEN=server.token,
        GPUCTL_RUN_ID=run.run_id,
    )
    finished(logger)
    server.start()
    env = {**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": "gpp_not-a-token"}
    cli = subprocess.run([GPUCTL_BIN, "sync"], env=env, capture_output=True, text=True)
    assert cli.returncode == 3 and "stay in the spool" in cli.stderr, cli.stderr
    with pytest.warns(UserWarning, match="refused the token"):
        sdk = gpuplane.sync(server=server.url, token="gpp_not-a-token")
    assert sdk.sent == 0 and len(os.listdir(spool_dir())) == 1, "nothing dropped for a bad token"
    assert gpuplane.sync(server=server.url, token=server.token).sent == 1000
    assert steps(server, run.run_id, "train/loss") == list(range(1000))
    assert os.listdir(spool_dir()) == []


def replay(server, by):
    """Replays the spool by the SDK (`gpuplane.sync()`) or by `gpuctl sync`."""
    if by == "sdk":
        return gpuplane.sync(server=server.url, token=server.token)
    env = {**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": server.token}
    done = subprocess.run([GPUCTL_BIN, "sync"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def runs_named(server, name):
    return [run["id"] for run in server.get("/runs?limit=100")["items"] if run["name"] == name]


@pytest.mark.parametrize("by", ["sdk", "gpuctl"])
def test_a_run_started_offline_and_replayed_by_another_process_stays_one_run(stopped_server, by):
    """A script starts a run while the server is down; the server comes back
    and another process replays the spool (creating the run) while the
    script still logs: the script goes on with that run, not a second one."""
    logger = script(
        """
        import sys, gpuplane
        run = gpuplane.init(project="default", name="offline-then-replayed")
        for step in range(1000):
            run.log({"train/loss": float(step)}, step=step)
        run.flush()
        print("spooled", flush=True)
        sys.stdin.readline()
        for step in range(1000, 2000):
            run.log({"train/loss": float(step)}, step=step)
        run.finish()
        """,
        GPUCTL_SERVER=stopped_server.url,
        GPUCTL_TOKEN=stopped_server.token,
    )
    assert logger.stdout.readline().strip() == "spooled"
    stopped_server.start()
    replay(stopped_server, by)
    [run_id] = runs_named(stopped_server, "offline-then-replayed")
    logger.stdin.write("go on\n")
    logger.stdin.flush()
    finished(logger)
    replay(stopped_server, by)
    assert runs_named(stopped_server, "offline-then-replayed") == [run_id], "one run"
    assert steps(stopped_server, run_id, "train/loss") == list(range(2000))
    assert stopped_server.get(f"/runs/{run_id}")["status"] == "FINISHED"
    assert os.listdir(spool_dir()) == [], "no spool file and no run id left behind"


@pytest.mark.parametrize("by", ["sdk", "gpuctl"])
def test_a_replay_cut_off_after_creating_its_run_does_not_create_another(stopped_server, by):
    logger = script(
        """
        import gpuplane
        run = gpuplane.init(project="default", name="cut-off")
        for step in range(500):
            run.log({"train/loss": float(step)}, step=step)
        run.finish()
        """,
        GPUCTL_SERVER=stopped_server.url,
        GPUCTL_TOKEN=stopped_server.token,
    )
    finished(logger)
    stopped_server.start()
    # What a replay that created the run and then lost the server leaves.
    run_id = stopped_server.post("/runs", {"project": "default", "name": "cut-off"})["id"]
    [name] = os.listdir(spool_dir())
    with open(os.path.join(spool_dir(), name), "a", encoding="utf-8") as file:
        file.write(json.dumps({"type": "run_created", "run_id": run_id}) + "\n")
    replay(stopped_server, by)
    assert runs_named(stopped_server, "cut-off") == [run_id], "not created twice"
    assert steps(stopped_server, run_id, "train/loss") == list(range(500))


def test_a_script_whose_token_is_refused_keeps_its_data_in_the_quarantine_not_the_spool(server):
    """A token revoked (or mistyped) while a script logs: what it logs is
    kept apart in the quarantine (never in the spool, where it would stand
    in front of every later run's data), said once, listed by `gpuctl sync
    --list` with the server's reason, and sent by `gpuctl sync --quarantined`
    once a good token is at hand."""
    run_id = gpuplane.init(project="default", name="revoked", server=server.url, token=server.token).run_id
    run = gpuplane.Run(server.url, "gpp_revoked-meanwhile", run_id=run_id)
    with pytest.warns(UserWarning, match="refused") as caught:
        for step in range(300):
            run.log({"train/loss": float(step)}, step=step)
        run.config.update({"lr": 0.1})
        run.finish()
    assert len([w for w in caught if "refused" in str(w.message)]) == 1, "said once"
    assert run.refused >= 3, "points, config and finish kept"
    assert os.listdir(spool_dir()) == ["quarantine"], "nothing in the spool"
    env = {**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": server.token}
    listed = subprocess.run([GPUCTL_BIN, "sync", "--list", "--json"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    [held] = json.loads(listed.stdout)["quarantined"]
    assert (held["run"], held["points"], held["status"]) == (run_id, 300, 401)
    assert "not known" in held["reason"], held
    assert gpuplane.sync(server=server.url, token=server.token).sent == 0, "a plain sync leaves the quarantine alone"
    assert gpuplane.sync(server=server.url, token=server.token, quarantined=True).sent == 300
    assert steps(server, run_id, "train/loss") == list(range(300))
    summary = server.get(f"/runs/{run_id}")
    assert summary["config"] == {"lr": 0.1} and summary["status"] == "FINISHED"
    assert os.listdir(os.path.join(spool_dir(), "quarantine")) == []


@pytest.mark.parametrize("by", ["sdk", "gpuctl"])
def test_what_a_replay_is_refused_waits_in_the_quarantine_and_blocks_nothing(server, by):
    """Three runs spool while the server is down: one is deleted meanwhile
    (404: its whole file waits in the quarantine), one logged a point the
    server refuses (422: that batch alone waits), one is fine. One replay
    sends all it can and keeps the rest apart with the server's reason;
    `gpuctl sync --list` shows why; the spool is empty, so the next run
    sends at once."""
    gone, mixed, fine = (
        gpuplane.init(project="default", name=name, server=server.url, token=server.token)
        for name in ("gone", "mixed", "fine")
    )
    server.stop()
    for run in (gone, mixed, fine):
        for step in range(100):
            run.log({"train/loss": float(step)}, step=step)
        run.flush()
    mixed.log({"bad\x07key": 1.0}, step=100)
    mixed.flush()
    mixed.log({"train/loss": 100.0}, step=100)
    for run in (gone, mixed, fine):
        run.finish()
    assert len(os.listdir(spool_dir())) == 3
    server.start()
    server.call("DELETE", f"/runs/{gone.run_id}")
    replay(server, by)
    assert steps(server, fine.run_id, "train/loss") == list(range(100))
    assert steps(server, mixed.run_id, "train/loss") == list(range(101)), "the records after the refused one went"
    assert server.get(f"/runs/{mixed.run_id}")["status"] == "FINISHED"
    assert os.listdir(spool_dir()) == ["quarantine"]
    env = {**os.environ, "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": server.token}
    listed = subprocess.run([GPUCTL_BIN, "sync", "--list", "--json"], env=env, capture_output=True, text=True)
    held = {entry["run"]: entry for entry in json.loads(listed.stdout)["quarantined"]}
    assert (held[gone.run_id]["status"], held[gone.run_id]["points"]) == (404, 100), held
    assert (held[mixed.run_id]["status"], held[mixed.run_id]["points"], held[mixed.run_id]["records"]) == (422, 1, 1)
    assert "key" in held[mixed.run_id]["reason"], held
    human = subprocess.run([GPUCTL_BIN, "sync", "--list"], env=env, capture_output=True, text=True).stdout
    assert "the server answered: 404" in human and "the server answered: 422" in human, human
    after = gpuplane.init(project="default", name="after", server=server.url, token=server.token)
    after.log({"train/loss": 1.0}, step=0)
    after.flush()
    assert steps(server, after.run_id, "train/loss") == [0], "sent at once, nothing in front of it"
    after.finish()


@pytest.mark.parametrize("by", ["sdk", "gpuctl"])
def test_a_spool_file_cannot_make_a_replay_write_outside_the_spool_dir(stopped_server, by, tmp_path):
    """The attack: a spool file whose local id is a path, beside a directory
    named so that the marker `created-<local id>` would resolve to a file
    outside the spool dir. The replay creates the run and sends its points,
    but leaves no run id file anywhere."""
    os.makedirs(os.path.join(spool_dir(), "created-.."))
    with open(os.path.join(spool_dir(), "sdk-crafted.jsonl"), "w", encoding="utf-8") as file:
        header = {"type": "run", "local_id": "../../../escaped", "project": "default", "name": "crafted"}
        point = {"key": "train/loss", "step": 0, "wall_time": 1.7e9, "value": 1.0}
        file.write(json.dumps(header) + "\n" + json.dumps({"type": "batch", "batch_id": "b", "points": [point]}) + "\n")
    stopped_server.start()
    replay(stopped_server, by)
    [run_id] = runs_named(stopped_server, "crafted")
    assert steps(stopped_server, run_id, "train/loss") == [0]
    written = [str(p) for p in tmp_path.rglob("*escaped*")]
    assert written == [], "nothing written outside the spool dir"
    assert os.listdir(spool_dir()) == ["created-.."]


def test_a_server_error_is_tried_again_before_anything_is_spooled(server):
    """A load balancer answers 503 twice (a replica restarting), then the
    server answers: the SDK tries again at once and nothing is spooled."""
    import http.server
    import threading
    import urllib.request

    failures = {"left": 2}

    class FlakyProxy(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path.endswith("/metrics") and failures["left"] > 0:
                failures["left"] -= 1
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            forwarded = urllib.request.Request(server.url + self.path, data=body, method="POST", headers={
                "Authorization": self.headers["Authorization"], "Content-Type": "application/json"})
            with urllib.request.urlopen(forwarded, timeout=10) as answer:
                payload = answer.read()
                self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyProxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        run = gpuplane.init(project="default", name="flaky", server=url, token=server.token)
        for step in range(10):
            run.log({"train/loss": float(step)}, step=step)
        run.flush()
        assert failures["left"] == 0, "the 503s were met"
        assert steps(server, run.run_id, "train/loss") == list(range(10))
        assert not os.path.exists(spool_dir()) or os.listdir(spool_dir()) == [], "nothing spooled"
        run.finish()
    finally:
        proxy.shutdown()
