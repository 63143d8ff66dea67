"""Load a Kineto chrome trace (`.json` / `.json.gz`, current, 2021 or ROCm flavour) into a `Trace`.

All per-event work is columnar: the decoder hands over typed structs, columns are pulled with
C-level `map`, and everything after that is polars expressions and joins.

Lazy chains are collected by the in-memory engine (`_IN_MEMORY`: traceview/engine.py), which runs them as the
eager API runs each step: polars' default for `LazyFrame.collect` is the streaming engine, slower on these
frames, and it hands back columns in chunks (which later numpy conversions then copy).
"""

from __future__ import annotations

import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from operator import itemgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from ..analyses.names import contains as name_matches
from ..analyses.rowid import locate
from ..analyses.tree import call_tree, enclosing_op
from ..engine import CHAIN, IN_MEMORY, SMALL_ROWS
from ..errors import TraceError
from ..frames import dropnull, filled, isnull, notnull, omit, pick, take
from ..model import STEP_RE, Job, Trace, TraceMeta, conform
from . import argtables as at
from . import decode as d
from . import dupkeys, fastscan, heap_trim, lenient, stepcheck
from .argtables import GPU_FIELDS as _GPU_FIELDS
from .argtables import INT_ATTRS as _INT_ATTRS
from .argtables import MEM_FIELDS as _MEM_FIELDS
from .argtables import RAW_ATTRS as _RAW_ATTRS
from .categories import (
    GPU_CATS,
    GRAPH_LAUNCH_RE,
    HOST_CATS,
    META_NAMES,
    OLD_CATS,
    OTHER_KINETO_CATS,
    RARE_NAMES,
    RUNTIME_CATS,
)
from .inputs import DEFAULT_MAX_BYTES, STDIN, check_path
from .layouts import path_rank
from .manifest import read_manifest

COMM_KERNEL_RE = r"^(nccl|rccl)|ncclKernel|ncclDevKernel|ncclSymDevKernel"
_KNOWN_CATS = {*HOST_CATS, *GPU_CATS, *OLD_CATS, *OLD_CATS.values(), *OTHER_KINETO_CATS}
#: the phases of the Trace Event Format (Chrome's; Kineto writes X, i, s, f, M, C and b/e): any other is no event
_PHASES = ["X", "B", "E", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "M", "V", "v", "R", "c",
           "(", ")"]
MAX_DUR_NS = 7 * 24 * 3600 * 10**9  # HTA drops corrupt events longer than a week; so do we
MAX_SPAN_US = 7 * 24 * 3600 * 1e6  # an event this far from the trace's median timestamp has a corrupt clock


_IN_MEMORY = IN_MEMORY  # (traceview/engine.py: lazy chains run in the in-memory engine)



def _ids(values: list) -> pl.Series:
    """pid/tid are ints or strings ("stream 7", "Spans", "25738"): map all to Int64."""
    s = pl.Series(values, dtype=pl.Int64, strict=False)
    if s.null_count() == 0:  # the common case: all ints
        return s
    # only the few string ids take the slow path
    pos = s.is_null().arg_true()
    idx = pos.to_list()
    return _fix_ids(s, pos, list(itemgetter(*idx)(values)) if len(idx) > 1 else [values[idx[0]]])


def _fix_ids(s: pl.Series, pos: pl.Series, values: list) -> pl.Series:
    """Set the rows `pos` of `s` from their string ids `values`."""
    x = pl.col("s")  # (one query: each Series method would run one)
    # "stream 7": its number; the regex (~0.5 ms to compile) only where some id can match it (Kineto's are
    # "Spans", "Traces", "PyTorch Profiler"...)
    stream = ([x.str.extract(r"^stream\s+(-?\d+)").str.to_integer(strict=False)]
              if any(isinstance(v, str) and v.startswith("stream") for v in values) else [])
    fixed = pl.DataFrame({"s": pl.Series(values, dtype=pl.String, strict=False)}).select(pl.coalesce(
        x.str.to_integer(strict=False), *stream, -((x.hash() % 1_000_000_000).cast(pl.Int64) + 10))).to_series()
    return s.scatter(pos, fixed)


def _fast_ids(s: pl.Series, strs: dict[int, str]) -> pl.Series:
    """pid/tid from the C scanner: int64 values plus {row: str} for the string ids."""
    if not strs:
        return s
    return _fix_ids(s, pl.Series(list(strs), dtype=pl.UInt32), list(strs.values()))


def _to_int(s: pl.Series) -> pl.Series:
    """int | str (decimal or 0x-hex) | None -> Int64 (values outside int64 become null)."""
    if s.dtype.is_integer():
        return s.cast(pl.Int64, strict=False)
    if s.dtype == pl.Null:
        return s.cast(pl.Int64)
    s = s.cast(pl.String)
    hexv = s.str.strip_prefix("0x").str.to_integer(base=16, strict=False)
    return pl.select(pl.when(s.str.starts_with("0x")).then(hexv)
                     .otherwise(s.str.to_integer(strict=False))).to_series()


def _out(v: pl.Series, lo: int, hi: int | None) -> pl.Series:
    """Values of `v` outside [lo, hi) (hi None: int64's bound)."""
    return (v < lo) if hi is None else (v < lo) | (v >= hi)


def _usable(s: pl.Series, key: str) -> pl.Series:
    """`_to_int` of `s` with the values outside the range of GPU arg `key` (`_GPU_ID_ARGS`) null."""
    _name, lo, hi, _instead = _GPU_ID_ARGS[key]
    v = _to_int(s)
    bad = _out(v, lo, hi)
    return pl.select(pl.when(~bad).then(v)).to_series().alias(v.name) if bad.any() else v  # (no copy otherwise)


def _to_float(s: pl.Series) -> pl.Series:
    if s.dtype.is_numeric():
        return s.cast(pl.Float64)
    return s.cast(pl.String).str.replace(",", ".").cast(pl.Float64, strict=False)


def _series(name: str, values: list, dtype: Any = None) -> pl.Series:
    return pl.Series(name, values, dtype=dtype, strict=False)


def _args_frame(evs_args: list | fastscan.Events, rows: pl.Series, table: int,
                issues: Counter | None = None) -> pl.DataFrame:
    """Decode `args` of the events at `rows` (positions) into the columns {out_name: struct_attr} of args table
    `table` (`argtables.TABLES`). Values of an unexpected type or range are coerced or dropped and counted in
    `issues`. From the C scanner: every row it filled for that table (callers join on `i`), with the objects
    it left to msgspec decoded here: those among `rows` (those of the table's rows that are still loaded:
    a superset of them will do), as the msgspec path decodes (and warns about) only those."""
    typ, fields = at.TABLES[table]
    if isinstance(evs_args, fastscan.Events):
        wanted, (rows, got, bad, raws) = rows, evs_args.table(table)
        if bad.size:
            keep = np.isin(rows.gather(pl.Series(bad)).to_numpy(), wanted.to_numpy())
            bad, raws = bad[keep], [r for r, k in zip(raws, keep.tolist(), strict=True) if k]
        if bad.size:
            _patch(got, bad.tolist(), _decoded(raws, typ, fields, issues), fields, issues)
    elif rows.len() == 0:
        rows, got = pl.Series([], dtype=pl.UInt32), {}
    else:
        idx = rows.to_list()
        raws = list(itemgetter(*idx)(evs_args)) if len(idx) > 1 else [evs_args[idx[0]]]
        got = _decoded(raws, typ, fields, issues)
    if rows.len() == 0:
        return pl.DataFrame({"i": pl.Series([], dtype=pl.UInt32)})
    cols: dict[str, pl.Series] = {"i": rows.cast(pl.UInt32)}
    for out, attr in fields.items():
        col = _values_column(out, attr, got[attr], issues)
        cols[out] = _raw_codes(col) if attr in _RAW_ATTRS else col
    return pl.DataFrame(cols)


