"""A tiny HTTP client for the GPUPlane API (urllib only)."""

import json
import math
import time
import urllib.error
import urllib.request

# A server error, a timeout answer (408) or "too many requests" (429) is
# tried again this many times, after these pauses, before the server counts
# as unreachable (and the data goes to the spool).
RETRY_PAUSES = (0.25, 1.0)
MAX_RETRY_AFTER = 5.0


class Unreachable(Exception):
    """The server could not be reached, or kept answering with a server error: try again later."""


class Refused(RuntimeError):
    """The server refused the request (a 4xx): sending it again will not help.

    ``status`` is the HTTP status and ``message`` the server's explanation.
    """

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message

    @property
    def about_the_record(self):
        """True when the refusal is about this one record (its content), so
        the records after it still go; otherwise (the token, the run) it holds
        for everything after it too."""
        return self.status in (400, 409, 413, 422)


def retry_later(status):
    """Whether an HTTP status means "try again later" rather than a refusal."""
    return status >= 500 or status in (408, 429)


def _message(status, body):
    """The server's error message from its body (``{"error": {"message"}}``)."""
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body.strip()[:500] or f"HTTP {status}"


def encode_value(value):
    """A metric value as JSON: a number, or "NaN", "Infinity", "-Infinity"."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


class Client:
    def __init__(self, server, token, timeout=10.0):
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        text = self.request_bytes(method, path, data)
        return json.loads(text) if text else None

    def request_bytes(self, method, path, data=None, accept=None):
        """The body of an answer, as bytes; JSON `data` when given. Raises
        ``Refused`` for a 4xx, ``Unreachable`` when the server cannot be
        reached or keeps answering "later" (5xx, 408, 429: tried again first)."""
        request = urllib.request.Request(f"{self.server}/api/v1{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("User-Agent", "gpuplane-python")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if accept is not None:
            request.add_header("Accept", accept)
        for pause in (*RETRY_PAUSES, None):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return response.read()
            except urllib.error.HTTPError as error:
                body = error.read().decode(errors="replace")
                if not retry_later(error.code):
                    raise Refused(error.code, _message(error.code, body)) from None
                if pause is None:
                    raise Unreachable(f"{error.code}: {_message(error.code, body)}") from None
                try:
                    pause = max(pause, min(float(error.headers.get("Retry-After", 0)), MAX_RETRY_AFTER))
                except (TypeError, ValueError):
                    pass
                time.sleep(pause)
            except (urllib.error.URLError, OSError, TimeoutError) as error:
                raise Unreachable(str(getattr(error, "reason", error))) from None

    def create_run(self, project, name):
        return self.request("POST", "/runs", {"project": project, "name": name})["id"]

    def get_run(self, run_id):
        return self.request("GET", f"/runs/{run_id}")

    def update_config(self, run_id, config):
        return self.request("POST", f"/runs/{run_id}/config", {"config": config})

    def change_run(self, run_id, changes):
        return self.request("PATCH", f"/runs/{run_id}", changes)

    def raise_alert(self, run_id, alert):
        return self.request("POST", f"/runs/{run_id}/alerts", alert)

    def send_batch(self, run_id, batch):
        return self.request("POST", f"/runs/{run_id}/metrics", batch)

    def finish_run(self, run_id):
        return self.request("POST", f"/runs/{run_id}/finish")

    def send_record(self, run_id, record):
        """Sends one spool record (``batch``, ``config``, ``details``,
        ``alert``, ``finish``) of run `run_id`; False for a kind it does not know."""
        kind = record.get("type")
        if kind == "batch":
            batch = {"batch_id": record["batch_id"], "points": record.get("points", [])}
            if record.get("texts"):
                batch["texts"] = record["texts"]
            self.send_batch(run_id, batch)
        elif kind == "config":
            self.update_config(run_id, record["config"])
        elif kind == "details":
            self.change_run(run_id, record["changes"])
        elif kind == "alert":
            self.raise_alert(run_id, record["alert"])
        elif kind == "finish":
            self.finish_run(run_id)
        else:
            return False
        return True
