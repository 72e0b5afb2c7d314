"""The offline spool: one JSON-lines file per run in ``~/.gpuctl/spool``.

A file starts with a ``run`` line (the run's id, or, for a run created while
offline, the project and name to create it with) followed by ``batch``
lines (points and texts). Replaying sends the lines in order and deletes the file once every
batch was acknowledged. A partial last line (a crash while writing) is
skipped and counted; it never stops the rest. A record the server refuses is
dropped with a warning, unless the refusal is about the token (401, 403):
then the file stays. Appends and replays lock the file (``flock``), so
several processes of one run can spool and replay at once. A replay that
creates a run started offline (and not finished) leaves its id in
``created-<local id>``, so the process logging to that run, if still
running, goes on with it instead of creating another.
"""

import fcntl
import json
import os
import re
import time
import uuid
import warnings

from ._client import Refused, Unreachable


def spool_dir():
    """``$GPUCTL_SPOOL_DIR``, else ``~/.gpuctl/spool``."""
    return os.environ.get("GPUCTL_SPOOL_DIR") or os.path.join(os.path.expanduser("~"), ".gpuctl", "spool")


# A replay that creates a run started offline leaves its id here, named by
# the run's local id, for the process that logs to it (still running, it
# goes on with that run instead of creating another). Removed by that
# process, or by a replay once a week old.
CREATED_PREFIX = "created-"
CREATED_KEEP_SECONDS = 7 * 24 * 3600


def remember_created(local_id, run_id):
    """Leaves the id of the run a replay created for `local_id` (an id the
    SDK made: letters, digits, `-` and `_`; any other is not a file name)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", local_id):
        return
    path = os.path.join(spool_dir(), CREATED_PREFIX + local_id)
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(run_id)
    os.replace(temporary, path)


def created_run(local_id):
    """The id of the run a replay created for `local_id`, or None."""
    try:
        with open(os.path.join(spool_dir(), CREATED_PREFIX + local_id), encoding="utf-8") as file:
            return file.read().strip() or None
    except FileNotFoundError:
        return None


def forget_created(local_id):
    try:
        os.remove(os.path.join(spool_dir(), CREATED_PREFIX + local_id))
    except FileNotFoundError:
        pass


class SpoolFile:
    """The spool file of one run in this process."""

    def __init__(self, header):
        self.path = os.path.join(spool_dir(), f"sdk-{uuid.uuid4().hex}.jsonl")
        # The run's id once known, else what to create it with.
        self.header = header

    def append(self, record):
        """Appends `record` under the file's lock, so a replay in another
        process never reads half a record or deletes the file in between."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            with open(self.path, "a", encoding="utf-8") as file:
                fcntl.flock(file, fcntl.LOCK_EX)
                if os.fstat(file.fileno()).st_nlink == 0:
                    continue  # replayed and deleted while we waited: start a new file
                if file.tell() == 0:
                    if "local_id" in self.header and (run_id := created_run(self.header["local_id"])):
                        # Created by a replay meanwhile: the id lives on in the header.
                        forget_created(self.header["local_id"])
                        self.header = {"run_id": run_id}
                    file.write(json.dumps({"type": "run", **self.header}) + "\n")
                file.write(json.dumps(record, allow_nan=False) + "\n")
                file.flush()
                os.fsync(file.fileno())
                return

    def exists(self):
        return os.path.exists(self.path)


class ReplayResult:
    def __init__(self):
        self.sent = 0
        self.texts = 0
        self.skipped = 0
        self.files = 0
        self.run_ids = {}


def _read(path):
    """The file's records, and how many lines could not be read."""
    records, skipped = [], 0
    with open(path, "r", encoding="utf-8") as file:
        for line in file:
            if not line.endswith("\n"):
                skipped += 1  # the partial last line of a crash
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                skipped += 1
    return records, skipped


def _kept(error, path):
    """True (with a warning) when a refusal is about the token, not the
    record: a 401 or 403 keeps the file for a replay with a better token."""
    if not error.about_the_token:
        return False
    warnings.warn(f"gpuplane: the server refused the token ({error}); {path} stays in the spool")
    return True