def _decoded(raws: list, typ: type, fields: dict[str, str], issues: Counter | None) -> dict[str, list]:
    structs = d.decode_args(raws, typ, issues)
    return {attr: d.column(structs, attr) for attr in fields.values()}


def _values_column(out: str, attr: str, vals: list | pl.Series, issues: Counter | None) -> pl.Series:
    if isinstance(vals, pl.Series):
        return vals.alias(out)
    if attr in _RAW_ATTRS:
        return _raw_column(out, vals)
    if attr in _INT_ATTRS:
        col = _series(out, vals, pl.Int64)
        lost = col.null_count() - vals.count(None)
        if lost and issues is not None:  # Python ints beyond int64 (msgspec takes any size)
            issues[("dropped", _KEYS.get(attr, attr), "int beyond 64 bits")] += lost
        return col
    return _series(out, vals)


def _patch(got: dict[str, Any], bad: list[int], slow: dict[str, list], fields: dict[str, str],
           issues: Counter | None) -> None:
    """Put the values msgspec decoded for the rows at positions `bad` into the scanner's columns (lists stay
    lists: their column's type is inferred from all values, as on the msgspec path)."""
    pos = pl.Series(bad, dtype=pl.Int64)
    for attr in dict.fromkeys(fields.values()):
        vals = got[attr]
        if isinstance(vals, list):
            for p, v in zip(bad, slow[attr], strict=True):
                vals[p] = v
        else:
            got[attr] = vals.scatter(pos, _values_column(attr, attr, slow[attr], issues))


# JSON key of each args attribute, for warnings
_KEYS = {f.name: f.encode_name for typ in (d.HostArgs, d.GpuArgs, d.MemArgs) for f in msgspec.structs.fields(typ)}
_KEYS.update({f"{dim}.{c}": dim for dim in ("grid", "block") for c in "xyz"})


def _raw_codes(col: pl.Series) -> pl.Series:
    """A raw-text column as the model holds it (`model.SCHEMA`: Categorical): coded here, over the table's own
    rows, before it is spread over the host rows (a gather of codes, not of 16-byte text views)."""
    return col.cast(pl.String).cast(pl.Categorical)


def _raw_column(name: str, raws: list) -> pl.Series:
    """Raw JSON slices -> Binary column without a Python call per value: join them with a byte that
    JSON text cannot contain unescaped (0x1f) and split inside polars."""
    joined = b"\x1f".join(raws).decode("utf-8", "replace")
    return pl.Series(name, [joined]).str.split("\x1f").explode().cast(pl.Binary)


_HOST_FIELDS = {**at.PY_FIELDS, **at.OP_FIELDS, **at.RT_FIELDS, **at.RARE_FIELDS}


def _host_args(ev_args: list | fastscan.Events, host: pl.DataFrame, issues: Counter) -> pl.DataFrame:
    if isinstance(ev_args, fastscan.Events):  # the scanner's tables hold these rows already
        parts = [_args_frame(ev_args, host["i"], k, issues) for k in (at.PY, at.OP, at.RT)]
        rare = _args_frame(ev_args, host["i"], at.RARE, issues)
        if host.height >= SMALL_ROWS:
            return _beside_union(host, parts, rare)
    else:
        has = host.select("i", "cat", "name", "nargs").filter(pl.col("nargs") > 0)
        parts = [
            # python frames: 40 % of a with_stack trace; only module frames carry args we use
            _args_frame(ev_args, has.filter((pl.col("cat") == "python_function")
                                            & pl.col("name").str.starts_with("nn.Module:"))["i"], at.PY, issues),
            _args_frame(ev_args, has.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))["i"], at.OP, issues),
            _args_frame(ev_args, has.filter(pl.col("cat").is_in(RUNTIME_CATS))["i"], at.RT, issues),
        ]
        rare = _args_frame(ev_args, has.filter(pl.col("name").str.contains(RARE_NAMES))["i"], at.RARE, issues)
    frame = pl.concat([p for p in parts if p.width > 1], how="diagonal_relaxed") if any(
        p.width > 1 for p in parts) else pl.DataFrame({"i": pl.Series([], dtype=pl.UInt32)})
    return _beside(host, frame, rare)


def _beside(rows: pl.DataFrame, *parts: pl.DataFrame) -> pl.DataFrame:
    """`rows` with the columns of `parts` (args frames keyed by `i`) aligned to its rows, as left joins on
    `i` would give them, without copying `rows`' own columns (a left join keeps the left frame's row order;
    `i` is unique in each part): each part gathered at the positions of `rows`' `i` in it. A field no row
    has stays a constant null: gathered, it would be a buffer of `rows`' length."""
    keys, out, cols = None, [pl.col(c) for c in rows.columns], []
    for f in parts:
        if f.width < 2:
            continue
        none = {c for c in f.columns[1:] if f[c].null_count() == f.height}
        schema = f.schema  # (built on each call)
        out += [pl.lit(None, schema[c]).alias(c) if c in none else pl.col(c) for c in f.columns[1:]]
        if f.width - len(none) > 1:
            keys = rows["i"].to_numpy() if keys is None else keys
            cols.append(f.select(pl.exclude("i", *none).gather(locate(f["i"].to_numpy(), keys))))
    if len(out) == rows.width:
        return rows
    return pl.concat([rows, *cols], how="horizontal").select(out)


def _beside_union(rows: pl.DataFrame, parts: list[pl.DataFrame], rare: pl.DataFrame) -> pl.DataFrame:
    """`_beside(rows, pl.concat(parts, how="diagonal_relaxed"), rare)` for parts whose row ids `i` are disjoint
    (each event's args are in one of those tables), without building that concatenation (a column per field
    of every table, over all their rows): each field gathered from the parts that hold it, cast to the type
    the concatenation gives it, and coalesced."""
    parts = [p for p in parts if p.width > 1]
    if len(parts) < 2:
        return _beside(rows, *parts, rare)
    schema = pl.concat([p.head(0) for p in parts], how="diagonal_relaxed").schema
    keys, got = rows["i"].to_numpy(), {}
    for p in parts:
        live = [c for c in p.columns[1:] if p[c].null_count() < p.height]
        if live:
            g = p.select(pl.col(live).gather(locate(p["i"].to_numpy(), keys)))
            for c in live:
                got.setdefault(c, []).append(g[c].cast(schema[c]))
    fields = [c for c in schema if c != "i"]
    cols = [v[0] if len(v) == 1 else pl.select(pl.coalesce(v).alias(c)).to_series() for c, v in got.items()]
    wide = pl.concat([rows, pl.DataFrame(cols)], how="horizontal") if cols else rows
    return _beside(wide.select(*rows.columns, *(c if c in got else pl.lit(None, schema[c]).alias(c) for c in fields)),
                   rare)


def _flag(v: Any) -> bool:
    return bool(v) and v not in ("0", "false", "False")


def _int_or_none(v: Any) -> int | None:
    """A rank or world size from the trace's metadata: a whole number in [0, 2**31) or None."""
    return lenient.int_in(v, 0, 2**31 - 1)


def load_file(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES,
              on_stage: Callable[[str], None] | None = None) -> Trace:
    """Load one trace file ('-': stdin). At most `max_bytes` of (decompressed) JSON are held.
    `on_stage("decoding")` is called once the bytes are read (progress display)."""
    trace = _load_file(Path(path), max_bytes, on_stage)
    # the load's freed numpy temporaries (the call tree's: ~45 bytes a host row) stay in the C heap, and the
    # reader threads' heaps stay with them: arrays larger than glibc's mmap threshold (32 MiB at most) never
    # reuse those pages, so on large traces they sat under the whole analysis (10 M events: ~70 MiB of its peak).
    # (Here, once the load's locals are gone.)
    heap_trim.release(trace.host.height + trace.gpu.height)
    return trace


