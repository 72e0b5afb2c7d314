"""Runs: ``init``, ``log``, ``finish``."""

import atexit
import json
import math
import os
import queue
import signal
import threading
import time
import uuid
import warnings

from ._client import Client, Refused, Unreachable, encode_value
from ._spool import UNREACHABLE, QuarantineFile, ReplayResult, SpoolFile, created_run, forget_created, replay_all

BATCH_POINTS = 5000
# A batch carries at most this many texts and text bytes (the server takes
# 1,000 texts and 8 MiB per batch, 64 KiB per text).
BATCH_TEXTS = 500
BATCH_TEXT_BYTES = 4 * 1024 * 1024
MAX_TEXT_BYTES = 64 * 1024
FLUSH_SECONDS = 1.0
RETRY_SECONDS = 5.0


MAX_CONFIG_KEYS = 1000
MAX_CONFIG_KEY_LEN = 200
MAX_CONFIG_TEXT_LEN = 4096
MAX_TAGS = 64
MAX_NOTES_LEN = 20_000
MAX_NAME_LEN = 200
MAX_ALERT_TITLE = 200
MAX_ALERT_TEXT = 4000
ALERT_LEVELS = ("info", "warning", "critical")


def _flush_on_sigterm(run):
    """A job is stopped (cancelled, preempted, out of time) with SIGTERM,
    which Python's default answers by dying without its exit handlers: the
    points of the last second would be lost, and a resumed job would miss
    them. The run sends what it holds first (at most 5 s, from another
    thread, so a lock the interrupted code holds can delay it but not hang
    it), then the process ends as SIGTERM would have ended it, or the
    script's own handler (one installed before ``init``) runs. Only from
    the main thread, and not when SIGTERM is ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        return

    def flush_then_stop(signum, frame):
        # From another thread: this one may have been stopped inside the
        # queue's lock, which the flush needs.
        flusher = threading.Thread(target=run.flush, kwargs={"timeout": 5.0}, daemon=True)
        flusher.start()
        flusher.join(5.0)
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, flush_then_stop)


def flatten_config(values, prefix=""):
    """``{"model": {"depth": 12}}`` as ``{"model.depth": 12}``; values checked.

    Values are numbers, strings, booleans or None; NaN and infinities become
    the strings "NaN", "Infinity", "-Infinity". Anything else raises TypeError,
    and keys or texts over the server's limits raise ValueError, at once.
    """
    flat = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_config(value, prefix=f"{name}."))
            continue
        if not name or len(name) > MAX_CONFIG_KEY_LEN:
            raise ValueError(f"gpuplane: config key {name!r}: keys are 1-{MAX_CONFIG_KEY_LEN} characters")
        if value is None or isinstance(value, (bool, int, str)):
            if isinstance(value, str) and len(value) > MAX_CONFIG_TEXT_LEN:
                raise ValueError(f"gpuplane: config {name}: text values are at most {MAX_CONFIG_TEXT_LEN} characters")
            flat[name] = value
        elif isinstance(value, float):
            flat[name] = value if math.isfinite(value) else encode_value(value)
        elif hasattr(value, "item") and callable(value.item):
            # numpy and torch scalars
            flat.update(flatten_config({name: value.item()}))
        else:
            raise TypeError(
                f"gpuplane: config {name}={value!r}: values are numbers, strings, booleans or None "
                "(write lists as text, nest dicts for dotted keys)"
            )
    if len(flat) > MAX_CONFIG_KEYS:
        raise ValueError(f"gpuplane: at most {MAX_CONFIG_KEYS} config keys per run")
    return flat


class Config:
    """A run's config: ``run.config.update({...})``, ``run.config["lr"]``."""

    def __init__(self, run):
        self._run = run
        self._values = {}

    def update(self, values=None, **more):
        """Sets keys (nested dicts become dotted keys); sent in order with the metrics."""
        flat = flatten_config({**(values or {}), **more})
        if len(set(self._values) | set(flat)) > MAX_CONFIG_KEYS:
            raise ValueError(f"gpuplane: at most {MAX_CONFIG_KEYS} config keys per run")
        self._values.update(flat)
        if flat:
            self._run._send_later("config", {"config": flat})

    def __getitem__(self, key):
        return self._values[key]

    def __contains__(self, key):
        return key in self._values

    def as_dict(self):
        return dict(self._values)

    def __repr__(self):
        return f"Config({self._values!r})"


