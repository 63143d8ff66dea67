"""The bottleneck classifier: every instant of each step gets exactly one class.

Classes, highest priority first (a higher class wins when several apply at one instant):

1. `gpu_compute` — a kernel runs whose roofline estimate is compute-bound (`roofline.kernel_bound`);
2. `gpu_memory` — a memory-bound kernel, a memcpy or a memset runs (the GPU is busy moving bytes);
3. `communication` — only NCCL/RCCL kernels run: *exposed* communication (not overlapped by compute);
4. `input` — the GPU idles while the host is inside the DataLoader (`enumerate(DataLoader)#…__next__`);
5. `host_sync` — the GPU idles after the host blocked in a sync (cudaStreamSynchronize, cudaDeviceSynchronize,
   cudaEventSynchronize, synchronous cudaMemcpy, `cuda_sync` events, HIP twins): from the sync call's
   start until the next GPU activity begins — the queue drained because the host waited —, and the late-launch
   gaps after it until the queue is refilled, up to the lead the host had before the sync (`sync_ramps`);
6. `cpu_launch` — the GPU idles and the next GPU activity's launch call started only after the GPU had
   gone idle (HTA's `host_wait`: the CPU was late dispatching and launching; queue empty). The idle tail of
   the analysed window after the last GPU activity is not: nothing was launched after it (`other_idle`);
7. `other_idle` — any other idle instant (launch latency with work already queued, cross-stream waits,
   activities with no launch record). An idle gap over 1 ms that ends with work launched before it began
   is `other_idle` even inside a sync window or a launch gap: the queue was not empty, so the GPU waited
   for something the trace does not hold (work enqueued before recording began, another device, an event).

This is XProf's step attribution (github.com/openxla/xprof: device work wins; while the device idles the time goes to
what the host was doing) with tb_plugin's priority sweep, HTA's host-wait rule for launch gaps, and
TraceLens's exposed-communication definition. GPU instants are the union over all devices of the trace.
"""

from __future__ import annotations

import polars as pl

from ..engine import CHAIN, IN_MEMORY
from ..frames import members, pick
from ..memo import per_trace, per_windows
from ..model import Trace
from ..units import us
from .breakdown import DATALOADER_PREFIXES
from .features import COMPILE_RE
from .intervals import merge
from .intervals import segments as _segments
from .names import contains, starts_with_any
from .roofline import kernel_bound as _kernel_bound
from .rowid import join_by_id
from .specs import trace_spec
from .timeline import gpu_work
from .tree import ancestor_where

#: a GPU idle gap this long that ends with work launched before it began: the queue was not empty, so the GPU
#: waited for something the trace does not show (work enqueued before recording started — e.g. a collective
#: still waiting for another rank —, another device, a cross-stream event). It is `other_idle`, and a host
#: sync spanning it is not what idled the GPU.
QUEUED_IDLE_NS = 1_000_000
_QUEUED = "_queued_idle"

CLASSES = ["gpu_compute", "gpu_memory", "communication", "input", "host_sync", "cpu_launch", "other_idle"]
IDLE_CLASSES = ["input", "host_sync", "cpu_launch", "other_idle"]
SYNC_RUNTIME_RE = (r"^(cuda|hip)(Stream|Device|Event)Synchronize(_v\d+)?$|^cu(Ctx|Stream|Event)Synchronize(_v\d+)?$"
                   r"|^(cuda|hip)Memcpy(2D|3D)?(_v\d+)?$|^(cuda|hip)Memset(_v\d+)?$")
SYNC_EVENT_NAMES = ["Stream Sync", "Event Sync", "Context Sync"]  # `Stream Wait Event` does not block the host


@per_trace
def kernel_bound(trace: Trace) -> pl.DataFrame:
    """[i, op, op_name, category, flops, bytes, bpe, intensity, bound, source] per compute kernel (see roofline)."""
    return _kernel_bound(trace, trace_spec(trace.meta))