def _load_file(path: Path, max_bytes: int, on_stage: Callable[[str], None] | None) -> Trace:
    issues: Counter = Counter()  # args values coerced or dropped (reported once per kind)
    fast, data, warnings = _scan_input(path, max_bytes)  # C scanner, streamed (None: msgspec path on `data`)
    if on_stage is not None:
        on_stage("decoding")
    if fast is not None:
        doc, ev_args = fast.doc, fast
        if not fast.n:
            raise TraceError(f"{path}: 'traceEvents' is empty: nothing to analyze")
        cols = fast.pop_columns()  # the frame owns them from here (no second copy while they are replaced)
        # ph, cat, name as dictionary codes (tests on them are integer work), but on a small trace as their
        # strings (fewer polars calls: the codes are decoded per slice)
        dicts = {k: _Dict(v) for k, v in fast.dicts.items()} if fast.n >= SMALL_ROWS else None
        if dicts is None:
            cols.update({k: take(fast.dicts[k], cols[k]).alias(k) for k in fast.dicts})
        base = pl.DataFrame({
            "ph": cols["ph"], "cat": cols["cat"], "name": cols["name"],
            "pid": _fast_ids(cols["pid"], fast.pid_strs), "tid": _fast_ids(cols["tid"], fast.tid_strs),
            "ts_us": cols["ts"], "dur_us": cols["dur"], "nargs": cols["nargs"],
        }).with_row_index("i")
        del cols
        flow_rows = base.select(pl.col("i").filter(_is("ph", ["s", "f"], dicts)))["i"]  # (not the whole frame)
        flow_ids = fast.ids(flow_rows)
        flow_rows = flow_rows.to_list()
    else:
        doc, ev_args, base, flow_rows, flow_ids = _decode_msgspec(path, data, warnings)
        dicts = None
    del data
    legacy = doc.schemaVersion is None and doc.deviceProperties is None and doc.traceName is None

    parts, t0_us, counts, fmt = _slices(path, base, legacy, warnings, dicts)  # consumes base
    host, gpu, gann, mem, fl, meta_rows = parts.values()
    del base, parts

    # ---- host slices and GPU activities, with their args ------------------------------------
    host = _ensure(_host_args(ev_args, host, issues), _HOST_FIELDS, raw=_RAW_ATTRS)
    # (lazy chains and Series ops in this part: a small trace's load is mostly the fixed cost of each polars query)
    host = host.lazy().with_columns(
        external_id=_first_set(host, "external_id", "external_id_old"),
        kind=pl.col("kind").cast(pl.String), size=pl.col("size").cast(pl.String),
    ).drop("external_id_old", "ph", "nargs").collect(**_IN_MEMORY)
    gargs = _args_frame(ev_args, _with_args(gpu), at.GPU, issues)
    gpu = _beside(gpu, gargs)
    gpu = _ensure(gpu, _GPU_FIELDS)

    # ---- annotations, memory, flows, threads --------------------------------------------
    gargs2 = _args_frame(ev_args, _with_args(gann), at.GANN, issues)
    gann = gann.lazy().join(gargs2.lazy(), on="i", how="left", maintain_order="left") if gargs2.width > 1 else \
        gann.lazy().with_columns(external_id=pl.lit(None, pl.Int64))
    gann = gann.select("name", pl.col("pid").alias("device"), pl.col("tid").alias("stream"), "ts", "dur", "end",
                       _to_int_expr("external_id").alias("external_id")).collect(**_IN_MEMORY)

    margs = _args_frame(ev_args, _with_args(mem), at.MEM, issues)
    mem = (mem.lazy().join(margs.lazy(), on="i", how="left", maintain_order="left") if margs.width > 1
           else _ensure(mem, _MEM_FIELDS).lazy()).select(
        "ts", "pid", "tid", *[_to_int_expr(c).alias(c) for c in _MEM_FIELDS]).collect(**_IN_MEMORY)

    ids = _to_int(flow_ids if isinstance(flow_ids, pl.Series) else pl.Series(flow_ids, strict=False))
    lost = ids.null_count() - (flow_ids.count(None) if isinstance(flow_ids, list) else flow_ids.null_count())
    if lost:
        warnings.append(f"ignored {lost:,} flow ids beyond 64 bits (those flows are not linked)")
    ids = pl.DataFrame({"i": pl.Series(flow_rows, dtype=pl.UInt32), "id": ids})
    flows = fl.lazy().join(ids.lazy(), on="i", how="left", maintain_order="left").drop("i").collect(**_IN_MEMORY)

    margs2 = _args_frame(ev_args, _with_args(meta_rows), at.META, issues)
    meta_rows = (meta_rows.lazy().join(margs2.lazy(), on="i", how="left", maintain_order="left") if margs2.width > 1
                 else meta_rows.lazy().with_columns(aname=pl.lit(None, pl.String), labels=pl.lit(None, pl.String)))
    threads = (meta_rows.filter(pl.col("name") == "thread_name").group_by("pid", "tid", maintain_order=True)
               .agg(pl.col("aname").drop_nulls().last().alias("name")).collect(**_IN_MEMORY))
    # every args object has been read: the document's columns and kept args go before the call tree (the
    # load's peak of memory)
    del fast, ev_args, fl, meta_rows, flow_rows, flow_ids, ids

    # ---- call tree, launches ------------------------------------------------------------
    host = call_tree(host)
    host = enclosing_op(host, RUNTIME_CATS)
    gpu = _finish_gpu(gpu, host, warnings)

    rocm = bool(doc.hip_runtime_version or doc.roctracer_version) or (
        host.select(((pl.col("cat") == "cuda_runtime") & pl.col("name").str.starts_with("hip")).any()).item())
    if rocm and gpu.height:
        # MI3xx kernels can overlap the next kernel on their stream by a lot: clip
        gpu = gpu.sort("device", "stream", "ts", maintain_order=True).with_columns(
            end=pl.min_horizontal("end", pl.col("ts").shift(-1).over("device", "stream").fill_null(pl.col("end")))
        ).with_columns(dur=pl.col("end") - pl.col("ts"))

    gpu = _share_equal(gpu, {"device": "pid", "stream": "tid", "external_id": "correlation"})
    warnings.extend(lenient.describe(issues, "args"))
    steps = _steps(host, gpu, warnings)
    manifest, why = read_manifest(path.parent) if str(path) != STDIN else (None, None)  # a `traceview collect` run
    if why:
        warnings.append(why)
    meta = replace(_meta(path, doc, fmt, t0_us, counts, warnings, steps, rocm, host, gpu), manifest=manifest)
    return Trace(meta=meta, host=_null_constants(conform("host", host)), gpu=_null_constants(conform("gpu", gpu)),
                 gpu_annotations=conform("gpu_annotations", gann), memory=conform("memory", mem),
                 flows=conform("flows", flows), steps=conform("steps", omit(steps, "synthetic")),
                 threads=conform("threads", threads))


# the base columns each frame is cut with (ts_us / dur_us become int64 ns ts / dur, and end); host and GPU rows
# are all ph X: their ph is a constant
_SLICE_COLS = {
    "host": ("i", "cat", "name", "pid", "tid", "nargs", "ts_us", "dur_us"),
    "gpu": ("i", "cat", "name", "pid", "tid", "nargs", "ts_us", "dur_us"),
    "gann": ("i", "name", "pid", "tid", "nargs", "ts_us", "dur_us"),
    "mem": ("i", "pid", "tid", "nargs", "ts_us"),
    "flows": ("i", "cat", "ph", "pid", "tid", "ts_us"),
    "meta": ("i", "name", "pid", "tid", "nargs"),
}


