"""The Python side of the test kit: a real gpuplane-server (the binary, a
fresh data dir, a free port) and a real agent, for the SDK and MCP tests."""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
SERVER_BIN = os.environ.get("GPUPLANE_SERVER_BIN") or str(TARGET / "gpuplane-server")
AGENT_BIN = os.environ.get("GPUPLANE_AGENT_BIN") or str(TARGET / "gpuplane-agent")
GPUCTL_BIN = os.environ.get("GPUCTL_BIN") or str(TARGET / "gpuctl")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """Starts and stops the server on a fixed port over one data dir."""

    def __init__(self, data_dir, port, flags=()):
        self.data_dir = data_dir
        self.port = port
        self.flags = list(flags)
        self.url = f"http://127.0.0.1:{port}"
        self.process = None
        self.agent = None
        self.log = []
        # Every panic the server printed: a test may pass while a connection
        # task died, so stop() fails then.
        self.panics = []
        self.admin("create-user", "sdk-user", "--admin", "--password-stdin", input="sdk-password-123\n")
        self.token = self.admin("create-token", "--user", "sdk-user", "--scope", "write")

    def admin(self, *args, input=None):
        result = subprocess.run(
            [SERVER_BIN, "--data-dir", self.data_dir, "admin", *args],
            input=input, capture_output=True, text=True, check=True,
        )
        return result.stdout.strip()

    def start(self):
        assert Path(SERVER_BIN).exists(), f"{SERVER_BIN} is missing: cargo build -p gpuplane-server"
        self.process = subprocess.Popen(
            [SERVER_BIN, "--data-dir", self.data_dir, "serve", "--bind", f"127.0.0.1:{self.port}", *self.flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for line in self.process.stderr:
            if re.search(r"listening on http://", line):
                # Keep reading its log: a full pipe would block the server.
                threading.Thread(target=self._read_log, daemon=True).start()
                return
        raise RuntimeError("the server did not start")

    def _read_log(self):
        for line in self.process.stderr:
            self.log.append(line)
            del self.log[:-200]
            if "panicked at" in line:
                self.panics.append(line)

    def stop(self):
        if self.agent and self.agent.poll() is None:
            self.agent.kill()
            self.agent.wait()
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=20)
        assert not self.panics, f"the server panicked: {self.panics}"

    def get(self, path):
        return self.call("GET", path)

    def post(self, path, body):
        return self.call("POST", path, body)

    def call(self, method, path, body=None, token=None):
        request = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = response.read()
            return json.loads(answer) if answer else None

    def start_agent(self, jobs_dir, gpus=1, flags=(), env=None):
        """A real agent with simulated GPUs (and `flags`, and `env` added to
        its environment); stopped with the server."""
        assert Path(AGENT_BIN).exists(), f"{AGENT_BIN} is missing: cargo build -p gpuplane-agent"
        token = self.admin("create-agent-token")
        self.agent = subprocess.Popen(
            [AGENT_BIN, "--server", self.url, "--token", token, "--name", "sdk-box",
             "--fake-gpus", str(gpus), "--jobs-dir", str(jobs_dir), *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})},
        )
        wait_until(lambda: self.get("/cluster")["nodes_online"] == 1)


def wait_until(check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")