def host_span(trace: Trace) -> tuple[int, int]:
    """[first step's host start, last step's host end): host calls outside it — the warm-up before the
    recorded steps, the script's final `torch.cuda.synchronize()` and the profiler's stop after them — belong
    to no step."""
    st = trace.steps
    return int(st["cpu_ts"].min()), int(st["cpu_end"].max())


def sync_calls(trace: Trace, compilation: bool = False) -> pl.DataFrame:
    """Host calls that block on the GPU, made inside the steps' host span: [i, name, ts, end, op, tid]; those
    made by torch.compile's compilation/autotuning only with `compilation` (and then only those).

    Runtime/driver calls by name, plus `cuda_sync` events whose runtime call is not in the trace (their
    host interval is the launch call when known, else the event itself). Computed once per trace (the
    classifier, the host-sync rule and every what-if of a kernel fix ask)."""
    return _sync_calls(trace, compilation)


@per_trace
def _sync_calls(trace: Trace, compilation: bool) -> pl.DataFrame:
    out, inside = _all_syncs(trace)
    return out.filter(inside == compilation)


@per_trace
def _all_syncs(trace: Trace) -> tuple[pl.DataFrame, pl.Series]:
    """Every sync call in the host span, by start, and which of them compilation made (both `sync_calls`
    variants read them: one search for the compiler's spans)."""
    h = trace.host
    # the regex only on the runtime calls
    rt = (h[["i", "cat", "name", "ts", "end", "op", "tid"]].lazy().filter(pl.col("cat").is_in(["cuda_runtime", "cuda_driver"]))
          .filter(contains(h, SYNC_RUNTIME_RE)).drop("cat").collect(**CHAIN))  # (on the distinct names)
    ev = trace.gpu[["i", "kind", "name", "launch", "launch_ts", "launch_end", "ts", "end"]].filter(
        (pl.col("kind") == "sync") & pl.col("name").is_in(SYNC_EVENT_NAMES))
    if rt.height == 0 and ev.height == 0:  # no sync call (a common case): nothing to join, merge or search
        return rt, pl.Series("i", [], pl.Boolean)
    ev = ev.filter(pl.col("launch").is_null() | ~pl.col("launch").is_in(members(rt["i"])))
    ev = join_by_id(ev, "launch", h, pl.col("op").alias("_hop"), pl.col("tid").alias("_htid"))
    ev = ev.lazy().select(pl.coalesce("launch", "i").alias("i"), "name",
                          pl.coalesce("launch_ts", "ts").alias("ts"), pl.coalesce("launch_end", "end").alias("end"),
                          pl.col("_hop").alias("op"), pl.col("_htid").alias("tid"))
    lo, hi = host_span(trace)
    out = pl.concat([rt.lazy(), ev], how="vertical_relaxed").unique("i")
    out = out.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi)).sort("ts").collect(**CHAIN)
    inside = compile_syncs(trace, out)
    return out, out["i"].is_in(members(inside))


def compile_syncs(trace: Trace, syncs: pl.DataFrame) -> pl.Series:
    """Ids of the syncs made inside Dynamo/Inductor compilation or autotuning (a `dynamo_timed` span,
    `entire_frame_compile`, `CachingAutotuner.benchmark_all_configs`, ...): the compiler's, not the loop's."""
    if syncs.height == 0:
        return pl.Series("i", [], pl.UInt32)
    anc = ancestor_where(trace.host, syncs, pl.col("name").str.contains(COMPILE_RE).fill_null(False), "_c")
    return anc.filter(pl.col("_c").is_not_null())["i"]


def sync_windows(trace: Trace, syncs: pl.DataFrame | None = None) -> pl.DataFrame:
    """[i, ts, end, sync_end, next_ts]: from each sync's start to the first GPU activity after it returns (the
    GPU relaunch the sync forces; on GPU-bound loops this equals the measured saving of removing the syncs:
    collected2 train_gradnorm_item_b32/b64, 12.4 % / 8.8 % against 13.7 % / 8.9 % measured)."""
    if syncs is None:
        return _all_sync_windows(trace)
    return _sync_windows(trace, syncs)