class _Dict:
    """The dictionary of a column of codes (distinct strings; the C scanner's ph, cat, name)."""

    SMALL = 4096  # up to this many strings, looked up in a Python index (a polars call costs more)

    def __init__(self, values: pl.Series) -> None:
        self.values = values
        self._index: dict[str, list[int]] | None = None

    def codes(self, want: list[str]) -> pl.Series:
        """The codes of the strings `want` (UInt32)."""
        if self.values.len() > self.SMALL:
            return self.values.is_in(want).arg_true().cast(pl.UInt32)
        if self._index is None:
            self._index = {}
            for k, v in enumerate(self.values.to_list()):
                self._index.setdefault(v, []).append(k)
        return pl.Series([k for v in want for k in self._index.get(v, ())], dtype=pl.UInt32)


def _is(col: str, values: str | list[str], dicts: dict[str, _Dict] | None) -> pl.Expr:
    """`pl.col(col).is_in(values)` (`==` for one value) on a string column; with `dicts`, on the column of
    dictionary codes `col` is (its dictionary `dicts[col]` tested, not the rows' strings: integer work)."""
    values = [values] if isinstance(values, str) else values
    if dicts is None:
        return pl.col(col) == values[0] if len(values) == 1 else pl.col(col).is_in(values)
    codes = dicts[col].codes(values)
    return pl.col(col) == pl.lit(codes[0], pl.UInt32) if codes.len() == 1 else pl.col(col).is_in(codes.implode())


#: what a trace exported after the profiler's schedule had handed its recorded steps on holds, and why
_NOTHING_RECORDED = ("the profiler recorded none of the program's work. Common causes: nothing ran on a thread it "
                     "records between its start and stop; the trace was exported after the `with` block, once a "
                     "`schedule` had handed its active steps to `on_trace_ready`; or that handler ran again when the "
                     "block ended mid-cycle and wrote this near-empty trace over the full one (write each call to "
                     "its own file, as `torch.profiler.tensorboard_trace_handler(dir)` does)")


def _program_work(path: Path, base: pl.DataFrame, host: pl.Series, work: pl.Expr, counts: dict[str, int]) -> None:
    """Raise the error that says why when a trace without GPU activity holds no op or runtime call: a file that is
    not a profiler trace, or a profiler trace that recorded nothing of the program (only Kineto's own window span,
    the step annotations, or the Python of the profiler's own `stop`): analyzed, it would be a step of nothing."""
    if host.any() and base.select(work.any()).item():
        return
    cats = ", ".join(f"{c or repr(c)} ({m:,})" for c, m in list(counts.items())[:6])
    if "Trace" not in counts and not host.any():
        raise TraceError(f"{path}: no PyTorch profiler events (CPU ops, runtime calls or GPU kernels) among its "
                         f"{sum(counts.values()):,} events: not a PyTorch profiler trace (categories: {cats or 'none'})")
    n = int(host.sum())
    what = (f"only {n:,} Python-function or annotation event{'s' * (n != 1)}" if n
            else "only the profiler's own window span and metadata")
    raise TraceError(f"{path}: no op, runtime call or GPU activity ({what}; categories: {cats}): {_NOTHING_RECORDED}")


