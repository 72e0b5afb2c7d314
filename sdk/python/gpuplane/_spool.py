"""The spool: what a script could not send because the server was out of
reach, one JSON-lines file per run and process in ``$GPUCTL_SPOOL_DIR``
(inside a GPUPlane job, the attempt's own folder, set by the agent), else
``~/.gpuctl/spool``. ``gpuctl sync`` and the agent read the same files by
the same rules (the Rust crate ``gpuplane-spool``).

A file starts with a ``run`` line (the run's id, or, for a run created while
offline, the project and name to create it with; ``reason`` says why the
SDK spooled) followed by ``batch`` lines (points and texts) and the run's
``config``, ``details``, ``alert`` and ``finish`` records. Replaying sends
the records in order and deletes the file once the server has them all. A
partial last line (a crash while writing) is skipped and counted.

What the server refuses is never dropped and never waits in the spool: it
goes to ``quarantine/`` (a file of the same name, after a ``refused`` record
with the server's status and message), and the replay goes on with the
next record or file. A refusal about one record (400, 409, 413, 422)
quarantines that record; any other (403, 404: the run, the token's rights)
the rest of the file. Quarantined files are replayed only when asked
(``gpuplane.sync(quarantined=True)``, ``gpuctl sync --quarantined``), once
the cause is fixed. The one refusal that stops a replay and keeps the files
is the replaying token's own (401): another token may be taken.

Appends and replays lock the file (``flock``), so several processes of one
run can spool and replay at once. A replay that creates a run started
offline (and not finished) leaves its id in ``created-<local id>``, so the
process logging to that run, if still running, goes on with it instead of
creating another.
"""

import fcntl
import json
import os
import re
import stat
import time
import uuid
import warnings

from ._client import Refused, Unreachable

QUARANTINE = "quarantine"
# How a replay ended.
DONE, UNREACHABLE, TOKEN_REFUSED = "done", "unreachable", "token refused"


def spool_dir():
    """``$GPUCTL_SPOOL_DIR``, else ``~/.gpuctl/spool``."""
    return os.environ.get("GPUCTL_SPOOL_DIR") or os.path.join(os.path.expanduser("~"), ".gpuctl", "spool")


def quarantine_dir():
    """Where what the server refused waits: ``quarantine/`` in the spool."""
    return os.path.join(spool_dir(), QUARANTINE)


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


def _open_append(path):
    """``path`` opened to append (created 0600), never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")


class SpoolFile:
    """The spool file of one run in this process (or, in ``directory``, its quarantine file)."""

    def __init__(self, header, directory=None):
        self.directory = directory or spool_dir()
        self.path = os.path.join(self.directory, f"sdk-{uuid.uuid4().hex}.jsonl")
        # The run's id once known, else what to create it with.
        self.header = header
        # Why it spools (said in the first line: the agent reports it).
        self.reason = None

    def append(self, *records):
        """Appends `records` under the file's lock, so a replay in another
        process never reads half a record or deletes the file in between."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        while True:
            with _open_append(self.path) as file:
                fcntl.flock(file, fcntl.LOCK_EX)
                if os.fstat(file.fileno()).st_nlink == 0:
                    continue  # replayed and deleted while we waited: start a new file
                if file.tell() == 0:
                    if "local_id" in self.header and (run_id := created_run(self.header["local_id"])):
                        # Created by a replay meanwhile: the id lives on in the header.
                        forget_created(self.header["local_id"])
                        self.header = {"run_id": run_id}
                    first = {"type": "run", **self.header}
                    if self.reason:
                        first["reason"] = self.reason
                    file.write(json.dumps(first) + "\n")
                for record in records:
                    file.write(json.dumps(record, allow_nan=False) + "\n")
                file.flush()
                os.fsync(file.fileno())
                return

    def exists(self):
        return os.path.exists(self.path)


class QuarantineFile(SpoolFile):
    """What the server refused of one run in this process, apart from the
    spool: each refusal is written before the records it holds for."""

    def __init__(self, header):
        super().__init__(header, quarantine_dir())
        self._last_refusal = None
        self.records = 0

    def refused(self, error, records):
        lines = []
        if (error.status, error.message) != self._last_refusal:
            self._last_refusal = (error.status, error.message)
            lines.append({"type": "refused", "status": error.status, "message": error.message, "time": time.time()})
        lines.extend(records)
        self.append(*lines)
        self.records += len(records)


class ReplayResult:
    def __init__(self):
        self.sent = 0
        self.texts = 0
        self.skipped = 0
        self.files = 0
        self.run_ids = {}
        # What the server refused: {"file", "records", "points", "status", "reason"} each.
        self.quarantined = []
        # Why the replay stopped before the end (UNREACHABLE, TOKEN_REFUSED), or None.
        self.stopped = None