@per_trace
def _all_sync_windows(trace: Trace) -> pl.DataFrame:
    """`sync_windows` of every sync call: asked for by each partition and by the sync ramps."""
    return _sync_windows(trace, sync_calls(trace))


@per_trace
def _gpu_starts(trace: Trace) -> pl.DataFrame:
    return gpu_work(pick(trace.gpu, "kind", "ts")).select(pl.col("ts").alias("next_ts")).unique().sort("next_ts")


def _sync_windows(trace: Trace, syncs: pl.DataFrame) -> pl.DataFrame:
    if syncs.height == 0:  # (the frame the join below gives for no sync, without its five calls)
        return pl.DataFrame(schema={"i": syncs.schema["i"], "ts": syncs.schema["ts"], "end": syncs.schema["end"],
                                    "sync_end": syncs.schema["end"], "next_ts": pl.Int64})
    starts = _gpu_starts(trace)
    s = syncs.select("i", "ts", pl.col("end").alias("sync_end")).sort("sync_end")
    s = s.join_asof(starts, left_on="sync_end", right_on="next_ts", strategy="forward")
    end = pl.max_horizontal("sync_end", pl.col("next_ts").fill_null(pl.col("sync_end")))
    return s.with_columns(end=end).select("i", "ts", "end", "sync_end", "next_ts")


@per_trace
def dataloader_spans(trace: Trace) -> pl.DataFrame:
    """DataLoader `__next__` spans in the steps' host span: [i, name, ts, end, tid]; once per trace (every
    partition and the input-bound rule ask)."""
    lo, hi = host_span(trace)
    # one query; DATALOADER_RE as its prefixes (a tenth of the regex's cost, tests/test_section_speedups.py)
    return (trace.host.lazy().select("i", "cat", "name", "ts", "end", "tid")
            .filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]) & (pl.col("ts") >= lo) & (pl.col("ts") < hi)
                    & starts_with_any("name", DATALOADER_PREFIXES))
            .drop("cat").collect(**IN_MEMORY))


def idle_gaps(trace: Trace, lo: int, hi: int) -> pl.DataFrame:
    """GPU idle gaps (no activity on any device) inside [lo, hi): [ts, end, launch_ts, tail, late].

    `late`: the activity that ends the gap was launched after the gap began (HTA host_wait); `tail`: the gap
    after the last GPU activity (no activity ends it)."""
    got = _gpu_gaps(trace)
    if got is None:
        return pl.DataFrame({"ts": [lo], "end": [hi], "launch_ts": [None], "tail": [True], "late": [False]},
                            schema={"ts": pl.Int64, "end": pl.Int64, "launch_ts": pl.Int64, "tail": pl.Boolean,
                                    "late": pl.Boolean})
    gaps, last_end = got
    tail = pl.DataFrame({"gts": [last_end], "gend": [hi], "launch_ts": [None], "tail": [True]},
                        schema={"gts": pl.Int64, "gend": pl.Int64, "launch_ts": pl.Int64, "tail": pl.Boolean})
    # (one query: a small trace's run is mostly polars' fixed cost per query)
    gaps = pl.concat([gaps.lazy().with_columns(gts=pl.col("gts").fill_null(pl.lit(lo))), tail.lazy()])
    gaps = gaps.with_columns(ts=pl.col("gts").clip(lo, hi), end=pl.col("gend").clip(lo, hi))
    gaps = gaps.filter(pl.col("end") > pl.col("ts"))
    # the tail after the last GPU activity ends with no launch: nothing was launched late, the host was busy
    # with something else (Python after the step, data, a sync)
    return gaps.select("ts", "end", "launch_ts", "tail",
                       late=(pl.col("launch_ts") > pl.col("gts")).fill_null(False)).collect(**CHAIN)