def _slices(path: Path, base: pl.DataFrame, legacy: bool, warnings: list[str],
            dicts: dict[str, _Dict] | None = None) -> tuple[dict[str, pl.DataFrame], float, dict, str]:
    """Cut `base` into the rows each frame is built from ({_SLICE_COLS key: frame}), with ts / dur validated
    and turned into int64 ns relative to the first event; also t0 (µs), the event count per category and the
    trace's format (2021-era category names are replaced by today's, only when there are some).

    Events without a usable ts, or whose clock is implausible, are skipped; a missing or negative dur is 0;
    each with a warning. The checks are counts over the whole table (no column of it is rebuilt), the ranges
    checked before the int64 cast so no value can overflow it, and the ns columns are computed on the slices
    only. `base` is consumed: each of its columns is freed once cut (the load's memory stays near one table).
    With `dicts`, base's ph, cat and name are dictionary codes (`_is`), decoded on the slices only."""
    cat, ts, dur = pl.col("cat"), pl.col("ts_us"), pl.col("dur_us")
    x = _is("ph", "X", dicts)
    spans = x | _is("ph", "i", dicts)  # (== beats is_in on strings)
    placed = spans | _is("ph", ["s", "f"], dicts)  # events whose time is used; metadata (M) often has ts 0
    not_trace = ~_is("cat", "Trace", dicts)
    timed = spans & ts.is_not_null() & not_trace & (pl.col("pid") > -1_000_000_000)
    no_cat = _is("cat", "", dicts)

    def survey() -> dict:
        return base.select(
            no_ts=(spans & ts.is_null()).sum(), no_dur=(x & ts.is_not_null() & dur.is_null()).sum(),
            neg_dur=(x & (dur < 0)).sum(), neg_ts=(spans & (ts < 0)).sum(), timed=timed.sum(),
            t0=ts.filter(timed).min(), lo=ts.filter(placed).min(), hi=ts.filter(placed).max(), dur_hi=dur.max(),
            finite=ts.is_finite().all() & dur.is_finite().all(),
            # 2021-era category names, X events without a category (not "Trace": the times above hold either way)
            old=_is("cat", list(OLD_CATS)[:5], dicts).any(), renamed=_is("cat", list(OLD_CATS), dicts).any(),
            empty_x=(no_cat & x).any(), all_empty=no_cat.all(), n_empty_x=(no_cat & x).sum(),
            no_ph=_is("ph", "", dicts).sum(), odd_ph=(~_is("ph", [*_PHASES, ""], dicts)).sum()).row(0, named=True)

    n = survey()  # one pass of counts and extremes
    if not n["finite"]:  # NaN, inf: as missing (but a +inf dur is corrupt: dropped below)
        ts = pl.when(ts.is_finite()).then(ts)
        dur = pl.when(dur.is_finite()).then(dur).when(dur == float("inf")).then(dur)
        timed = spans & ts.is_not_null() & not_trace & (pl.col("pid") > -1_000_000_000)
        n = survey()
    fmt = "legacy-autograd" if (legacy and n["all_empty"]) else ("kineto-2021" if n["old"] else "kineto")
    if (n["renamed"] or n["empty_x"]) and dicts is None:  # today's names (an X event without a category is a
        # CPU op); in place
        base.replace_column(base.get_column_index("cat"), base.select(
            pl.when(no_cat & x).then(pl.lit("cpu_op")).otherwise(cat.replace(OLD_CATS)).alias("cat")).to_series())
    elif n["renamed"] or n["empty_x"]:  # the same on the dictionary (and the codes of X events without one)
        names = dicts["cat"].values.replace(OLD_CATS)
        if n["empty_x"]:
            names = names.append(pl.Series(["cpu_op"]))
            base.replace_column(base.get_column_index("cat"), base.select(
                pl.when(no_cat & x).then(pl.lit(names.len() - 1, pl.UInt32)).otherwise(cat).alias("cat")).to_series())
        dicts = {**dicts, "cat": _Dict(names)}
    if n["no_ts"]:
        warnings.append(f"skipped {n['no_ts']:,} events (ph X or i) without a usable 'ts' (missing, null or not "
                        "a finite number)")
    if n["no_ph"]:  # (issue 33: a kernel without its phase vanished from GPU time, silently)
        warnings.append(f"skipped {n['no_ph']:,} events with an empty or missing 'ph' (neither a span nor an "
                        "instant: their time is not counted)")
    if n["odd_ph"]:  # (issue 33: a phase no trace writer uses dropped its event silently)
        odd = base.select(pl.col("ph").filter(~_is("ph", [*_PHASES, ""], dicts)).first()).item()
        odd = dicts["ph"].values[odd] if dicts is not None else odd
        warnings.append(f"skipped {n['odd_ph']:,} events whose 'ph' is no trace event phase (e.g. {str(odd)[:20]!r}): "
                        "their time is not counted")
    if n["n_empty_x"] and not n["all_empty"]:
        warnings.append(f"{n['n_empty_x']:,} complete events (ph X) without a 'cat': analyzed as CPU ops")
    if not n["timed"]:
        raise TraceError(f"{path}: no timed events (ph X or i with a 'ts') in 'traceEvents'")
    no_ts, far, long = spans & ts.is_null(), pl.lit(False), pl.lit(False)
    n_far = corrupt = 0
    t0_us = n["t0"]
    # a clock more than MAX_SPAN away from the bulk of the trace is a corrupt record, not a 7-day trace: only
    # possible when the placed times span more than that (|ts - median| <= hi - lo)
    if n["hi"] - n["lo"] > MAX_SPAN_US:
        stamps = base.select(ts.filter(timed)).to_series().to_numpy()
        k = (stamps.size - 1) // 2
        med = float(np.partition(stamps, k)[k])  # the lower median: one event's own clock
        near = stamps[np.abs(stamps - med) <= MAX_SPAN_US]
        t0_us = float(pl.Series(near).min())
        del stamps, near
        far = ((ts - med).abs() > MAX_SPAN_US).fill_null(False) & placed
        n_far = base.select(far.sum()).item()
    if n["dur_hi"] is not None and n["dur_hi"] > MAX_DUR_NS / 1000:
        long = (dur > MAX_DUR_NS / 1000).fill_null(False)
        corrupt = base.select((long & ~no_ts & ~far).sum()).item()
    if n_far:
        warnings.append(f"skipped {n_far:,} events whose timestamp lies over 7 days from the rest of the trace "
                        "(corrupt clock)")
    if n["neg_ts"]:
        warnings.append(f"{n['neg_ts']:,} events have a negative timestamp (ts < 0); times are taken relative "
                        "to the earliest event")
    if n["no_dur"]:
        warnings.append(f"{n['no_dur']:,} complete events (ph X) without a usable 'dur': taken as 0 µs")
    if n["neg_dur"]:
        warnings.append(f"{n['neg_dur']:,} complete events (ph X) with a negative 'dur': taken as 0 µs")
    if corrupt:
        warnings.append(f"skipped {corrupt:,} events with a duration over 7 days (corrupt profiler records)")
    keep = ~(no_ts | far | long) if n["no_ts"] or n_far or corrupt else None
    if dicts is not None:  # codes -> names (two codes may name one category: renamed, or escaped in the file)
        per = np.bincount((base["cat"] if keep is None else base.select(cat.filter(keep)).to_series()).to_numpy(),
                          minlength=dicts["cat"].values.len())
        used = np.flatnonzero(per)
        got: dict[str, int] = {}
        for c, m in zip(take(dicts["cat"].values, used).to_list(), per[used].tolist(), strict=True):
            got[c] = got.get(c, 0) + m
        counts = dict(sorted(got.items(), key=lambda cm: (-cm[1], cm[0])))  # (no null: "" for none)
    else:
        counts = base.select(cat if keep is None else cat.filter(keep)).group_by("cat").len()
        counts = dict(counts.sort(["len", "cat"], descending=[True, False], maintain_order=True).iter_rows())

    odd = [(c, m) for c, m in counts.items() if c not in _KNOWN_CATS]
    if odd and len(odd) < len(counts):  # (issue 33: an event of a misspelt category vanished silently)
        warnings.append(f"ignored {sum(m for _c, m in odd):,} events of categories traceview does not know (e.g. "
                        f"{odd[0][0][:30]!r} x{odd[0][1]:,}): their time is not counted")
    conds = {"host": x & _is("cat", HOST_CATS, dicts), "gpu": x & _is("cat", GPU_CATS, dicts),
             "gann": x & _is("cat", "gpu_user_annotation", dicts),
             "mem": _is("ph", "i", dicts) & _is("name", "[memory]", dicts),
             "flows": _is("ph", ["s", "f"], dicts), "meta": _is("ph", "M", dicts) & _is("name", list(META_NAMES), dicts)}
    masks = base.select(**{k: c if keep is None else c & keep for k, c in conds.items()})
    if not masks["gpu"].any():
        work = x & _is("cat", ["cpu_op", *RUNTIME_CATS], dicts)
        _program_work(path, base, masks["host"], work if keep is None else work & keep, counts)
    cols: dict[str, dict[str, pl.Series]] = {k: {} for k in _SLICE_COLS}
    # the host and GPU rows' category as the model holds it (Categorical): the dictionary coded once, then gathered
    # (4-byte codes, not a 16-byte text view a row hashed again)
    coded = dicts["cat"].values.cast(pl.Categorical) if dicts is not None else None
    for c in base.columns:  # column by column, each freed once cut
        col = base.drop_in_place(c)
        for k, want in _SLICE_COLS.items():
            if c in want:
                got = col.filter(masks[k])
                if dicts is not None and c in dicts:
                    codes = coded if c == "cat" and k in ("host", "gpu") else dicts[c].values
                    got = take(codes, got).alias(c)
                cols[k][c] = got
        del col
    del masks
    ts_ns = ((ts - t0_us) * 1000).round().cast(pl.Int64)
    dur_ns = (dur.fill_null(0.0).clip(lower_bound=0.0) * 1000).round().cast(pl.Int64)
    out = {}
    for k in list(cols):  # each slice's µs columns freed once its ns columns are made
        f = pl.DataFrame(cols.pop(k))
        lf = None  # (each slice's columns in one query)
        if "dur_us" in f.columns:
            lf = f.lazy().with_columns(ts=ts_ns, dur=dur_ns).drop("ts_us", "dur_us").with_columns(
                end=pl.col("ts") + pl.col("dur"))
        elif "ts_us" in f.columns:
            lf = f.lazy().with_columns(ts=ts_ns).drop("ts_us")
        if k in ("host", "gpu"):
            lf = (f.lazy() if lf is None else lf).with_columns(ph=pl.lit("X"))  # a constant: never materialized
        out[k] = f if lf is None else lf.collect(**_IN_MEMORY)
    return out, t0_us, counts, fmt


def _scan_input(path: Path, max_bytes: int) -> tuple[fastscan.Events | None, bytes, list[str]]:
    """(Events, b"", warnings) from the C scanner fed as the input is read and gunzipped (never the whole
    document in memory), or (None, document, warnings) for the msgspec path: no C scanner, or an input
    only the old path takes (damaged gzip, UTF-16, repairs...; then read again whole)."""
    if not fastscan.available():
        return None, *_one_array(*d.read_bytes(path, max_bytes))
    job = d.take_prefetched(path, max_bytes)
    if hasattr(job, "wait"):  # the CLI's prefetch scanned it already (instream.Scan)
        try:
            fastscan.warm_up()  # (while the scan thread may still work: then at no cost)
            fast = fastscan.events(job.wait())
            if fast is not None:
                return fast, b"", job.stream.warnings
            del fast
            data, warnings = _one_array(*job.stream.fallback())
        finally:
            job.close()
        return fastscan.scan(data), data, warnings
    stream = job or d.open_stream(path, max_bytes)
    try:
        fast = fastscan.scan_stream(stream)
        if fast is not None and stream.complete:
            return fast, b"", stream.warnings
        del fast
        data, warnings = _one_array(*stream.fallback())
    finally:
        stream.close()
    return fastscan.scan(data), data, warnings


def _one_array(data: bytes, warnings: list[str]) -> tuple[bytes, list[str]]:
    """The document read whole, its top-level `traceEvents` arrays joined into one (`dupkeys`, said)."""
    data, why = dupkeys.one_event_array(data)
    return data, warnings + [why] if why else warnings