class Run:
    """A run being logged to. Create it with :func:`init`."""

    def __init__(self, server, token, run_id=None, project="default", name=None, resume=False):
        self.server = server
        self.token = token
        self.run_id = run_id
        self.project = project
        self.name = name or "run"
        self.local_id = uuid.uuid4().hex
        self._client = Client(server, token) if server and token else None
        self._queue = queue.Queue()
        self._pending = []
        header = {"run_id": run_id} if run_id else {"local_id": self.local_id, "project": project, "name": self.name}
        self._spool = SpoolFile(header)
        if self._client is None:
            self._spool.reason = "no server or token: set GPUCTL_SERVER and GPUCTL_TOKEN (or pass server= and token=)"
        # What the server refuses waits apart from the spool, never in it.
        self._quarantine = QuarantineFile(dict(header))
        # A refusal of the run itself (its creation, the token, its rights):
        # everything after it goes to the quarantine without asking again.
        self._refusal = None
        self._finished = False
        self._lock = threading.Lock()
        self.replayed = ReplayResult()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self.config = Config(self)
        if resume and self._client is not None:
            self._resume()
        # Create the run now when the server answers, so its id and URL are
        # known at once (a refusal raises here, before anything is logged);
        # otherwise it is created (or spooled) when data is sent.
        if self._client is not None and self.run_id is None:
            try:
                self.run_id = Client(server, token, timeout=3.0).create_run(self.project, self.name)
                self._spool.header = {"run_id": self.run_id}
                self._quarantine.header = {"run_id": self.run_id}
            except Unreachable as error:
                self._spool.reason = f"the server at {server} could not be reached: {error}"
                self._retry_at = time.monotonic() + RETRY_SECONDS
            except Refused as error:
                raise Refused(
                    error.status,
                    f"gpuplane: the server refused to create run {self.name!r} in project {self.project!r}: "
                    f"{error.message}",
                ) from None
        self._thread = threading.Thread(target=self._loop, name="gpuplane-sender", daemon=True)
        self._thread.start()
        atexit.register(self.finish)
        _flush_on_sigterm(self)

    def _resume(self):
        """Checks that this token can write the run, goes on after its highest
        step, and reopens it if it had finished. Offline, the data is spooled
        for the run and the check waits for the replay."""
        try:
            run = Client(self.server, self.token, timeout=3.0).get_run(self.run_id)
        except Unreachable:
            return
        except Refused as error:
            raise ValueError(f"gpuplane: cannot resume run {self.run_id}: {error}") from None
        self.project, self.name = run["project"], run["name"]
        steps = [latest["step"] for latest in run.get("latest", {}).values()]
        if steps:
            self._step = max(steps)
        if run.get("status") == "FINISHED":
            try:
                self._client.change_run(self.run_id, {"finished": False})
            except (Unreachable, Refused) as error:
                warnings.warn(f"gpuplane: run {self.run_id} could not be reopened ({error}); it stays FINISHED")

    # Public API -------------------------------------------------------

    def log(self, metrics, step=None, wall_time=None):
        """Records ``{key: value}`` at ``step`` (default: one more than the last). Never blocks."""
        if self._finished:
            raise RuntimeError("this run is finished")
        if step is None:
            step = getattr(self, "_step", -1) + 1
        self._step = int(step)
        now = time.time() if wall_time is None else float(wall_time)
        points = []
        for key, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                warnings.warn(f"gpuplane: {key}={value!r} is not a number; not logged")
                continue
            points.append({"key": str(key), "step": int(step), "wall_time": now, "value": encode_value(number)})
        if points:
            self._idle.clear()
            self._queue.put(points)

    def log_text(self, key, text, step=None, wall_time=None):
        """Records a text (a generated sample, a prompt) under ``key`` at ``step``
        (default: the step last logged). The run page lists them in a table."""
        if self._finished:
            raise RuntimeError("this run is finished")
        text = str(text)
        if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
            raise ValueError(f"gpuplane: text {key}: at most {MAX_TEXT_BYTES // 1024} KiB")
        if step is None:
            step = max(getattr(self, "_step", 0), 0)
        now = time.time() if wall_time is None else float(wall_time)
        self._idle.clear()
        self._queue.put([{"key": str(key), "step": int(step), "wall_time": now, "text": text}])

    def set_tags(self, tags):
        """Replaces the run's tags (short words: letters, digits, ``. _ - : /``)."""
        tags = [str(tag) for tag in tags]
        if len(tags) > MAX_TAGS:
            raise ValueError(f"gpuplane: at most {MAX_TAGS} tags")
        self._send_later("details", {"changes": {"tags": tags}})

    def add_tags(self, *tags):
        """Adds tags to the ones the run has (a job's tags included)."""
        self._send_later("details", {"changes": {"add_tags": [str(tag) for tag in tags]}})

    def set_notes(self, notes):
        """Replaces the run's notes."""
        notes = str(notes)
        if len(notes) > MAX_NOTES_LEN:
            raise ValueError(f"gpuplane: notes are at most {MAX_NOTES_LEN} characters")
        self._send_later("details", {"changes": {"notes": notes}})

    def set_name(self, name):
        """Renames the run (a job's run too; the job keeps its own name)."""
        name = str(name).strip()
        if not name or len(name) > MAX_NAME_LEN or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise ValueError(f"gpuplane: a run name is one line of 1 to {MAX_NAME_LEN} characters")
        self.name = name
        self._send_later("details", {"changes": {"name": name}})

    def alert(self, title, text="", level="warning", wait_s=0):
        """Raises an alert: a ``RUN_ALERT`` event at ``level`` (``info``,
        ``warning`` or ``critical``) that the channels subscribed to it
        receive, linking to this run. An alert with the same title within
        ``wait_s`` seconds of the last one is not raised again. Sent at once;
        offline, it waits in the spool like the run's other data."""
        level = str(level).lower()
        if level == "warn":
            level = "warning"
        if level == "error":
            level = "critical"
        if level not in ALERT_LEVELS:
            raise ValueError(f"gpuplane: alert level {level!r}: use one of {', '.join(ALERT_LEVELS)}")
        title, text = str(title).strip(), str(text)
        if not title or "\n" in title or len(title) > MAX_ALERT_TITLE:
            raise ValueError(f"gpuplane: an alert title is one line of 1 to {MAX_ALERT_TITLE} characters")
        if len(text) > MAX_ALERT_TEXT:
            raise ValueError(f"gpuplane: an alert text is at most {MAX_ALERT_TEXT} characters")
        alert = {"title": title, "text": text, "level": level, "wait_s": max(0, int(wait_s))}
        self._send_later("alert", {"alert": alert})

    def _send_later(self, kind, body):
        if self._finished:
            raise RuntimeError("this run is finished")
        self._idle.clear()
        self._queue.put((kind, body))

    def flush(self, timeout=30.0):
        """Waits until everything logged so far was sent or spooled."""
        self._queue.put("flush")
        self._wake.set()
        self._idle.wait(timeout)

    def finish(self, timeout=30.0):
        """Sends (or spools) everything and marks the run finished."""
        if self._finished:
            return
        self._queue.put("finish")
        self._wake.set()
        self._thread.join(timeout)
        self._finished = True

    @property
    def url(self):
        return f"{self.server}/runs/{self.run_id}" if self.server and self.run_id else None

    # Background thread ------------------------------------------------

    def _loop(self):
        deadline = time.monotonic() + FLUSH_SECONDS
        while True:
            try:
                item = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                item = None
            if isinstance(item, list):
                self._pending.extend(item)
                if len(self._pending) < BATCH_POINTS and time.monotonic() < deadline:
                    continue
            self._send_pending()
            if isinstance(item, tuple):
                self._send_details(*item)
            deadline = time.monotonic() + FLUSH_SECONDS
            if item == "finish":
                self._finish_remote()
                self._idle.set()
                return
            if self._queue.empty():
                self._idle.set()

    def _online(self):
        """True when the server can take data now (the spool replayed first)."""
        if self._client is None or self._refusal is not None:
            return False
        now = time.monotonic()
        if getattr(self, "_retry_at", 0) > now:
            return False
        try:
            if self.run_id is None:
                self.run_id = self._create()
                forget_created(self.local_id)
            self._spool.header = {"run_id": self.run_id}
            self._quarantine.header = {"run_id": self.run_id}
            # Refusals in the spool go to the quarantine; a token refused
            # there is refused here too, and this run's data says so itself.
            if replay_all(self._client, self.replayed) == UNREACHABLE:
                raise Unreachable("replay incomplete")
            return True
        except Unreachable as error:
            self._spool.reason = f"the server at {self.server} could not be reached: {error}"
            self._retry_at = now + RETRY_SECONDS
            return False
        except Refused as error:
            # Creating the run was refused: nothing of it can go anywhere else.
            self._refusal = error
            self._refused(error, [])
            return False

    def _create(self):
        """The run's id. Started offline, it is created by replaying its
        spool file (here, or meanwhile by another process: `created_run`
        tells, or the spool file's header once an append learnt it); else it
        is created now."""
        if self._spool.header.get("run_id"):
            return self._spool.header["run_id"]
        if self._spool.exists() and replay_all(self._client, self.replayed, only=self._spool.path) == UNREACHABLE:
            raise Unreachable("replay incomplete")
        run_id = created_run(self.local_id)
        if run_id is None and self._spool.exists():
            raise Unreachable("its spool file is being replayed by another process")
        return run_id or self._client.create_run(self.project, self.name)

    def _next_batch(self):
        """Takes the next batch off the pending points and texts, in order."""
        points, texts, text_bytes, taken = [], [], 0, 0
        for item in self._pending:
            if len(points) + len(texts) >= BATCH_POINTS or len(texts) >= BATCH_TEXTS or text_bytes >= BATCH_TEXT_BYTES:
                break
            if "text" in item:
                texts.append(item)
                text_bytes += len(item["text"].encode("utf-8"))
            else:
                points.append(item)
            taken += 1
        self._pending = self._pending[taken:]
        batch = {"batch_id": uuid.uuid4().hex, "points": points}
        if texts:
            batch["texts"] = texts
        return batch

    def _send_pending(self):
        while self._pending:
            self._send({"type": "batch", **self._next_batch()})

    def _send_details(self, kind, body):
        """Config (``config``), tags, notes and name (``details``) or an alert (``alert``)."""
        self._send({"type": kind, **body})

    def _send(self, record):
        """Sends one record; keeps it in the spool while the server is out of
        reach, in the quarantine once the server refused it."""
        if self._online():
            try:
                self._client.send_record(self.run_id, record)
                return
            except Unreachable as error:
                self._spool.reason = f"the server at {self.server} could not be reached: {error}"
                self._retry_at = time.monotonic() + RETRY_SECONDS
            except Refused as error:
                self._refused(error, [record])
                return
        if self._refusal is not None:
            self._refused(self._refusal, [record])
        else:
            self._spool.append(record)

    def _refused(self, error, records):
        """Keeps what the server refused in the quarantine, warning once;
        a refusal of the run itself (not of one record) holds from now on."""
        if not error.about_the_record:
            self._refusal = error
        if records:
            self._quarantine.refused(error, records)
        if not getattr(self, "_warned", False):
            self._warned = True
            warnings.warn(
                f"gpuplane: the server refused run {self.run_id or self.name}'s data ({error}). It is kept in "
                f"{self._quarantine.path}, apart from the spool; fix what the server names (the token, the project, "
                "the run), then send it with `gpuctl sync --quarantined`."
            )

    @property
    def refused(self):
        """How many records the server refused (kept in the quarantine)."""
        return self._quarantine.records

    def _finish_remote(self):
        if self._online() and self.run_id:
            try:
                self._client.finish_run(self.run_id)
                return
            except Unreachable:
                pass
            except Refused:
                return  # a job's run follows its job
        if self._refusal is not None:
            self._quarantine.refused(self._refusal, [{"type": "finish"}])
        elif self._spool.exists() or self.run_id is None:
            self._spool.append({"type": "finish"})


