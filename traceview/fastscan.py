"""Glue for the optional C scanner (`traceview/_scan.c`): bytes -> event columns in one pass.

`scan_stream(pieces, keep)` (the document in pieces, as they arrive) and `scan(data)` return an
`Events` (the base columns as polars Series, the document's other members decoded by msgspec, and
a handle to read `args` fields as columns) or None, in which case the caller uses the msgspec path
(`decode.decode`). None when the extension is not built, when `TRACEVIEW_NO_C=1`, or when the bytes
are anything but valid JSON the msgspec decoder would take as is (repairs, salvage and the legacy
array format stay on the msgspec path). Only the `args` objects of the events `keep(ph, cat, name)`
names are kept (it answers a group: 0 drop, 1 or 2; None: all in group 1), copied out of the document
into one buffer per group, which the caller frees once read; reading another event's args is an error.

Contract: the frames built from an `Events` are identical to those of the msgspec path; the C
scanner refuses (None) every input where it could differ. tests/test_fastscan.py checks this.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import numpy as np
import polars as pl

try:
    from . import _scan

    if not hasattr(_scan, "Scanner"):  # pragma: no cover - a stale build of an older _scan.c: rebuild it
        _scan = None
except ImportError:  # pragma: no cover - extension not built (no compiler): msgspec path only
    _scan = None

from . import decode as d

# JSON type bits and output modes of _scan.args_columns
T_NULL, T_INT, T_FLOAT, T_STR, T_ARR_INT, T_ARR, T_OBJ, T_BOOL = 1, 2, 4, 8, 16, 32, 64, 128
MODE_CHECK, MODE_INT, MODE_RAW, MODE_DIM3, MODE_OBJ = 0, 1, 2, 3, 4
_ANY = T_NULL | T_INT | T_FLOAT | T_STR | T_ARR | T_OBJ | T_BOOL


def available() -> bool:
    return _scan is not None and os.environ.get("TRACEVIEW_NO_C", "") not in ("1", "true", "yes")


def _types(t: msgspec.inspect.Type) -> int:
    """JSON types a msgspec type accepts (as far as the scanner checks them)."""
    mi = msgspec.inspect
    if isinstance(t, mi.UnionType):
        bits = 0
        for u in t.types:
            bits |= _types(u)
        return bits
    if isinstance(t, mi.NoneType):
        return T_NULL
    if isinstance(t, mi.IntType):
        return T_INT
    if isinstance(t, mi.FloatType):
        return T_INT | T_FLOAT
    if isinstance(t, mi.StrType):
        return T_STR
    if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.IntType):
        return T_ARR_INT
    if isinstance(t, mi.RawType | mi.AnyType):
        return _ANY
    raise TypeError(f"no scanner support for {t}")


class _Spec:
    """The fields of one args struct (HostArgs, GpuArgs...) in the scanner's terms."""

    def __init__(self, typ: type) -> None:
        self.fields: list[tuple[str, str, int, Any]] = []  # attr, JSON key, type bits, python type
        for f in msgspec.structs.fields(typ):
            info = msgspec.inspect.type_info(f.type)
            if isinstance(info, msgspec.inspect.StructType):  # Dim3: [x, y, z]
                self.fields.append((f.name, f.encode_name, T_ARR_INT | T_ARR, "dim3"))
            else:
                self.fields.append((f.name, f.encode_name, _types(info), f.type))


_SPECS: dict[type, _Spec] = {}


def _int_series(name: str, pair: tuple) -> pl.Series:
    """Int64 Series from (int64 values, validity) buffers."""
    vals = pl.Series(name, np.frombuffer(pair[0], dtype=np.int64))
    valid = np.frombuffer(pair[1], dtype=np.bool_)
    if valid.all():
        return vals
    return pl.select(pl.when(pl.Series(valid)).then(vals).otherwise(None).alias(name)).to_series()


