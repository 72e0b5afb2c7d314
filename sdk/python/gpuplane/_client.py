"""A tiny HTTP client for the GPUPlane API (urllib only)."""

import json
import math
import urllib.error
import urllib.request


class Unreachable(Exception):
    """The server could not be reached, or answered with a server error: try again later."""


class Refused(Exception):
    """The server refused the request (4xx): retrying will not help."""

    def __init__(self, status, body):
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body

    @property
    def about_the_token(self):
        """A 401 or 403: the token was refused, not the data, so the data is
        kept (spooled) for a token the server takes."""
        return self.status in (401, 403)


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
        """The body of an answer, as bytes; JSON `data` when given."""
        request = urllib.request.Request(f"{self.server}/api/v1{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("User-Agent", "gpuplane-python")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if accept is not None:
            request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            if error.code >= 500 or error.code == 429:
                raise Unreachable(f"{error.code}: {body}") from None
            raise Refused(error.code, body) from None
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            raise Unreachable(str(error)) from None

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
