"""Reading a metric back: ``gpuplane.history(run_id, key)``.

    h = gpuplane.history(run_id, "train/loss")
    h.steps, h.times, h.values          # lists; NaN and infinities as floats
    h.to_arrow()                        # a pyarrow.Table (needs pyarrow)

With ``pyarrow`` installed the answer travels as an Apache Arrow stream (no
number is parsed); without it, as JSON columns. Both give the same values,
bit for bit.
"""

import math
import os
import urllib.parse

from ._client import Client

ARROW_STREAM = "application/vnd.apache.arrow.stream"
# The most points (or buckets) the server sends in one answer of columns.
MAX_POINTS = 1_000_000
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class History:
    """One metric over a range: its raw points, or (``downsampled``) buckets.

    ``columns`` maps each field to a list: ``step``, ``time`` (seconds since
    the epoch) and ``value`` for points; ``step_from``, ``step_to``,
    ``time_from``, ``time_to``, ``min``, ``max`` (None where a bucket held no
    finite value), ``last``, ``count`` and ``non_finite`` for buckets.
    """

    def __init__(self, key, downsampled, columns=None, table=None):
        self.key = key
        self.downsampled = downsampled
        self._columns = columns
        self._table = table

    @property
    def columns(self):
        if self._columns is None:
            self._columns = self._table.to_pydict()
        return self._columns

    @property
    def steps(self):
        return self._points("step")

    @property
    def times(self):
        return self._points("time")

    @property
    def values(self):
        return self._points("value")

    def _points(self, name):
        if self.downsampled:
            raise ValueError(
                f"{self.key}: the range holds more than max_points points, so the answer is buckets; "
                "narrow it with start/end or raise max_points (up to 1,000,000)"
            )
        return self.columns[name]

    def __len__(self):
        return len(next(iter(self.columns.values()), []))

    def to_arrow(self):
        """The history as a ``pyarrow.Table`` (requires pyarrow)."""
        if self._table is None:
            import pyarrow

            self._table = pyarrow.table(self.columns)
        return self._table

    def __repr__(self):
        kind = "buckets" if self.downsampled else "points"
        return f"History({self.key!r}, {len(self)} {kind})"


def history(run_id, key, *, x="step", start=None, end=None, max_points=MAX_POINTS, server=None, token=None, timeout=60.0):
    """Every point of metric ``key`` of run ``run_id`` between ``start`` and
    ``end`` (inclusive; steps, or Unix seconds with ``x="time"``). When the
    range holds more than ``max_points`` points the answer is that many
    buckets instead (``History.downsampled``), as on the run page.

    ``server`` and ``token`` default to ``GPUCTL_SERVER`` and ``GPUCTL_TOKEN``.
    """
    server = server or os.environ.get("GPUCTL_SERVER")
    token = token or os.environ.get("GPUCTL_TOKEN")
    if not server or not token:
        raise ValueError("history needs a server and a token: pass them, or set GPUCTL_SERVER and GPUCTL_TOKEN")
    params = {"key": key, "x": x, "max_points": max_points}
    if start is not None:
        params["from"] = start
    if end is not None:
        params["to"] = end
    client = Client(server, token, timeout=timeout)
    path = f"/runs/{urllib.parse.quote(run_id, safe='')}/metrics?{urllib.parse.urlencode(params)}"
    try:
        import pyarrow.ipc
    except ImportError:
        return _from_json(client.request("GET", path + "&format=columns"))
    stream = client.request_bytes("GET", path, accept=ARROW_STREAM)
    table = pyarrow.ipc.open_stream(stream).read_all()
    metadata = table.schema.metadata or {}
    downsampled = metadata.get(b"gpuplane.kind") == b"buckets"
    return History(metadata.get(b"gpuplane.key", key.encode()).decode(), downsampled, table=table)


def _from_json(answer):
    def floats(values):
        return [v if type(v) is float else _NON_FINITE.get(v, v) for v in values]

    if "buckets" in answer:
        buckets = answer["buckets"]
        columns = {name: buckets[name] for name in ("step_from", "step_to", "time_from", "time_to")}
        for name in ("min", "max", "last"):
            columns[name] = floats(buckets[name])
        columns["count"] = buckets["count"]
        columns["non_finite"] = buckets["non_finite"]
        return History(answer["key"], True, columns)
    columns = {"step": answer["steps"], "time": answer["times"], "value": floats(answer["values"])}
    return History(answer["key"], False, columns)
