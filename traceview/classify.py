"""The bottleneck classifier: every instant of each step gets exactly one class.

Classes, highest priority first (a higher class wins when several apply at one instant):

1. `gpu_compute` — a kernel runs whose roofline estimate is compute-bound (`roofline.kernel_bound`);
2. `gpu_memory` — a memory-bound kernel, a memcpy or a memset runs (the GPU is busy moving bytes);
3. `communication` — only NCCL/RCCL kernels run: *exposed* communication (not overlapped by compute);
4. `input` — the GPU idles while the host is inside the DataLoader (`enumerate(DataLoader)#…__next__`);
5. `host_sync` — the GPU idles after the host blocked in a sync (cudaStreamSynchronize, cudaDeviceSynchronize,
   cudaEventSynchronize, synchronous cudaMemcpy, `cuda_sync` events, HIP twins): from the sync call's
   start until the next GPU activity begins — the queue drained because the host waited;
6. `cpu_launch` — the GPU idles and the next GPU activity's launch call started only after the GPU had
   gone idle (HTA's `host_wait`: the CPU was late dispatching and launching; queue empty). The idle tail of
   the analysed window after the last GPU activity also counts here (nothing was queued);
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

from .analyses.breakdown import DATALOADER_RE
from .analyses.intervals import merge
from .analyses.intervals import segments as _segments
from .analyses.roofline import kernel_bound as _kernel_bound
from .analyses.specs import trace_spec
from .analyses.timeline import gpu_work
from .memo import per_trace
from .model import Trace
from .units import us

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


def sync_calls(trace: Trace) -> pl.DataFrame:
    """Host calls that block on the GPU: [i, name, ts, end, op, tid].

    Runtime/driver calls by name, plus `cuda_sync` events whose runtime call is not in the trace (their
    host interval is the launch call when known, else the event itself)."""
    h = trace.host
    rt = h.filter(pl.col("cat").is_in(["cuda_runtime", "cuda_driver"]) & pl.col("name").str.contains(SYNC_RUNTIME_RE))
    rt = rt.select("i", "name", "ts", "end", "op", "tid")
    ev = trace.gpu.filter((pl.col("kind") == "sync") & pl.col("name").is_in(SYNC_EVENT_NAMES))
    ev = ev.filter(pl.col("launch").is_null() | ~pl.col("launch").is_in(rt["i"].implode()))
    ev = ev.join(h.select(pl.col("i").alias("launch"), pl.col("op").alias("_hop"), pl.col("tid").alias("_htid")),
                 on="launch", how="left")
    ev = ev.select(pl.coalesce("launch", "i").alias("i"), "name",
                   pl.coalesce("launch_ts", "ts").alias("ts"), pl.coalesce("launch_end", "end").alias("end"),
                   pl.col("_hop").alias("op"), pl.col("_htid").alias("tid"))
    return pl.concat([rt, ev], how="vertical_relaxed").unique("i").sort("ts")


def sync_windows(trace: Trace, syncs: pl.DataFrame | None = None) -> pl.DataFrame:
    """[i, ts, end, sync_end, next_ts]: from each sync's start to the first GPU activity after it returns."""
    syncs = sync_calls(trace) if syncs is None else syncs
    starts = gpu_work(trace.gpu).select(pl.col("ts").alias("next_ts")).unique().sort("next_ts")
    s = syncs.select("i", "ts", pl.col("end").alias("sync_end")).sort("sync_end")
    s = s.join_asof(starts, left_on="sync_end", right_on="next_ts", strategy="forward")
    return s.with_columns(end=pl.max_horizontal("sync_end", pl.col("next_ts").fill_null(pl.col("sync_end")))
                          ).select("i", "ts", "end", "sync_end", "next_ts")


def dataloader_spans(trace: Trace) -> pl.DataFrame:
    return trace.host.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"])
                             & pl.col("name").str.contains(DATALOADER_RE)).select("i", "name", "ts", "end", "tid")


def idle_gaps(trace: Trace, lo: int, hi: int) -> pl.DataFrame:
    """GPU idle gaps (no activity on any device) inside [lo, hi): [ts, end, launch_ts, late].

    `late`: the activity that ends the gap was launched after the gap began (HTA host_wait)."""
    work = gpu_work(trace.gpu)
    if work.height == 0:
        return pl.DataFrame({"ts": [lo], "end": [hi], "launch_ts": [None], "late": [True]},
                            schema={"ts": pl.Int64, "end": pl.Int64, "launch_ts": pl.Int64, "late": pl.Boolean})
    m = merge(work).sort("ts")
    first_launch = work.group_by("ts").agg(pl.col("launch_ts").min())
    gaps = m.select(pl.col("end").shift().alias("gts"), pl.col("ts").alias("gend"))
    gaps = gaps.with_columns(gts=pl.col("gts").fill_null(pl.lit(lo)))
    gaps = gaps.join(first_launch.rename({"ts": "gend"}), on="gend", how="left")
    tail = pl.DataFrame({"gts": [int(m["end"].max())], "gend": [hi], "launch_ts": [hi]},
                        schema={"gts": pl.Int64, "gend": pl.Int64, "launch_ts": pl.Int64})
    gaps = pl.concat([gaps, tail]).with_columns(ts=pl.col("gts").clip(lo, hi), end=pl.col("gend").clip(lo, hi))
    gaps = gaps.filter(pl.col("end") > pl.col("ts"))
    return gaps.select("ts", "end", "launch_ts",
                       late=(pl.col("launch_ts") > pl.col("gts")).fill_null(False))