def _decode_msgspec(path: Path, data: bytes, warnings: list[str]) -> tuple:
    """The pure-Python path: msgspec structs (with repairs and salvage) -> base columns."""
    try:
        doc, w2 = d.decode(data, path)
    except TraceError:
        if warnings:  # the gzip stream was cut: say so rather than "invalid JSON"
            raise TraceError(f"{path}: truncated gzip file: no complete event could be recovered") from None
        raise
    warnings += w2
    evs = doc.traceEvents
    if not evs:
        raise TraceError(f"{path}: 'traceEvents' is empty: nothing to analyze")
    ev_args = d.column(evs, "args")
    base = pl.DataFrame({
        "ph": _series("ph", d.column(evs, "ph"), pl.String),
        "cat": _series("cat", d.column(evs, "cat"), pl.String),
        "name": _series("name", d.column(evs, "name"), pl.String),
        "pid": _ids(d.column(evs, "pid")),
        "tid": _ids(d.column(evs, "tid")),
        "ts_us": _series("ts_us", d.column(evs, "ts"), pl.Float64),
        "dur_us": _series("dur_us", d.column(evs, "dur"), pl.Float64),
        "nargs": _series("nargs", list(map(len, ev_args)), pl.UInt32),
    }).with_row_index("i")
    flow_rows = base.filter(pl.col("ph").is_in(["s", "f"]))["i"].to_list()
    flow_ids = list(itemgetter(*flow_rows)(evs)) if len(flow_rows) > 1 else [evs[i] for i in flow_rows]
    flow_ids = d.column(flow_ids, "id")  # only flows carry an id
    return doc, ev_args, base, flow_rows, flow_ids


def _with_args(f: pl.DataFrame) -> pl.Series:
    """The ids `i` of the rows of `f` with an args object (Series ops: no query)."""
    return f["i"].filter(f["nargs"] > 0)


def _to_int_expr(c: str) -> pl.Expr:
    return pl.col(c).cast(pl.Int64, strict=False)


def _first_set(df: pl.DataFrame, *parts: str | pl.Series | None) -> pl.Expr | pl.Series:
    """`pl.coalesce` of `parts` (columns of `df` by name, cast as `_to_int_expr` does, or Int64 Series) without
    the parts that hold no value and those after one that holds every value: with one part left, that column
    itself (its buffer shared, not copied: on traces whose events carry few args the usual case)."""
    kept: list[pl.Expr | pl.Series] = []
    for p in parts:
        s = df[p] if isinstance(p, str) else p
        if s is None or s.null_count() == s.len():
            continue
        kept.append(_to_int_expr(p) if isinstance(p, str) else p)
        if s.dtype == pl.Int64 and not s.null_count():  # (a cast of another type may make nulls)
            break
    if not kept:
        return pl.lit(None, pl.Int64)
    return kept[0] if len(kept) == 1 else pl.coalesce(kept)


def _share_equal(df: pl.DataFrame, pairs: dict[str, str]) -> pl.DataFrame:
    """`df` with each column `c` of `pairs` that equals column `pairs[c]` on every row made a view of it (polars
    buffers are shared, copied on write): a GPU activity's device and stream args repeat its pid and tid, and
    older traces copy the correlation into External id, so each held a second copy of those values."""
    if df.height < SMALL_ROWS:
        return df
    same = [df[other].alias(c) for c, other in pairs.items() if df[c].equals(df[other], check_dtypes=True)]
    return df.with_columns(same) if same else df


def _null_constants(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with each column that holds one value on every row made a constant (polars keeps a literal column
    unmaterialized through filters, sorts and slices: no buffer until a step asks for its values). Most args
    fields are absent from most traces (host: 9 of 30 columns on one without shapes or stacks: all null), and a
    single-process, single-GPU trace's host `pid` and GPU `pid`/`device` hold one number; each held a data
    buffer (and a validity bitmap) of the frame's height through the whole analysis (10 M events: ~350 MiB of
    null columns, ~100 MiB of such ids)."""
    if df.height < SMALL_ROWS:
        return df
    lits = []
    for c, s in zip(df.columns, df.get_columns(), strict=True):
        nulls = s.null_count()
        if nulls == df.height:
            lits.append(pl.lit(None, s.dtype).alias(c))
        elif not nulls and s.dtype.is_integer() and s.min() == s.max():  # (integers: exact, no NaN)
            lits.append(pl.lit(s.min(), s.dtype).alias(c))
    return df.with_columns(lits) if lits else df


def _ensure(df: pl.DataFrame, fields: dict[str, str], raw: tuple[str, ...] = ()) -> pl.DataFrame:
    missing = [c for c in fields if c not in df.columns]
    return df.with_columns([pl.lit(None, pl.Categorical if c in raw else pl.Int64).alias(c) for c in missing])


#: GPU args that name a place or a size: (key, lowest, bound, what stands in): whole numbers in [lowest, bound)
#: (None: int64's); a stream of -1 is Kineto's "no stream" (a device-wide cudaDeviceSynchronize)
_GPU_ID_ARGS: dict[str, tuple[str, int, int | None, str]] = {
    "a_device": ("device", 0, 2**31, "the event's pid is used"), "a_stream": ("stream", -1, None, "its tid"),
    "bytes": ("bytes", 0, None, "no size")}


def _unusable_gpu_args(gpu: pl.DataFrame, warnings: list[str]) -> None:
    """Say which GPU `device`, `stream` and memcpy `bytes` values are unusable (not a whole number in range: a
    string, a negative number), by field with counts, and what stands in for them."""
    found = []
    for col, (key, lo, hi, instead) in _GPU_ID_ARGS.items():
        if col not in gpu.columns or gpu[col].null_count() == gpu.height:
            continue
        v = _to_int(gpu[col])
        n = int((notnull(gpu[col]) & filled(isnull(v) | _out(v, lo, hi), True)).sum())
        if n:
            found.append(f"{key} x{n:,} ({instead})")
    if found:
        warnings.append("ignored GPU args values that are not a whole number in range (>= 0; a stream -1 is none): "
                        + ", ".join(found))


def _finish_gpu(gpu: pl.DataFrame, host: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    _unusable_gpu_args(gpu, warnings)
    gpu = gpu.lazy().with_columns(
        external_id=_first_set(gpu, "external_id", "external_id_old"),
        device=_first_set(gpu, _usable(gpu["a_device"], "a_device") if "a_device" in gpu.columns else None,
                          _usable(gpu["from_device"], "a_device"), "pid"),
        stream=_first_set(gpu, _usable(gpu["a_stream"], "a_stream"), "tid"),
        bytes=_usable(gpu["bytes"], "bytes"),
        blocks_per_sm=_to_float(gpu["blocks_per_sm"]),
        occupancy=_to_float(gpu["occupancy"]),
        correlation=_to_int_expr("correlation"),
        pg_ranks=gpu["pg_ranks"].cast(pl.String, strict=False) if gpu["pg_ranks"].dtype != pl.List
        else gpu["pg_ranks"].cast(pl.List(pl.String)).list.join(", "),
    ).drop("a_device", "a_stream", "external_id_old", "from_device", "ph", "nargs").collect(**_IN_MEMORY)
    # launch (runtime/driver call with the same correlation) and the op that made that call (the first such call:
    # is_first_distinct keeps the rows unique(keep="first") would, at a fraction of its cost)
    rt = (host.lazy().filter(pl.col("cat").is_in(RUNTIME_CATS) & pl.col("correlation").is_not_null())
          .select(pl.col("correlation").cast(pl.Int64), pl.col("i").alias("launch"), pl.col("op"),
                  pl.col("name").alias("launch_name"), pl.col("ts").alias("launch_ts"),
                  pl.col("end").alias("launch_end"), pl.col("tid").alias("launch_tid")).collect(**_IN_MEMORY))
    if gpu.height < SMALL_ROWS:  # a join costs fewer polars calls than the lookup below
        rt = rt.lazy().filter(pl.col("correlation").is_first_distinct())
        return _kinds(gpu.hstack(pick(gpu, "correlation").lazy().join(rt, on="correlation", how="left", maintain_order="left")
                                 .drop("correlation").collect(**CHAIN)), host)
    corr = rt["correlation"].to_numpy()
    if corr.size > 1 and not bool((corr[1:] > corr[:-1]).all()):  # (increasing: unique already, the common case)
        rt = rt.filter(pl.col("correlation").is_first_distinct())
        corr = rt["correlation"].to_numpy()
    # one row per GPU row (correlations are unique in `rt`), in its order, as a left join on correlation gives
    # it: `rt` gathered at each GPU row's match, set beside it (the wide frame not copied)
    gc = gpu["correlation"]  # (a null correlation matches nothing)
    at_ = locate(corr, gc.fill_null(0).to_numpy(), gc.is_null().to_numpy() if gc.null_count() else None)
    return _kinds(gpu.hstack(rt.drop("correlation").select(pl.all().gather(at_))), host)


def _kinds(gpu: pl.DataFrame, host: pl.DataFrame) -> pl.DataFrame:
    """`_finish_gpu`'s last steps, once each GPU row has its launch: the op of rows without one, the kind."""
    # no runtime row (out of window, or a format without launches): External id names the op when it
    # is not merely a copy of the correlation (pre-2.4 traces copy it); cpu ops are looked up for those ids only
    want = gpu.select(pl.col("external_id").filter(pl.col("op").is_null()
                                                   & (pl.col("external_id") != pl.col("correlation"))).unique())
    if want.height:
        ops = (host.lazy().filter((pl.col("cat") == "cpu_op") & pl.col("external_id").is_in(want["external_id"].implode()))
               .select(pl.col("external_id"), pl.col("i").alias("op_x")).collect(**_IN_MEMORY))
        ops = ops.filter(pl.col("external_id").is_first_distinct())
        gpu = gpu.join(ops, on="external_id", how="left", maintain_order="left").with_columns(
            op=pl.coalesce("op", pl.when(pl.col("external_id") != pl.col("correlation")).then(pl.col("op_x")))
        ).drop("op_x")
    comm = name_matches(gpu, COMM_KERNEL_RE)  # the regex on the few distinct kernel names, not on every row
    # (the kind as Categorical literals: codes without a hash a row; the launching call's name only makes `graph`)
    return gpu.lazy().with_columns(
        graph=name_matches(gpu, GRAPH_LAUNCH_RE, "launch_name").fill_null(False),
        kind=pl.when(pl.col("cat") == "gpu_memcpy").then(pl.lit("memcpy", pl.Categorical))
        .when(pl.col("cat") == "gpu_memset").then(pl.lit("memset", pl.Categorical))
        .when(pl.col("cat") == "cuda_sync").then(pl.lit("sync", pl.Categorical))
        .when(comm).then(pl.lit("comm", pl.Categorical))
        .otherwise(pl.lit("compute", pl.Categorical)),
    ).drop("launch_name").collect(**CHAIN)
    if gpu.select((pl.col("ts").diff() > 0).all()).item():  # strictly in time order already (one stream, say):
        return gpu.with_columns(pl.col("ts").set_sorted())  # the sort would move nothing but copy every column
    return gpu.sort("ts")