def _gpu_gaps(trace: Trace) -> tuple[pl.DataFrame, int] | None:
    """The gaps between the merged GPU activity [gts (null before the first), gend, launch_ts, tail] and the
    end of the last activity (None without GPU activity): the window-independent part of `idle_gaps`.
    Computed by each of its few readers (the partition, two rules' checks), not kept per trace: a frame of
    every gap, kept, sat under every later step's peak (10 M tiny events: ~77 MiB from the partition to the
    layer table), and a trace's GPU gaps take milliseconds (the 132 MB benchmark trace: 3 ms)."""
    work = gpu_work(pick(trace.gpu, "kind", "ts", "end", "launch_ts"))  # (a filter copies every column it has)
    if work.height == 0:
        return None
    m = merge(work)
    # one query (a small trace's run is mostly polars' fixed cost per query)
    first_launch = work.lazy().group_by("ts").agg(pl.col("launch_ts").min())
    gaps = m.lazy().sort("ts").select(pl.col("end").shift().alias("gts"), pl.col("ts").alias("gend"))
    gaps = gaps.join(first_launch.rename({"ts": "gend"}), on="gend", how="left")
    return gaps.with_columns(tail=pl.lit(False)).collect(**CHAIN), int(m["end"].max())


def sync_ramps(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """[i, ts, end]: the late-launch idle after each sync until the GPU queue is refilled, charged to the sync.

    After a sync the queue is empty and the host launches one op at a time, so the GPU idles between the first
    kernels (late launches) until the host is ahead again. Before the sync the host was ahead of the GPU by the
    time it then blocked (sync end - sync start): the sync cost at most that lead, so the late gaps after it —
    up to the first gap that ends with work queued before it began (the queue refilled) — are the sync's, up to
    a total of that lead. The rest of any late gap stays `cpu_launch` (the host is simply slower than the GPU)."""
    win = sync_windows(trace).filter(pl.col("next_ts").is_not_null())
    empty = pl.DataFrame(schema={"i": pl.UInt32, "ts": pl.Int64, "end": pl.Int64})
    if win.height == 0 or gaps.height == 0:
        return empty
    # two queries (a small trace's run is mostly polars' fixed cost per query; the gaps, read twice, once)
    g = gaps.lazy().sort("ts").with_columns(_queued=(~pl.col("late") & ~pl.col("tail")).cast(pl.Int64).cum_sum())
    g = g.collect(**CHAIN).lazy()
    w = (win.lazy().select("i", pl.col("end").alias("_wend"), (pl.col("sync_end") - pl.col("ts")).alias("_lead"))
         .sort("_wend")
         .join_asof(g.select(pl.col("ts").alias("_gts"), pl.col("_queued").alias("_q0")), left_on="_wend",
                    right_on="_gts", strategy="backward").with_columns(pl.col("_q0").fill_null(0)).drop("_gts"))
    late = g.filter(pl.col("late")).join_asof(w, left_on="ts", right_on="_wend", strategy="backward")
    late = late.filter(pl.col("i").is_not_null() & (pl.col("_queued") == pl.col("_q0")))
    late = late.with_columns(_d=pl.col("end") - pl.col("ts")).with_columns(_before=pl.col("_d").cum_sum().over("i") - pl.col("_d"))
    late = late.with_columns(_take=(pl.col("_lead") - pl.col("_before")).clip(0, None))
    late = late.with_columns(_take=pl.min_horizontal("_take", "_d")).filter(pl.col("_take") > 0)
    return late.select(pl.col("i").cast(pl.UInt32), "ts", (pl.col("ts") + pl.col("_take")).alias("end")).collect(**CHAIN)


#: the labels the sweep ranks, highest priority first: the classes but `other_idle` (where none is), with a long
#: idle gap with work queued (`_QUEUED`, reported as `other_idle`) above the host-side idle classes
PRIORITIES = [*CLASSES[:CLASSES.index("host_sync")], _QUEUED, *CLASSES[CLASSES.index("host_sync"):-1]]


def _rank(label: str) -> pl.Expr:
    return pl.lit(PRIORITIES.index(label), pl.Int32)


def labelled_intervals(trace: Trace, lo: int, hi: int, kb: pl.DataFrame | None = None) -> pl.LazyFrame:
    """[k, ts, end]: every interval that can claim an instant, before priorities are applied; k is its label's
    rank in PRIORITIES (the sweep reads ranks: no string column of every interval). A query: the sweep builds
    its rows (each part's filtered to [lo, hi) as it is built) and frees them once merged."""
    kb = kernel_bound(trace) if kb is None else kb
    inside = (pl.col("end") > lo) & (pl.col("ts") < hi)
    compute = members(kb.filter(pl.col("bound") == "compute")["i"])  # a kernel kb has not is memory-bound
    kind = pl.col("kind")
    gpu = gpu_work(trace.gpu.lazy().select("i", "kind", "ts", "end")).filter(inside).select(
        pl.when(kind == "comm").then(_rank("communication"))
        .when((kind == "compute") & pl.col("i").is_in(compute)).then(_rank("gpu_compute"))
        .otherwise(_rank("gpu_memory")).alias("k"), "ts", "end")
    idle = idle_gaps(trace, lo, hi)
    sync = pl.concat([pick(sync_windows(trace), "ts", "end"), pick(sync_ramps(trace, idle), "ts", "end")])
    sync = sync.lazy().select(_rank("host_sync").alias("k"), "ts", "end")
    inp = dataloader_spans(trace).lazy().select(_rank("input").alias("k"), "ts", "end")
    gaps = idle.lazy().select(
        pl.when(pl.col("late")).then(_rank("cpu_launch"))
        .when(pl.col("tail")).then(pl.lit(None, pl.Int32))
        .when(pl.col("end") - pl.col("ts") > QUEUED_IDLE_NS).then(_rank(_QUEUED))
        .otherwise(pl.lit(None, pl.Int32)).alias("k"), "ts", "end")
    # (gaps of no ranked label are `other_idle` by default: they claim nothing)
    return pl.concat([gpu, sync, inp, gaps.filter(pl.col("k").is_not_null())],
                     how="vertical_relaxed").filter(inside)


def segments(intervals: pl.DataFrame | pl.LazyFrame, priorities: list[str], windows: pl.DataFrame, other: str,
             win: str = "step", cls_dtype: pl.DataType = pl.String) -> pl.DataFrame:
    """Elementary segments [win, ts, end, cls], by start: see `intervals.segments` (whose segments already come
    by start: no sort)."""
    return _segments(intervals, priorities, windows, other, win, cls_dtype)


#: the classes as an Enum: `partition(..., enum=True)`'s class column
CLASS_ENUM = pl.Enum(CLASSES)


def partition(trace: Trace, steps: pl.DataFrame, kb: pl.DataFrame | None = None, *, keep: bool = True,
              enum: bool = False) -> pl.DataFrame:
    """[step, ts, end, cls]: the elementary segments of every step window (ns); they tile each step.

    Cached per (trace, step windows) when `kb` is the trace's own (the default) and `keep` (False: a caller that
    is its only reader, so it is freed with the caller's copy). `enum`: `cls` as `CLASS_ENUM`, a byte per segment
    instead of a string (16 bytes: at 10 M tiny events ~100 MB of the rules' context), for a reader that only
    compares and groups the classes (the cached partition is held so; others get a copy as strings)."""
    if keep and (kb is None or kb is kernel_bound(trace)):
        part = _partition(trace, steps)
        return part if enum else string_classes(part)
    return _partition_uncached(trace, steps, kernel_bound(trace) if kb is None else kb,
                               CLASS_ENUM if enum else pl.String)


def string_classes(part: pl.DataFrame | None) -> pl.DataFrame | None:
    """`part` with `cls` as strings (a partition handed to readers outside the trace's own analysis)."""
    if part is None or part.schema.get("cls") != CLASS_ENUM:
        return part
    return part.with_columns(pl.col("cls").cast(pl.String))


@per_windows("step", "ts", "end")
def _partition(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    return _partition_uncached(trace, steps, kernel_bound(trace), CLASS_ENUM)


def _partition_uncached(trace: Trace, steps: pl.DataFrame, kb: pl.DataFrame,
                        cls_dtype: pl.DataType = pl.String) -> pl.DataFrame:
    windows = pick(steps, "step", "ts", "end")
    if windows.height == 0:
        return pl.DataFrame(schema={"step": pl.Int64, "ts": pl.Int64, "end": pl.Int64, "cls": cls_dtype})
    lo, hi = int(windows["ts"].min()), int(windows["end"].max())
    iv = labelled_intervals(trace, lo, hi, kb)
    # the ranks' names in the segments: queued idle is reported as `other_idle`
    names = ["other_idle" if p == _QUEUED else p for p in PRIORITIES]
    return segments(iv, names, windows, CLASSES[-1], cls_dtype=cls_dtype)


def shares(part: pl.DataFrame, by: str | None = "step") -> pl.DataFrame:
    """Time per class [by?, cls, dur] of a partition."""
    keys = [by, "cls"] if by else ["cls"]
    # (by the classes' names, whatever the partition's type: an Enum sorts by its categories' order)
    return (part.lazy().group_by(keys).agg((pl.col("end") - pl.col("ts")).sum().alias("dur"))
            .with_columns(pl.col("cls").cast(pl.String)).sort(keys, maintain_order=True).collect(**CHAIN))  # (one query)


def _entry(rows: dict[str, int]) -> dict:
    total = sum(rows.values())
    sh = {c: (round(100.0 * rows.get(c, 0) / total, 2) if total else 0.0) for c in CLASSES}
    dominant = max(CLASSES, key=lambda c: (rows.get(c, 0), -CLASSES.index(c))) if total else None
    return {"dominant": dominant, "shares": sh, "time_us": {c: us(rows.get(c, 0)) for c in CLASSES},
            "window_us": us(total)}


def classification(trace: Trace, steps: pl.DataFrame, part: pl.DataFrame | None = None,
                   kb: pl.DataFrame | None = None, class_ns: pl.DataFrame | None = None) -> dict:
    """{dominant, shares (% of the analysed window), time_us, window_us, steps: [{step, dominant, shares}],
    device, roofline} — the verdict for the trace and for each step."""
    kb = kernel_bound(trace) if kb is None else kb
    part = partition(trace, steps, kb) if part is None else part
    # per step and class (a few hundred rows): the whole window's times are their sums (integers, exact)
    whole: dict[str, int] = {}
    by_step: dict[int, dict[str, int]] = {}
    for s, c, d in (shares(part) if class_ns is None else class_ns).iter_rows():  # (`class_ns`: a caller's shares(part))
        whole[c] = whole.get(c, 0) + d
        by_step.setdefault(s, {})[c] = d
    out = _entry(whole)
    step_rows = []
    for s in steps["step"].to_list():  # one entry per step
        e = _entry(by_step.get(s, {}))
        step_rows.append({"step": s, **e})
    spec = trace_spec(trace.meta)
    by_shapes, by_name = kb.select((pl.col("source") == "shapes").sum(), (pl.col("source") == "name").sum().alias("_n")).row(0)
    out.update(steps=step_rows, device=spec.name,
               roofline={"spec_known": spec.known, "kernels_by_shapes": int(by_shapes), "kernels_by_name": int(by_name)})
    return out