class Events:
    """Columns of `traceEvents` from the C scanner, plus what is needed to read `args` later."""

    def __init__(self, r: dict) -> None:
        self._bufs: list[Any] = r["args"]  # the kept args objects, back to back, by group
        self.n: int = r["n"]
        self.doc: d.Doc = _doc(r["members"])
        self.ph = _dict_column("ph", r["ph_values"], r["ph"])
        self.cat = _dict_column("cat", r["cat_values"], r["cat"])
        self.name = _dict_column("name", r["name_values"], r["name"])
        self.pid = pl.Series("pid", np.frombuffer(r["pid"], dtype=np.int64))
        self.tid = pl.Series("tid", np.frombuffer(r["tid"], dtype=np.int64))
        self.pid_strs: dict[int, str] = r["pid_strs"]
        self.tid_strs: dict[int, str] = r["tid_strs"]
        # an absent ts / dur is NaN in the buffers, null here (as the msgspec path's None)
        self.ts = pl.Series("ts_us", np.frombuffer(r["ts"], dtype=np.float64)).fill_nan(None)
        self.dur = pl.Series("dur_us", np.frombuffer(r["dur"], dtype=np.float64)).fill_nan(None)
        self._id = np.frombuffer(r["id"], dtype=np.int64)
        self._id_present = np.frombuffer(r["id_present"], dtype=np.bool_)
        self._id_strs: dict[int, str] = r["id_strs"]
        self.starts = np.frombuffer(r["args_start"], dtype=np.int64)  # -1: not kept
        self.lens = np.frombuffer(r["args_len"], dtype=np.int64)
        self.group = np.frombuffer(r["args_group"], dtype=np.uint8)
        self.nargs = pl.Series("nargs", self.lens, dtype=pl.UInt32)

    def pop_columns(self) -> dict[str, pl.Series]:
        """ph, cat, name, pid, tid, ts, dur, nargs, handed over (no longer held here)."""
        names = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "nargs")
        out = {k: getattr(self, k) for k in names}
        for k in names:
            delattr(self, k)
        return out

    def ids(self, rows: pl.Series) -> pl.Series | list:
        """The `id` values of `rows`: an Int64 Series, or (when some are strings) the list of int, str
        and None the msgspec path has."""
        idx = rows.cast(pl.Int64).to_numpy()
        strs = self._id_strs
        if strs and not strs.keys().isdisjoint(idx.tolist()):
            ids, present = self._id, self._id_present
            return [strs[i] if i in strs else (int(ids[i]) if present[i] else None) for i in idx.tolist()]
        return _int_series("id", (self._id[idx], self._id_present[idx]))

    def kept_bytes(self) -> int:
        return sum(memoryview(b).nbytes for b in self._bufs if b is not None)

    def release_args(self, group: int) -> None:
        """Free the args objects of `group`, all read (reading one again is an error)."""
        self._bufs[group] = None

    def _buf(self, group: int) -> memoryview:
        b = self._bufs[group] if group else b""
        if b is None:
            raise ValueError(f"args of group {group} were released")
        return memoryview(b)

    def raw_args(self, rows: list[int]) -> list[bytes]:
        s, n, g = self.starts, self.lens, self.group
        if rows and s[rows].min() < 0:
            raise ValueError("args of these rows were not kept")
        bufs = {k: self._buf(k) for k in set(g[rows].tolist())}
        return [bytes(bufs[g[i]][s[i]:s[i] + n[i]]) for i in rows]

    def args_values(self, rows: pl.Series, typ: type, attrs: list[str], int_attrs: set[str]) -> dict | None:
        """{attr: values} for the args of `rows`, as the msgspec path would give them: an Int64
        Series for the int attrs in `int_attrs`, one 0x1f-joined bytes for raw attrs, else a list.
        None when the scanner cannot vouch for identical results (the caller decodes with msgspec)."""
        spec = _SPECS.get(typ) or _SPECS.setdefault(typ, _Spec(typ))
        want = {a.split(".")[0] for a in attrs}
        fields, kinds = [], []
        for attr, key, bits, pytype in spec.fields:
            if attr not in want:
                mode = MODE_CHECK
            elif pytype == "dim3":
                mode = MODE_DIM3
            elif pytype is msgspec.Raw:
                mode = MODE_RAW
            elif bits == T_INT | T_NULL and attr in int_attrs:
                mode = MODE_INT
            else:
                mode = MODE_OBJ
            fields.append((key.encode(), bits, mode))
            kinds.append((attr, mode, pytype))
        idx = rows.cast(pl.Int64).to_numpy()
        groups = self.group[idx]
        # rows of several groups or without args: the msgspec path's business
        if idx.size and ((groups != groups[0]).any() or groups[0] == 0):
            if (self.starts[idx] < 0).any():
                raise ValueError("args of these rows were not kept")
            return None
        buf = self._buf(int(groups[0])) if idx.size else b""
        got = _scan.args_columns(buf, self.starts, self.lens, idx, fields)
        if got is None:
            return None
        out: dict[str, Any] = {}
        for (attr, mode, pytype), val in zip(kinds, got, strict=True):
            if mode == MODE_INT:
                out[attr] = _int_series(attr, val)
            elif mode == MODE_RAW:
                out[attr] = val
            elif mode == MODE_DIM3:
                for part, pair in zip("xyz", val, strict=True):
                    out[f"{attr}.{part}"] = _int_series(f"{attr}.{part}", pair)
            elif mode == MODE_OBJ:
                vals = _decode_many(val, pytype)
                if vals is None:
                    return None
                out[attr] = vals
        return out


def _decode_many(raws: list, typ: Any) -> list | None:
    """Decode the present values (bytes; None = key absent) with msgspec as `typ`."""
    present = [r for r in raws if r is not None]
    if not present:
        return raws
    try:
        vals = msgspec.json.decode(b"[" + b",".join(present) + b"]", type=list[typ])
    except msgspec.DecodeError:
        return None
    if len(present) == len(raws):
        return vals
    it = iter(vals)
    return [None if r is None else next(it) for r in raws]


def _dict_column(name: str, values: list[str], codes: bytes) -> pl.Series:
    return pl.Series(name, values, dtype=pl.String).gather(pl.Series(np.frombuffer(codes, dtype=np.uint32)))


def _doc(body: bytes) -> d.Doc:
    """The top-level members other than traceEvents (their ','-joined text), decoded exactly as the
    msgspec path does."""
    return msgspec.json.decode(b"{" + body + (b"," if body else b"") + b'"traceEvents":[]}', type=d.Doc)


Keep = Callable[[str, str, str], int] | None  # (ph, cat, name) -> args group, 0: drop


def scan(data: bytes, keep: Keep = None) -> Events | None:
    """The whole document at once."""
    return scan_stream([data], keep)


def scan_stream(pieces: Iterable[bytes], keep: Keep = None) -> Events | None:
    """The document in consecutive pieces of any size (the scan runs without the GIL: a thread that
    reads and gunzips the next piece runs meanwhile). Stops reading at the first piece that makes the
    document one the scanner refuses."""
    if not available():
        return None
    s = _scan.Scanner(keep)
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
