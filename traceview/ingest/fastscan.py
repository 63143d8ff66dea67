"""Glue for the optional C scanner (`traceview/ingest/_scan.c`): bytes -> event columns in one pass.

`scan_stream(pieces)` (the document in pieces, as they arrive) and `scan(data)` return an `Events` (the
base columns as polars Series, the document's other members decoded by msgspec, and the args tables) or
None, in which case the caller uses the msgspec path (`decode.decode`). None when the extension is not
built, when `TRACEVIEW_NO_C=1`, or when the bytes are anything but valid JSON the msgspec decoder would take
as is (repairs, salvage and the legacy array format stay on the msgspec path).

The `args` objects are parsed as they are scanned, into the typed columns of the args tables that read
them (`argtables`: the events `tables_of(ph, cat, name)` names, the fields each table reads); their text
is not kept. An object the scanner cannot vouch for (a value of another type, a duplicate or escaped key,
an int beyond 64 bits...) is kept as text instead, and its rows are decoded by msgspec (`Events.table`
says which).

The events are parsed in `cores.scan_threads()` threads (`TRACEVIEW_THREADS`), byte ranges joined in order:
the same result as one thread (tests/test_scan_threads.py).

Contract: the frames built from an `Events` are identical to those of the msgspec path; the C
scanner refuses (None), or leaves to msgspec, every input where they could differ. tests/test_fastscan.py
checks this.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import msgspec
import numpy as np
import polars as pl

try:
    from . import _scan

    if not hasattr(_scan, "Scanner") or hasattr(_scan, "args_columns"):  # pragma: no cover - a stale build
        _scan = None
except ImportError:  # pragma: no cover - extension not built (no compiler): msgspec path only
    _scan = None

from . import argtables as at
from . import cores
from . import decode as d


def available() -> bool:
    return _scan is not None and os.environ.get("TRACEVIEW_NO_C", "") not in ("1", "true", "yes")


def scanner(tables: bool = True, threads: int | None = None, **kw: int) -> Any:
    """A `_scan.Scanner` that fills the loader's args tables (`tables=False`: reads no args), parsing the
    events in `threads` threads (default `cores.scan_threads()`); `kw`: its `slice` (bytes a thread per batch)."""
    threads = threads or cores.scan_threads()
    if not tables:
        return _scan.Scanner(threads=threads, **kw)
    structs, specs, _ = at.spec()
    return _scan.Scanner(at.tables_of, structs, specs, threads=threads, **kw)


def _int_series(name: str, pair: tuple) -> pl.Series:
    """Int64 Series from (int64 values, validity) buffers."""
    vals = pl.Series(name, np.frombuffer(pair[0], dtype=np.int64))
    valid = np.frombuffer(pair[1], dtype=np.bool_)
    if valid.all():
        return vals
    return pl.select(pl.when(pl.Series(valid)).then(vals).otherwise(None).alias(name)).to_series()


class Events:
    """Columns of `traceEvents` from the C scanner, and its args tables."""

    def __init__(self, r: dict) -> None:
        self._tables: list[tuple | None] = r["tables"]
        self._odd_ev, odd_off, self._odd = r["odd"]
        self._odd_off = np.frombuffer(odd_off, dtype=np.int64)
        self.n: int = r["n"]
        self.doc: d.Doc = _doc(r["members"])
        # ph, cat, name: dictionary codes (UInt32) and their dictionaries (distinct strings, each used by some
        # event; "" where the key is absent): tests on them are integer work
        self.dicts: dict[str, pl.Series] = {k: pl.Series(k, r[f"{k}_values"], dtype=pl.String)
                                            for k in ("ph", "cat", "name")}
        self.codes: dict[str, pl.Series] = {k: pl.Series(k, np.frombuffer(r[k], dtype=np.uint32))
                                            for k in ("ph", "cat", "name")}
        self.pid = pl.Series("pid", np.frombuffer(r["pid"], dtype=np.int64))
        self.tid = pl.Series("tid", np.frombuffer(r["tid"], dtype=np.int64))
        self.pid_strs: dict[int, str] = r["pid_strs"]
        self.tid_strs: dict[int, str] = r["tid_strs"]
        # an absent ts / dur is null (as the msgspec path's None)
        self.ts = pl.Series(r["ts"]).alias("ts_us")
        self.dur = pl.Series(r["dur"]).alias("dur_us")
        self._id_rows = np.frombuffer(r["id_rows"], dtype=np.int64)  # the events with an int id, in order
        self._id_vals = np.frombuffer(r["id_vals"], dtype=np.int64)
        self._id_strs: dict[int, str] = r["id_strs"]
        self.nargs = pl.Series("nargs", np.frombuffer(r["nargs"], dtype=np.uint32))

    @property
    def ph(self) -> pl.Series:
        return _dict_column("ph", self.dicts["ph"], self.codes["ph"])

    @property
    def cat(self) -> pl.Series:
        return _dict_column("cat", self.dicts["cat"], self.codes["cat"])

    @property
    def name(self) -> pl.Series:
        return _dict_column("name", self.dicts["name"], self.codes["name"])

    def pop_columns(self) -> dict[str, pl.Series]:
        """pid, tid, ts, dur, nargs and the codes of ph, cat, name (`dicts` decodes them), handed over (no
        longer held here)."""
        names = ("pid", "tid", "ts", "dur", "nargs")
        out = {k: getattr(self, k) for k in names}
        for k in names:
            delattr(self, k)
        out.update(self.codes)
        self.codes = {}
        return out

    def ids(self, rows: pl.Series) -> pl.Series | list:
        """The `id` values of `rows`: an Int64 Series, or (when some are strings) the list of int, str
        and None the msgspec path has."""
        idx = rows.cast(pl.Int64).to_numpy()
        at_rows, vals = self._id_rows, self._id_vals
        pos = np.minimum(np.searchsorted(at_rows, idx), max(at_rows.size - 1, 0))
        present = at_rows[pos] == idx if at_rows.size else np.zeros(idx.size, dtype=np.bool_)
        vals = vals[pos] if at_rows.size else np.zeros(idx.size, dtype=np.int64)
        strs = self._id_strs
        if strs and not strs.keys().isdisjoint(idx.tolist()):
            return [strs[i] if i in strs else (int(v) if p else None)
                    for i, v, p in zip(idx.tolist(), vals.tolist(), present.tolist(), strict=True)]
        return _int_series("id", (vals, present))

    def table(self, k: int) -> tuple[pl.Series, dict[str, Any], np.ndarray, list[bytes]]:
        """Args table `k` (`argtables.TABLES`), handed over once: (its rows' event indices, {attr: values}
        for every row: an Int64 Series for MODE_INT attrs and each x/y/z of a Dim3 one, a Binary Series
        for raw attrs, else what the msgspec path's list of values gives (`_obj_values`); the positions of
        the rows msgspec must decode instead (placeholders there) and those rows' args objects)."""
        rows, cols, bad = self._tables[k]
        self._tables[k] = None
        bad_rows, n = memoryview(bad).nbytes > 0, rows.length
        out: dict[str, Any] = {}
        for c, val in zip(at.spec()[2][k], cols, strict=True):
            if c.mode == at.MODE_DIM3:
                for part, col in zip("xyz", val, strict=True):
                    out[f"{c.attr}.{part}"] = _column(f"{c.attr}.{part}", col, n, None)
            elif c.mode == at.MODE_OBJ:
                out[c.attr] = _obj_values(c, val, n, bad_rows)
            else:  # raw text: "" where absent; ints: null
                out[c.attr] = _column(c.attr, val, n, b"" if c.mode == at.MODE_RAW else None)
        bad = np.frombuffer(bad, dtype=np.int64)
        rows = pl.Series("i", rows)
        return rows, out, bad, self._odd_raws(rows.gather(bad).to_numpy()) if bad.size else []

    def _odd_raws(self, events: np.ndarray) -> list[bytes]:
        """The kept text of the args objects of `events` (each one the scanner left to msgspec)."""
        at_ = np.searchsorted(np.frombuffer(self._odd_ev, dtype=np.int64), events)
        lo, hi, text = self._odd_off[at_], self._odd_off[at_ + 1], memoryview(self._odd)
        return [bytes(text[a:b]) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]


def _column(name: str, col: Any, n: int, fill: bytes | None) -> pl.Series:
    """A scanned column (Arrow), or None: no row has a value (all `fill`)."""
    if col is not None:
        return pl.Series(col).alias(name)
    return _constant(name, fill, pl.Binary if fill is not None else pl.Int64, n)


def _constant(name: str, value: Any, dtype: Any, n: int) -> pl.Series:
    """`value` repeated `n` times (`pl.repeat` runs a query: ~25x the cost, ~0.1 ms, on every absent column)."""
    return pl.Series(name, [value], dtype=dtype).new_from_index(0, n)


def _obj_values(c: at.Column, val: tuple, n: int, as_list: bool) -> pl.Series | list:
    """A MODE_OBJ column: a number Series (or a Null one) when every value is a number (or none is set),
    as the msgspec path's list gives it; else (or `as_list`) that list: the numbers, and the other values
    decoded by msgspec."""
    num, nonnull, text, at_rows = val
    num = None if num is None else pl.Series(num).alias(c.attr)
    at_rows = np.frombuffer(at_rows, dtype=np.int64)
    if not at_rows.size and not as_list:
        return num if nonnull else _constant(c.attr, None, pl.Null, n)
    vals = [None] * n if num is None else num.to_list()
    try:
        others = msgspec.json.decode(text, type=list[c.pytype])
    except msgspec.DecodeError as e:  # pragma: no cover - the scanner vouched for these values
        raise ValueError(f"args column {c.attr!r}: {e}") from None
    for r, v in zip(at_rows.tolist(), others, strict=True):  # only the values that are not numbers
        vals[r] = v
    return vals


def _dict_column(name: str, values: pl.Series, codes: pl.Series) -> pl.Series:
    """The strings of dictionary `codes`."""
    return values.gather(codes).alias(name)


def _doc(body: bytes) -> d.Doc:
    """The top-level members other than traceEvents (their ','-joined text), decoded exactly as the
    msgspec path does."""
    return msgspec.json.decode(b"{" + body + (b"," if body else b"") + b'"traceEvents":[]}', type=d.Doc)


def warm_up() -> None:
    """The first-use costs of building `Events` that need no scan result, for a caller that would otherwise
    wait for the scan thread: polars' first numpy -> Series conversion imports numpy.ma (~10 ms, mostly
    numpy building docstrings), whichever Series of the process is first. (In the CLI's own run `numpy.ma` is a
    stand-in by then, `deferred.defer_numpy_ma`, and this import costs nothing.)"""
    import numpy.ma  # noqa: F401


def scan(data: bytes) -> Events | None:
    """The whole document at once."""
    return scan_stream([data])


def scan_stream(pieces: Iterable[bytes]) -> Events | None:
    """The document in consecutive pieces of any size (the scan runs without the GIL: a thread that
    reads and gunzips the next piece runs meanwhile). Stops reading at the first piece that makes the
    document one the scanner refuses."""
    if not available():
        return None
    s = scanner()
    for piece in pieces:
        if not s.feed(piece):
            return None
    r = s.finish()
    del s
    return events(r)


def events(r: dict | None) -> Events | None:
    """The `Events` of a scanner's result (None: refused)."""
    if r is None:
        return None
    try:
        return Events(r)
    except msgspec.DecodeError:  # a top-level member of the wrong type: msgspec path reports it
        return None