def replay_file(client, path, result):
    """Sends one spool file; returns False when the server is unreachable (try later)."""
    try:
        # Opened without creating it: another replay may have just deleted it.
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_APPEND), "a+", encoding="utf-8")
    except FileNotFoundError:
        return True
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # being replayed by another process, or appended to
        if os.fstat(handle.fileno()).st_nlink == 0:
            return True  # replayed and deleted by another process meanwhile
        records, skipped = _read(path)
        if skipped:
            warnings.warn(f"gpuplane: skipped {skipped} unreadable line(s) in {path}")
            result.skipped += skipped
        # A replay cut off after creating the run left its id at the end.
        run_id = next((r.get("run_id") for r in records if r.get("type") == "run_created"), None)
        # A process may still log to a run it has not finished.
        finished = any(r.get("type") == "finish" for r in records)
        for record in records:
            kind = record.get("type")
            if kind == "run":
                run_id = record.get("run_id") or run_id
                if run_id is None:
                    try:
                        run_id = client.create_run(record["project"], record["name"])
                    except Unreachable:
                        return False
                    except Refused as error:
                        # The data has nowhere else to go: keep it for a later replay.
                        warnings.warn(f"gpuplane: the server refused to create spooled run ({error}); kept in {path}")
                        return False
                    # Remember the new run, so a later replay does not create another.
                    handle.write(json.dumps({"type": "run_created", "run_id": run_id}) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    if record.get("local_id") and not finished:
                        remember_created(record["local_id"], run_id)
                    result.run_ids[record.get("local_id")] = run_id
            elif kind == "run_created":
                run_id = record["run_id"]
            elif kind == "batch" and run_id is not None:
                try:
                    batch = {"batch_id": record["batch_id"], "points": record.get("points", [])}
                    if record.get("texts"):
                        batch["texts"] = record["texts"]
                    client.send_batch(run_id, batch)
                    result.sent += len(batch["points"])
                    result.texts += len(record.get("texts", []))
                except Unreachable:
                    return False
                except Refused as error:
                    if _kept(error, path):
                        return False
                    warnings.warn(f"gpuplane: the server refused a spooled batch ({error}); dropping it")
            elif kind in ("config", "details", "alert") and run_id is not None:
                try:
                    if kind == "config":
                        client.update_config(run_id, record["config"])
                    elif kind == "alert":
                        client.raise_alert(run_id, record["alert"])
                    else:
                        client.change_run(run_id, record["changes"])
                except Unreachable:
                    return False
                except Refused as error:
                    if _kept(error, path):
                        return False
                    warnings.warn(f"gpuplane: the server refused spooled run {kind} ({error}); dropping it")
            elif kind == "finish" and run_id is not None:
                try:
                    client.finish_run(run_id)
                except Unreachable:
                    return False
                except Refused as error:
                    if _kept(error, path):
                        return False
        os.remove(path)
        result.files += 1
        return True


def replay_all(client, result=None, only=None):
    """Replays every spool file (oldest first), or just `only`; False if the server went away."""
    result = result or ReplayResult()
    directory = spool_dir()
    if not os.path.isdir(directory):
        return True
    found = []
    for name in os.listdir(directory):
        if name.startswith(CREATED_PREFIX):
            _forget_if_old(os.path.join(directory, name))
        if name.startswith("sdk-") and name.endswith(".jsonl"):
            path = os.path.join(directory, name)
            try:
                found.append((os.path.getmtime(path), path))
            except FileNotFoundError:
                pass  # replayed by another process since the listing
    for _, path in sorted(found):
        if only is not None and path != only:
            continue
        if not replay_file(client, path, result):
            return False
    return True


def _forget_if_old(path):
    try:
        if time.time() - os.path.getmtime(path) > CREATED_KEEP_SECONDS:
            os.remove(path)
    except FileNotFoundError:
        pass


def sync(server=None, token=None):
    """Replays every spooled run now (``gpuctl sync`` does the same from a
    shell); the result counts the points (``sent``) and texts sent."""
    from ._client import Client

    server = server or os.environ.get("GPUCTL_SERVER")
    token = token or os.environ.get("GPUCTL_TOKEN")
    if not server or not token:
        raise RuntimeError("set GPUCTL_SERVER and GPUCTL_TOKEN (or pass server= and token=) to sync the spool")
    result = ReplayResult()
    replay_all(Client(server, token), result)
    return result