def labelled_intervals(trace: Trace, lo: int, hi: int, kb: pl.DataFrame | None = None) -> pl.DataFrame:
    """[label, ts, end]: every interval that can claim an instant, before priorities are applied."""
    kb = kernel_bound(trace) if kb is None else kb
    work = gpu_work(trace.gpu).filter((pl.col("end") > lo) & (pl.col("ts") < hi))
    work = work.join(kb.select("i", "bound"), on="i", how="left")
    gpu = work.select(pl.when(pl.col("kind") == "comm").then(pl.lit("communication"))
                      .when((pl.col("kind") == "compute") & (pl.col("bound") == "compute")).then(pl.lit("gpu_compute"))
                      .otherwise(pl.lit("gpu_memory")).alias("label"), "ts", "end")
    sync = sync_windows(trace).select(pl.lit("host_sync").alias("label"), "ts", "end")
    inp = dataloader_spans(trace).select(pl.lit("input").alias("label"), "ts", "end")
    gaps = idle_gaps(trace, lo, hi).select(
        pl.when(pl.col("late")).then(pl.lit("cpu_launch"))
        .when(pl.col("end") - pl.col("ts") > QUEUED_IDLE_NS).then(pl.lit(_QUEUED))
        .otherwise(pl.lit("other_idle")).alias("label"), "ts", "end")
    out = pl.concat([gpu, sync, inp, gaps], how="vertical_relaxed")
    return out.filter((pl.col("end") > lo) & (pl.col("ts") < hi))


def segments(intervals: pl.DataFrame, priorities: list[str], windows: pl.DataFrame, other: str,
             win: str = "step") -> pl.DataFrame:
    """Elementary segments [win, ts, end, cls]: see `intervals.segments`."""
    return _segments(intervals, priorities, windows, other, win).sort("ts")


def partition(trace: Trace, steps: pl.DataFrame, kb: pl.DataFrame | None = None) -> pl.DataFrame:
    """[step, ts, end, cls]: the elementary segments of every step window (ns); they tile each step.

    Cached per (trace, step windows) when `kb` is the trace's own (the default)."""
    if kb is None or kb is kernel_bound(trace):
        return _partition(trace, tuple(steps["step"]), tuple(steps["ts"]), tuple(steps["end"]))
    return _partition_uncached(trace, steps, kb)


@per_trace
def _partition(trace: Trace, step: tuple, ts: tuple, end: tuple) -> pl.DataFrame:
    steps = pl.DataFrame({"step": list(step), "ts": list(ts), "end": list(end)},
                         schema={"step": pl.Int64, "ts": pl.Int64, "end": pl.Int64})
    return _partition_uncached(trace, steps, kernel_bound(trace))


def _partition_uncached(trace: Trace, steps: pl.DataFrame, kb: pl.DataFrame) -> pl.DataFrame:
    windows = steps.select("step", "ts", "end")
    if windows.height == 0:
        return pl.DataFrame(schema={"step": pl.Int64, "ts": pl.Int64, "end": pl.Int64, "cls": pl.String})
    lo, hi = int(windows["ts"].min()), int(windows["end"].max())
    iv = labelled_intervals(trace, lo, hi, kb)
    prio = CLASSES[:-1]
    prio = [*prio[:prio.index("host_sync")], _QUEUED, *prio[prio.index("host_sync"):]]
    seg = segments(iv, prio, windows, CLASSES[-1])
    return seg.with_columns(cls=pl.when(pl.col("cls") == _QUEUED).then(pl.lit("other_idle")).otherwise("cls"))


def shares(part: pl.DataFrame, by: str | None = "step") -> pl.DataFrame:
    """Time per class [by?, cls, dur] of a partition."""
    keys = [by, "cls"] if by else ["cls"]
    return part.group_by(keys).agg((pl.col("end") - pl.col("ts")).sum().alias("dur")).sort(keys)


def _entry(rows: dict[str, int]) -> dict:
    total = sum(rows.values())
    sh = {c: (round(100.0 * rows.get(c, 0) / total, 2) if total else 0.0) for c in CLASSES}
    dominant = max(CLASSES, key=lambda c: (rows.get(c, 0), -CLASSES.index(c))) if total else None
    return {"dominant": dominant, "shares": sh, "time_us": {c: us(rows.get(c, 0)) for c in CLASSES},
            "window_us": us(total)}


def classification(trace: Trace, steps: pl.DataFrame, part: pl.DataFrame | None = None,
                   kb: pl.DataFrame | None = None) -> dict:
    """{dominant, shares (% of the analysed window), time_us, window_us, steps: [{step, dominant, shares}],
    device, roofline} — the verdict for the trace and for each step."""
    kb = kernel_bound(trace) if kb is None else kb
    part = partition(trace, steps, kb) if part is None else part
    per = shares(part)
    whole = dict(zip(*shares(part, None).select("cls", "dur").to_dict(as_series=False).values(), strict=True))
    out = _entry(whole)
    step_rows = []
    for s in steps["step"].to_list():  # a handful of steps
        d = per.filter(pl.col("step") == s)
        e = _entry(dict(zip(d["cls"].to_list(), d["dur"].to_list(), strict=True)))
        step_rows.append({"step": s, **e})
    spec = trace_spec(trace.meta)
    src = kb.group_by("source").len()
    out.update(steps=step_rows, device=spec.name,
               roofline={"spec_known": spec.known, "kernels_by_shapes": int(src.filter(pl.col("source") == "shapes")["len"].sum()),
                         "kernels_by_name": int(src.filter(pl.col("source") == "name")["len"].sum())})
    return out