def _steps(host: pl.DataFrame, gpu: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    # the regex only on the names with its literal prefix (a prefix test is far cheaper on every host row)
    # (lazy chains here and in `_periods`: a small trace's load is mostly the fixed cost of each polars query; but
    # the prefix's rows are collected before the regex: one lazy query would merge the two filters)
    cpu = (host.lazy().filter(pl.col("cat").is_in(["user_annotation", "cpu_op"])
                              & pl.col("name").str.starts_with("ProfilerStep#")).select("name", "i", "ts", "end")
           .collect(**_IN_MEMORY))
    odd = cpu.filter(~pl.col("name").str.contains(STEP_RE))
    if odd.height:  # `ProfilerStep#-1`, `#+1`, `#x`: no step number the profiler writes (issue 33: dropped silently)
        warnings.append(f"ignored {odd.height:,} ProfilerStep annotations whose step number is not a whole number "
                        f">= 0 (e.g. {odd['name'][0][:40]!r}): their time belongs to no step")
        cpu = cpu.filter(pl.col("name").str.contains(STEP_RE))
    cpu = stepcheck.drop_zero_length(cpu, warnings)
    cpu = cpu.with_columns(step=pl.col("name").str.extract(STEP_RE).cast(pl.Int64, strict=False))
    huge = cpu["step"].null_count()
    if huge:
        warnings.append(f"ignored {huge:,} ProfilerStep annotations whose step number does not fit in 64 bits")
        cpu = cpu.filter(pl.col("step").is_not_null())
    cpu = (cpu.lazy().group_by("step").agg(pl.col("name").first(), pl.col("i").first().alias("host_idx"),
                                           pl.col("ts").min().alias("cpu_ts"), pl.col("end").max().alias("cpu_end"),
                                           ((pl.len() > 1) & (pl.col("ts").max() >= pl.col("end").min())).alias("_apart"))
           .sort("step").collect(**_IN_MEMORY))
    if cpu["_apart"].any():  # one number on spans that do not overlap (a step annotated on two threads overlaps itself)
        apart = cpu.filter("_apart")
        warnings.append(f"{apart.height:,} ProfilerStep numbers name more than one step at different times (e.g. "
                        f"{apart['name'][0][:40]!r}): each is analyzed as one step from its first start to its "
                        "last end")
    cpu = stepcheck.drop_trailing_empty(stepcheck.drop_displaced(omit(cpu, "_apart"), host, warnings), host, warnings)
    stepcheck.warn_overlaps(cpu, warnings)
    synthetic = cpu.height == 0
    if synthetic:
        lo = min(v for v in (host["ts"].min(), gpu["ts"].min() if gpu.height else None) if v is not None)
        hi = max(v for v in (host["end"].max(), gpu["end"].max() if gpu.height else None) if v is not None)
        cpu = stepcheck.inferred_steps(host, lo, warnings)
        if cpu is None:
            warnings.append("no ProfilerStep#N annotations: the whole trace is analyzed as one step")
            cpu = pl.DataFrame({"step": [0], "name": ["(whole trace)"], "host_idx": [None], "cpu_ts": [lo],
                                "cpu_end": [hi]}, schema_overrides={"host_idx": pl.UInt32})
    elif not cpu["cpu_ts"].is_sorted():
        warnings.append("ProfilerStep numbers are not in time order: step windows follow the time order")
    cpu = stepcheck.by_start(cpu)
    gpu = stepcheck.bounding(gpu, warnings)
    if gpu.height and "launch_ts" in gpu.columns:
        launched = (gpu.lazy().select("launch_ts", "launch_end", "ts", "end").filter(pl.col("launch_ts").is_not_null())
                    .sort("launch_ts")
                    .join_asof(cpu.lazy().select("step", "cpu_ts", "cpu_end").sort("cpu_ts"), left_on="launch_ts",
                               right_on="cpu_ts", strategy="backward")
                    .filter(pl.col("launch_ts") < pl.col("cpu_end"))
                    .group_by("step").agg(pl.col("ts").min().alias("gpu_ts"), pl.col("end").max().alias("gpu_end"),
                                          pl.col("launch_end").sort_by("ts").first().alias("_first_launch")))
        cpu = cpu.lazy().join(launched, on="step", how="left", maintain_order="left").collect(**_IN_MEMORY)
    else:
        cpu = cpu.with_columns(gpu_ts=pl.lit(None, pl.Int64), gpu_end=pl.lit(None, pl.Int64),
                               _first_launch=pl.lit(None, pl.Int64))
    # tb_plugin's device-side window: start = max(previous end, host start), end = max(host end, GPU end);
    # "previous" in time, and a step inside its predecessor's window is empty rather than negative
    cpu = cpu.lazy().with_columns(tb_end=pl.max_horizontal("cpu_end", "gpu_end")).with_columns(
        tb_ts=pl.min_horizontal(pl.max_horizontal("cpu_ts", pl.col("tb_end").shift(1)), "tb_end"),
    ).collect(**_IN_MEMORY)
    return _periods(cpu, gpu).lazy().with_columns(synthetic=pl.lit(synthetic)).sort("step").select(
        "step", "name", "host_idx", "cpu_ts", "cpu_end", "gpu_ts", "gpu_end", "ts", "end", "tb_ts", "tb_end",
        "synthetic").collect(**_IN_MEMORY)


#: launch latency onto an idle GPU when the trace has too few such launches to measure it: a few µs on current
#: NVIDIA/AMD GPUs (PEERS.md, DOMAIN.md §1); a first kernel that starts later than this after its launch waited
#: for work the trace does not hold
LAUNCH_LATENCY_NS = 20_000
MIN_LATENCY_SAMPLES = 5


def _periods(cpu: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Step periods [ts, end) that partition time: step N runs from its start to step N+1's start.

    A step starts when the host enters it, unless the GPU is still busy with earlier work then (the host runs
    ahead of a full queue): it then starts when that earlier work ends, and at the latest when its own first
    GPU work starts — where a CUDA event recorded at the step's start would fire. Earlier work is work launched
    before the recording (no launch record) or by an earlier step, and also work the trace does not hold: when
    the step's first kernel started later after its launch call returned than the trace's usual launch latency
    (median over kernels launched onto an idle GPU), the GPU was busy until that usual latency before the
    kernel's start. The first step opens on an idle GPU (the profiler's start-up, a host preamble with nothing
    queued): it keeps only the median idle the other steps have before their first GPU work. So no period holds
    GPU work queued before the recording, and on a GPU-bound loop the period is the GPU's step period. The last
    step ends at the end of its host span or of its GPU work, whichever is later."""
    if "gpu_ts" not in cpu.columns or isnull(cpu["gpu_ts"]).all() or gpu.height == 0:
        return cpu.with_columns(ts=pl.col("tb_ts"), end=pl.col("tb_end")).drop("_first_launch")
    work = (gpu.lazy().filter(pl.col("kind") != "sync").select("ts", "end", "launch_end").sort("ts")
            .with_columns(_busy_to=pl.col("end").cum_max()).collect(**_IN_MEMORY))
    # launch latency onto an idle GPU (from the launch call's return: a pageable copy works inside the call):
    # nothing earlier was still running when the launch call returned
    idle = pl.col("launch_end") > pl.col("_busy_to").shift(1).fill_null(pl.col("launch_end") - 1)
    n_idle, lat = work.select(idle.sum(), (pl.col("ts") - pl.col("launch_end")).filter(idle).median()).row(0)
    if n_idle < MIN_LATENCY_SAMPLES or lat is None:
        lat = LAUNCH_LATENCY_NS
    first = (cpu.lazy().select("step", pl.coalesce("gpu_ts", "cpu_ts").alias("_first")).sort("_first")
             .join_asof(work.lazy().select(pl.col("ts") + 1, "_busy_to"), left_on="_first", right_on="ts",
                        strategy="backward").select("step", "_busy_to"))
    unseen = (pl.col("gpu_ts") - int(lat)) if lat is not None else pl.lit(None, pl.Int64)
    unseen = pl.when(pl.col("_first_launch").is_not_null() & (unseen > pl.col("_first_launch"))).then(unseen)
    start = pl.max_horizontal("cpu_ts", "_busy_to", unseen)
    start = pl.when(pl.col("gpu_ts").is_not_null()).then(pl.min_horizontal(start, "gpu_ts")).otherwise(start)
    cpu = (cpu.lazy().join(first, on="step", how="left").sort("cpu_ts", "step", maintain_order=True)  # time order (step numbers may not be)
           .with_columns(ts=start).collect(**_IN_MEMORY))
    # the first recorded step opens on an idle GPU (the profiler's start-up, the host's preamble with nothing
    # queued): it keeps only as much idle before its first GPU work as the other steps have at their start
    lead = dropnull((cpu["gpu_ts"] - cpu["ts"]).slice(1))
    if lead.len() and cpu["gpu_ts"][0] is not None:
        first = max(int(cpu["ts"][0]), int(cpu["gpu_ts"][0]) - max(0, int(lead.median())))
        cpu = cpu.with_columns(ts=pl.when(pl.int_range(pl.len()) == 0).then(first).otherwise(pl.col("ts")))
    last_end = pl.max_horizontal("cpu_end", "gpu_end", "ts")
    return (cpu.lazy().with_columns(ts=pl.col("ts").cum_max())  # starts never go back in time
            .with_columns(end=pl.col("ts").shift(-1).fill_null(last_end)).drop("_busy_to", "_first_launch")
            .collect(**_IN_MEMORY))


def _meta(path: Path, doc: d.Doc, fmt: str, t0_us: float, counts: dict, warnings: list[str],
          steps: pl.DataFrame, rocm: bool, host: pl.DataFrame, gpu: pl.DataFrame) -> TraceMeta:
    dist = lenient.json_safe(doc.distributedInfo) if isinstance(doc.distributedInfo, dict) else {}
    for key in ("rank", "world_size"):  # (validated, else dropped: JSON and the job read them as numbers)
        raw = doc.distributedInfo.get(key) if dist else None
        if raw is not None and _int_or_none(raw) is None:
            warnings.append(f"distributedInfo.{key} {str(raw)[:40]!r} is not a whole number in [0, 2**31): ignored")
            dist[key] = None
    props = lenient.device_properties(doc.deviceProperties, warnings)
    rank = _int_or_none(dist.get("rank"))
    if rank is None:
        rank = path_rank(path)  # the file's or its folder's name (TorchTitan's rank<R>_trace.json, rank3/)
    versions = {k: v for k, v in {
        "cupti": doc.cupti_version, "cuda_runtime": doc.cuda_runtime_version, "cuda_driver": doc.cuda_driver_version,
        "hip_runtime": doc.hip_runtime_version, "hip_driver": doc.hip_driver_version,
        "roctracer": doc.roctracer_version, "nccl": dist.get("nccl_version"),
    }.items() if v is not None}
    options = {k: _flag(getattr(doc, k)) for k in ("record_shapes", "profile_memory", "with_stack",
                                                   "with_modules", "with_flops")}
    if not options["with_stack"] and counts.get("python_function", 0):
        options["with_stack"] = True
    backend = "rocm" if rocm else ("mtia" if counts.get("mtia_ccp_events") or counts.get("mtia_runtime")
                                   else ("cuda" if gpu.height else "cpu"))
    has_steps = not bool(steps["synthetic"][0])
    return TraceMeta(
        path=str(path), format=fmt, schema_version=doc.schemaVersion, trace_name=doc.traceName,
        base_time_ns=doc.baseTimeNanoseconds, t0_us=t0_us, device_properties=props, distributed=dist,
        rank=rank, world_size=_int_or_none(dist.get("world_size")), versions=versions, options=options,
        event_counts=counts, warnings=warnings, has_steps=has_steps, backend=backend,
    )


trace_files = d.trace_files


def input_files(path: str | Path) -> list[Path]:
    """The trace files a command-line input names: the file itself, a directory's trace files, or '-'
    (stdin). A missing path, a symlink loop or a directory without traces is a TraceError (one line, exit
    code 2); a FIFO or device is refused when it is read (`inputs.read_raw`), never opened here."""
    if str(path) == STDIN:
        return [Path(STDIN)]
    path = Path(path)
    st = check_path(path)
    if not stat.S_ISDIR(st.st_mode):
        return [path]
    files = trace_files(path)
    if not files:
        raise TraceError(f"{path}: directory holds no trace files (*.json, *.json.gz)")
    return files


def load(path: str | Path) -> Trace | Job:
    """Load one trace file, or every trace file of a directory (the ranks of one job)."""
    path = Path(path)
    files = input_files(path)
    if path.is_dir():
        traces = [load_file(f) for f in files]
        traces.sort(key=lambda t: (t.meta.rank is None, t.meta.rank or 0, t.meta.path))
        return Job(path=str(path), traces=traces)
    return load_file(files[0])