def _read(fd):
    """The file's records, and how many lines could not be read."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    *lines, partial = b"".join(chunks).split(b"\n")
    # A last line without its newline is the partial line of a crash.
    records, skipped = [], 1 if partial else 0
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            skipped += 1
    return records, skipped


def _valid_run_id(run_id):
    return isinstance(run_id, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", run_id) is not None


def _quarantine(path, header, run_id, error, records, result):
    """Writes refused `records` of spool file `path` to its quarantine file."""
    directory = os.path.join(os.path.dirname(path), QUARANTINE)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    target = os.path.join(directory, os.path.basename(path))
    kept = [r for r in records if r.get("type") not in ("run", "run_created", "refused")]
    with _open_append(target) as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        if file.tell() == 0:
            first = {"type": "run", "run_id": run_id} if run_id else {**(header or {}), "type": "run"}
            first.pop("reason", None)
            file.write(json.dumps(first) + "\n")
        refusal = {"type": "refused", "status": error.status, "message": error.message, "time": time.time()}
        for record in [refusal, *kept]:
            file.write(json.dumps(record) + "\n")
        file.flush()
        os.fsync(file.fileno())
    points = sum(len(r.get("points", [])) for r in kept if r.get("type") == "batch")
    result.quarantined.append(
        {"file": target, "records": len(kept), "points": points, "status": error.status, "reason": error.message}
    )
    warnings.warn(
        f"gpuplane: the server refused {len(kept)} spooled record(s) ({error}); kept in {target}: "
        "fix what it names, then replay with `gpuctl sync --quarantined`"
    )


def replay_file(client, path, result):
    """Sends one spool file and deletes it: DONE, or why it stopped
    (UNREACHABLE: try later; TOKEN_REFUSED: the file waits for another token)."""
    try:
        # Opened without creating it (another replay may have just deleted
        # it), never through a link, and only a regular file.
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return DONE
    except OSError as error:
        warnings.warn(f"gpuplane: {path} is not replayed: {error}")
        return DONE
    with os.fdopen(fd, "a+", encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            warnings.warn(f"gpuplane: {path} is not a regular file; not replayed")
            return DONE
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return DONE  # being replayed by another process, or appended to
        if os.fstat(fd).st_nlink == 0:
            return DONE  # replayed and deleted by another process meanwhile
        records, skipped = _read(fd)
        if skipped:
            warnings.warn(f"gpuplane: skipped {skipped} unreadable line(s) in {path}")
            result.skipped += skipped
        # A replay cut off after creating the run left its id at the end.
        run_id = next((r.get("run_id") for r in records if r.get("type") == "run_created"), None)
        # A process may still log to a run it has not finished.
        finished = any(r.get("type") == "finish" for r in records)
        header = None
        for index, record in enumerate(records):
            kind = record.get("type")
            if kind in ("run", "run_created"):
                if kind == "run" and header is None:
                    header = record
                if record.get("run_id"):
                    run_id = record["run_id"]
                elif kind == "run" and run_id is None:
                    try:
                        run_id = client.create_run(record.get("project"), record.get("name"))
                    except Unreachable:
                        return UNREACHABLE
                    except Refused as error:
                        if error.status == 401:
                            return TOKEN_REFUSED
                        # Nowhere to send any of it: the whole file waits.
                        _quarantine(path, header, None, error, records[index + 1:], result)
                        break
                    # Remember the new run, so a later replay does not create another.
                    handle.write(json.dumps({"type": "run_created", "run_id": run_id}) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                    if record.get("local_id") and not finished:
                        remember_created(record["local_id"], run_id)
                    result.run_ids[record.get("local_id")] = run_id
                continue
            if run_id is None or kind not in ("batch", "config", "details", "alert", "finish"):
                continue
            try:
                if not _valid_run_id(run_id):
                    raise Refused(422, f"refused before sending: {run_id!r} is not a run id")
                client.send_record(run_id, record)
            except Unreachable:
                return UNREACHABLE
            except Refused as error:
                if kind == "finish":
                    continue  # a run finished meanwhile, or a job's run (it follows its job)
                if error.status == 401:
                    return TOKEN_REFUSED
                if error.about_the_record:
                    _quarantine(path, header, run_id, error, [record], result)
                    continue
                _quarantine(path, header, run_id, error, records[index:], result)
                break
            if kind == "batch":
                result.sent += len(record.get("points", []))
                result.texts += len(record.get("texts", []))
        os.remove(path)
        result.files += 1
        return DONE


def _spool_files(directory):
    """The spool files of `directory` (regular files), oldest first."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(CREATED_PREFIX):
            _forget_if_old(path)
        if name.startswith("sdk-") and name.endswith(".jsonl"):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue  # replayed by another process since the listing
            if stat.S_ISREG(info.st_mode):
                found.append((info.st_mtime, path))
    return [path for _, path in sorted(found)]


def replay_all(client, result=None, only=None):
    """Replays every spool file (oldest first), or just `only`: DONE, or why it stopped."""
    result = result or ReplayResult()
    for path in _spool_files(spool_dir()):
        if only is not None and path != only:
            continue
        outcome = replay_file(client, path, result)
        if outcome != DONE:
            result.stopped = outcome
            return outcome
    return DONE


def restore_quarantined():
    """Moves the quarantined files back into the spool for a replay; returns how many."""
    moved = 0
    if os.path.islink(quarantine_dir()):
        return 0
    for path in _spool_files(quarantine_dir()):
        target = os.path.join(spool_dir(), os.path.basename(path))
        if not os.path.lexists(target):
            os.rename(path, target)
            moved += 1
    return moved


def _forget_if_old(path):
    try:
        if time.time() - os.path.getmtime(path) > CREATED_KEEP_SECONDS:
            os.remove(path)
    except FileNotFoundError:
        pass


def sync(server=None, token=None, quarantined=False):
    """Replays every spooled run now (``gpuctl sync`` does the same from a
    shell), and with ``quarantined=True`` what the server refused before
    too; the result counts the points (``sent``) and texts sent and lists
    what the server refused (``quarantined``)."""
    from ._client import Client

    server = server or os.environ.get("GPUCTL_SERVER")
    token = token or os.environ.get("GPUCTL_TOKEN")
    if not server or not token:
        raise RuntimeError("set GPUCTL_SERVER and GPUCTL_TOKEN (or pass server= and token=) to sync the spool")
    if quarantined:
        restore_quarantined()
    result = ReplayResult()
    if replay_all(Client(server, token), result) == TOKEN_REFUSED:
        warnings.warn("gpuplane: the server refused the token; the spool is kept for a replay with a token it takes")
    return result
