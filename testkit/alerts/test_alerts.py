"""Alerts end to end: a real server and agent run a job that really fails;
a real local HTTP receiver gets the signed webhook (after refusing the first
try, so the retry is seen) and the Slack-style message, and a real SMTP
server process (aiosmtpd, from PyPI) receives the email. The SDK's
``run.alert`` goes the same way."""

import hashlib
import hmac
import json
import mailbox
import subprocess
import sys
import threading
import time
from email.header import decode_header, make_header
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import Server, free_port, wait_until  # noqa: E402

PYTHON = sys.executable
SECRET = "webhook-secret-for-tests"


class Receiver:
    """A local HTTP server that keeps every POST; the first one to
    ``/hook`` is answered 503, so the sender has to try again."""

    def __init__(self):
        self.requests = []
        self.refused_first = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/hook" and not receiver.refused_first:
                    receiver.refused_first = True
                    receiver.requests.append(("refused", self.path, self.headers, body))
                    self.send_response(503)
                    self.end_headers()
                    self.wfile.write(b"busy, try later")
                    return
                receiver.requests.append(("ok", self.path, self.headers, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self, path):
        return [(headers, json.loads(body)) for status, p, headers, body in self.requests if status == "ok" and p == path]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("alerts")
    maildir = root / "maildir"
    smtp_port = free_port()
    smtp = subprocess.Popen(
        [PYTHON, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{smtp_port}", "-c", "aiosmtpd.handlers.Mailbox", str(maildir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    receiver = Receiver()
    port = free_port()
    server = Server(
        str(root / "server"), port,
        flags=["--smtp-url", f"smtp://127.0.0.1:{smtp_port}", "--smtp-from", "GPUPlane <gpuplane@example.com>",
               "--alert-retry-initial-s", "1", "--public-url", f"http://127.0.0.1:{port}",
               # The receivers run on this host: an admin allows webhooks into it.
               "--alert-private-hosts", "true"],
    )
    server.start()
    # A fixed free-space reading: a nearly full disk on the test machine
    # would add a DISK_LOW alert to the ones the tests count.
    server.start_agent(root / "jobs", gpus=1, flags=["--disk-free-percent-override", "50"])
    yield server, receiver, maildir
    server.stop()
    receiver.server.shutdown()
    smtp.terminate()
    smtp.wait(timeout=10)


def deliveries(server, **query):
    path = "/alerts/deliveries?" + "&".join(f"{k}={v}" for k, v in query.items())
    return server.get(path)["items"]


def test_a_failed_job_reaches_a_signed_webhook_slack_and_email(setup):
    server, receiver, maildir = setup
    server.post("/alerts/channels", {"name": "hook", "kind": "webhook", "url": f"{receiver.url}/hook", "secret": SECRET})
    server.post("/alerts/channels", {"name": "chat", "kind": "slack", "url": f"{receiver.url}/slack"})
    server.post("/alerts/channels", {"name": "oncall", "kind": "email", "to": ["oncall@example.com"]})
    # The project's events to the webhook; the user's own failures to chat;
    # every critical event (nodes' too) by email.
    server.post("/alerts/subscriptions", {"channel": "hook", "project": "default"})
    server.post("/alerts/subscriptions", {"channel": "chat", "kinds": ["JOB_FAILED"]})
    server.post("/alerts/subscriptions", {"channel": "oncall", "all": True, "min_severity": "critical"})

    code = "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB'); sys.exit(1)"
    job = server.post("/jobs", {"name": "oom-job", "command": [PYTHON, "-c", code], "resources": {"gpu": 1},
                                "max_attempts": 1})
    job_id = job["id"]

    def all_sent():
        items = deliveries(server, job_id=job_id)
        return len(items) == 4 and all(d["status"] == "sent" for d in items) and items
    items = wait_until(all_sent, timeout=60)
    by_channel = {}
    for delivery in items:
        by_channel.setdefault(delivery["channel"], []).append(delivery)
    assert sorted(d["event"]["kind"] for d in by_channel["hook"]) == ["JOB_FAILED", "OOM"]
    assert [d["event"]["kind"] for d in by_channel["chat"]] == ["JOB_FAILED"]
    assert [d["event"]["kind"] for d in by_channel["oncall"]] == ["OOM"]
    # The first webhook try was refused (503) and tried again.
    refused = [r for r in receiver.requests if r[0] == "refused"]
    assert len(refused) == 1
    retried_id = refused[0][2]["X-GPUPlane-Delivery"]
    retried = next(d for d in by_channel["hook"] if d["id"] == retried_id)
    assert retried["attempts"] == 2, retried

    # Each webhook message is signed: HMAC-SHA256 of "timestamp.body".
    hooks = [r for r in receiver.requests if r[0] == "ok" and r[1] == "/hook"]
    assert len(hooks) == 2
    for _, _, headers, body in hooks:
        expected = hmac.new(SECRET.encode(), f"{headers['X-GPUPlane-Timestamp']}.".encode() + body, hashlib.sha256)
        assert headers["X-GPUPlane-Signature"] == "sha256=" + expected.hexdigest()
        assert abs(int(headers["X-GPUPlane-Timestamp"]) - time.time()) < 120
        message = json.loads(body)
        assert message["delivery_id"] == headers["X-GPUPlane-Delivery"]
        assert message["event"]["job_id"] == job_id
        assert message["url"] == f"{server.url}/runs/{job['run_id']}"
        assert message["project"] == "default"
        assert "oom-job" in message["title"]
    # A tampered body does not verify.
    _, _, headers, body = hooks[0]
    forged = hmac.new(SECRET.encode(), f"{headers['X-GPUPlane-Timestamp']}.".encode() + body + b" ", hashlib.sha256)
    assert headers["X-GPUPlane-Signature"] != "sha256=" + forged.hexdigest()

    # Slack gets its own shape: text with a link back to the run page.
    [(_, slack)] = receiver.received("/slack")
    assert set(slack) == {"text"}
    assert f"<{server.url}/runs/{job['run_id']}|Open in GPUPlane>" in slack["text"]
    assert "JOB_FAILED" in slack["text"]

    # The SMTP server process received the email.
    box = mailbox.Maildir(str(maildir), create=False)
    [mail] = list(box)
    assert mail["To"] == "oncall@example.com"
    assert mail["From"] == "GPUPlane <gpuplane@example.com>"
    subject = str(make_header(decode_header(mail["Subject"])))
    assert "critical OOM" in subject and "oom-job" in subject
    body = mail.get_payload(decode=True).decode()
    assert "out of memory" in body
    assert f"{server.url}/runs/{job['run_id']}" in body


def test_run_alert_from_the_sdk_is_delivered_once_per_wait(setup, monkeypatch, tmp_path):
    server, receiver, _ = setup
    monkeypatch.setenv("GPUCTL_SPOOL_DIR", str(tmp_path / "spool"))
    import gpuplane

    run = gpuplane.init(project="default", name="sdk-alerts", server=server.url, token=server.token)
    run.log({"eval/accuracy": 0.41})
    run.alert("accuracy dropped", "eval/accuracy is 0.41, below 0.5", level="warning", wait_s=300)
    run.alert("accuracy dropped", "again, within wait_s", level="warning", wait_s=300)
    run.alert("training diverged", level="critical")
    with pytest.raises(ValueError, match="alert level"):
        run.alert("x", level="loud")
    run.finish()

    def sent():
        items = deliveries(server, run_id=run.run_id, status="sent")
        return len(items) == 3 and items
    items = wait_until(sent, timeout=30)
    hook = sorted((d["event"]["severity"], d["event"]["message"]) for d in items if d["channel"] == "hook")
    assert hook == [
        ("critical", "training diverged"),
        ("warning", "accuracy dropped: eval/accuracy is 0.41, below 0.5"),
    ]
    assert [d["event"]["message"] for d in items if d["channel"] == "oncall"] == ["training diverged"]
    events = server.get(f"/events?run_id={run.run_id}&kind=RUN_ALERT")["items"]
    assert len(events) == 2, "the repeat within wait_s is not recorded"
    urls = {json.loads(body)["url"] for status, path, _, body in receiver.requests
            if status == "ok" and path == "/hook" and json.loads(body)["event"]["kind"] == "RUN_ALERT"}
    assert urls == {f"{server.url}/runs/{run.run_id}"}