def init(project=None, name=None, server=None, token=None, config=None, tags=None, notes=None, resume=None):
    """The run to log to.

    Inside a GPUPlane job (``GPUCTL_RUN_ID`` set, with the job's
    ``GPUCTL_SERVER`` and ``GPUCTL_TOKEN``) this is always the job's run,
    whatever else is passed: ``project`` must be the job's project
    (``GPUCTL_PROJECT``; another raises ``ValueError``), ``name`` renames the
    job's run (the job keeps its own name), and ``resume`` may only name the
    job's run. Only a script that passes a token of its own logs elsewhere.

    Elsewhere a new run is made in ``project`` (default ``default``) named
    ``name``; a server that refuses it (the project, the token's rights)
    raises ``Refused`` here. Without a server or token, or while the server
    cannot be reached, everything goes to the spool until it can.

    ``config`` (hyperparameters; nested dicts become dotted keys), ``tags``
    (added to the job's own) and ``notes`` are recorded on the run; a bad
    value raises at once, before anything is sent.

    ``resume`` (a run id) goes on logging to that run, after a crash or from
    another machine: steps continue after its highest one, a finished run is
    reopened, and a run this token cannot write raises ``ValueError``.
    """
    server = server or os.environ.get("GPUCTL_SERVER")
    token = token or os.environ.get("GPUCTL_TOKEN")
    flat = flatten_config(config or {})
    job_run = os.environ.get("GPUCTL_RUN_ID")
    if job_run and token == os.environ.get("GPUCTL_TOKEN"):
        job_project = os.environ.get("GPUCTL_PROJECT")
        if project is not None and job_project and str(project) != job_project:
            raise ValueError(
                f"gpuplane: this job runs in project {job_project!r}, so its metrics go to its run there; "
                f"init(project={project!r}) cannot send them to another project (drop project=, or submit the "
                f"job with --project {project})"
            )
        if resume is not None and resume != job_run:
            raise ValueError(
                f"gpuplane: inside a job, init() logs to the job's run {job_run}; resume={resume!r} names another "
                "run, which the job's token cannot write"
            )
        run = Run(server, token, run_id=job_run, project=job_project or project or "default")
        if name is not None:
            run.set_name(name)
    else:
        run = Run(server, token, run_id=resume, project=project or "default",
                  name=name or os.environ.get("GPUCTL_JOB_ID"), resume=bool(resume))
    if flat:
        run.config.update(flat)
    if tags:
        run.add_tags(*tags)
    if notes is not None:
        run.set_notes(notes)
    return run


def write_eval_result(metrics, path=None):
    """Writes ``{"metrics": {...}}`` where an evaluation job must (``GPUCTL_EVAL_OUTPUT``)."""
    path = path or os.environ.get("GPUCTL_EVAL_OUTPUT")
    if not path:
        raise RuntimeError("GPUCTL_EVAL_OUTPUT is not set: this is not an evaluation job")
    cleaned = {}
    for key, value in metrics.items():
        number = float(value)
        cleaned[str(key)] = encode_value(number) if not math.isfinite(number) else number
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({"metrics": cleaned}, file, allow_nan=False)
    os.replace(temporary, path)
