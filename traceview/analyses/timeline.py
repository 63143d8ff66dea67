"""GPU busy/idle time: union over streams, HTA's temporal breakdown and idle-time split."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..frames import filled, notnull, pick, take
from ..memo import per_windows
from ..model import Trace
from .intervals import merge

KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay (30 µs)
BUSY_KINDS = ["compute", "comm", "memcpy", "memset"]


def gpu_work(gpu: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """GPU activities that occupy the device (not sync records); lazy for a lazy frame."""
    return gpu.filter(pl.col("kind").is_in(BUSY_KINDS))


@per_windows("step", "ts", "end")
def step_busy(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """`busy_per_window` of the trace's GPU activity in step windows [step, ts, end]: [device, step, busy], once
    per (trace, windows) — the steps section and the profiler-cost estimate read the same windows when every
    step is complete."""
    return busy_per_window(trace.gpu, steps)


def busy_per_window(gpu: pl.DataFrame, windows: pl.DataFrame, win: str = "step") -> pl.DataFrame:
    """Busy ns of each device inside each window: [device, win, busy] — of every device, or only of the
    window's own when `windows` has a `device` column (linear in windows then, e.g. one window set per rank).

    With B(t) = busy time before t (a cumulative sum over the merged intervals, read with an as-of
    join), the busy time in [a, b) is B(b) - B(a): linear, no cross join."""
    work = gpu_work(pick(gpu, "kind", "device", "ts", "end"))  # (a filter copies every column it has)
    if work.height == 0:
        return pl.DataFrame(schema={"device": pl.Int64, win: pl.Int64, "busy": pl.Int64})
    merged = merge(work, ["device"])
    fast = _busy_arrays(merged, windows, win)
    if fast is not None:
        return fast
    m = (merged.sort("device", "ts", maintain_order=True)
         .with_columns(_before=(pl.col("end") - pl.col("ts")).cum_sum().over("device") - (pl.col("end") - pl.col("ts"))))
    own = ["device"] if "device" in windows.columns else []  # windows of one device each: no cross join
    q = pl.concat([windows.select(win, *own, pl.col("ts").alias("t"), pl.lit(-1).alias("_sign")),
                   windows.select(win, *own, pl.col("end").alias("t"), pl.lit(1).alias("_sign"))])
    q = (q if own else q.join(m.select("device").unique(), how="cross")).sort("t")
    b = q.join_asof(m.sort("ts"), left_on="t", right_on="ts", by="device", strategy="backward",
                    check_sortedness=False)
    b = b.with_columns(_B=pl.when(pl.col("ts").is_null()).then(0)
                       .otherwise(pl.col("_before") + pl.min_horizontal("t", "end") - pl.col("ts")))
    return (b.group_by("device", win).agg((pl.col("_B") * pl.col("_sign")).sum().alias("busy"))
            .sort("device", win, maintain_order=True))


def _busy_arrays(m: pl.DataFrame, windows: pl.DataFrame, win: str) -> pl.DataFrame | None:
    """`busy_per_window` on numpy arrays (one binary search per window end and device, a handful of polars
    calls however many devices and windows); None when a value is null (the frame path handles those)."""
    own = "device" in windows.columns
    cols = [m["device"], m["ts"], m["end"], windows[win], windows["ts"], windows["end"],
            *([windows["device"]] if own else [])]
    if any(c.null_count() for c in cols):
        return None
    d, s, e = m["device"].to_numpy(), m["ts"].to_numpy(), m["end"].to_numpy()
    o = np.lexsort((s, d))
    d, s, e = d[o], s[o], e[o]
    before = np.cumsum(e - s) - (e - s)  # busy time of the device before each merged interval (offset below)
    devs, first = np.unique(d, return_index=True)
    last = np.append(first[1:], d.size)
    a, b = windows["ts"].to_numpy(), windows["end"].to_numpy()
    wdev = windows["device"].to_numpy() if own else None
    out_dev, out_w, out_busy = [], [], []
    for k, dev in enumerate(devs.tolist()):  # one per device (or rank): a handful
        lo, hi = int(first[k]), int(last[k])
        sd, ed, bd = s[lo:hi], e[lo:hi], before[lo:hi] - before[lo]

        def busy_before(t: np.ndarray, sd=sd, ed=ed, bd=bd) -> np.ndarray:
            j = np.searchsorted(sd, t, side="right") - 1
            jj = np.maximum(j, 0)
            return np.where(j >= 0, bd[jj] + np.minimum(t, ed[jj]) - sd[jj], 0)

        at = np.flatnonzero(wdev == dev) if own else np.arange(a.size)
        out_dev.append(np.full(at.size, dev, d.dtype))
        out_w.append(at)
        out_busy.append(busy_before(b[at]) - busy_before(a[at]))
    if own:  # windows of devices without work: nothing busy
        rest = np.flatnonzero(~np.isin(wdev, devs))
        out_dev.append(wdev[rest])
        out_w.append(rest)
        out_busy.append(np.zeros(rest.size, np.int64))
    res = pl.DataFrame({"device": pl.Series(np.concatenate(out_dev), dtype=m.schema["device"]),
                        win: take(windows[win], pl.Series(np.concatenate(out_w), dtype=pl.UInt32)),
                        "busy": pl.Series(np.concatenate(out_busy), dtype=pl.Int64)})
    # windows sharing a key (per device) share one row, as a group-by over them
    return res.group_by("device", win).agg(pl.col("busy").sum()).sort("device", win, maintain_order=True)


def temporal_breakdown(gpu: pl.DataFrame) -> pl.DataFrame:
    """HTA's temporal breakdown per device, exact ns.

    span = last end - first start of the given GPU events; idle = span - union(all);
    compute = union(compute kernels); non_compute = union(all) - compute (comm, memcpy, memset, sync).
    Returns [device, span, idle, compute, non_compute] in ns.
    """
    if gpu.height == 0:
        return pl.DataFrame(schema={c: pl.Int64 for c in ("device", "span", "idle", "compute", "non_compute")})
    allm, comp = merge(gpu, ["device"]), merge(gpu.filter(pl.col("kind") == "compute"), ["device"])
    if not allm["device"].null_count() and not comp["device"].null_count():
        return _temporal_arrays(allm, comp)
    allm = allm.group_by("device").agg(
        (pl.col("end") - pl.col("ts")).sum().alias("busy"), pl.col("ts").min().alias("_lo"),
        pl.col("end").max().alias("_hi"))
    comp = comp.group_by("device").agg(
        (pl.col("end") - pl.col("ts")).sum().alias("compute"))
    return (allm.join(comp, on="device", how="left").with_columns(pl.col("compute").fill_null(0))
            .select("device", (pl.col("_hi") - pl.col("_lo")).alias("span"),
                    (pl.col("_hi") - pl.col("_lo") - pl.col("busy")).alias("idle"), "compute",
                    (pl.col("busy") - pl.col("compute")).alias("non_compute"))
            .sort("device"))


def _temporal_arrays(allm: pl.DataFrame, comp: pl.DataFrame) -> pl.DataFrame:
    """`temporal_breakdown`'s sums over the merged intervals on arrays (exact: int64 throughout)."""
    d = allm["device"].to_numpy()
    s, e = allm["ts"].to_numpy().astype(np.int64), allm["end"].to_numpy().astype(np.int64)
    devs, inv = np.unique(d, return_inverse=True)
    busy = np.zeros(devs.size, np.int64)
    lo, hi = np.full(devs.size, np.iinfo(np.int64).max), np.full(devs.size, np.iinfo(np.int64).min)
    np.add.at(busy, inv, e - s)
    np.minimum.at(lo, inv, s)
    np.maximum.at(hi, inv, e)
    compute = np.zeros(devs.size, np.int64)
    if comp.height:  # a compute interval lies inside the device's merged intervals: its device is in devs
        np.add.at(compute, np.searchsorted(devs, comp["device"].to_numpy()),
                  comp["end"].to_numpy().astype(np.int64) - comp["ts"].to_numpy().astype(np.int64))
    span = hi - lo
    return pl.DataFrame({"device": pl.Series(devs, dtype=allm.schema["device"]), "span": span, "idle": span - busy,
                         "compute": compute, "non_compute": busy - compute},
                        schema={"device": allm.schema["device"], "span": pl.Int64, "idle": pl.Int64,
                                "compute": pl.Int64, "non_compute": pl.Int64})


def stream_gaps(gpu: pl.DataFrame) -> pl.DataFrame:
    """Idle gaps between consecutive activities of each stream, with HTA's cause.

    host_wait: the next activity's launch call began after the previous activity ended (the CPU
    was late, the queue was empty); kernel_wait: otherwise, gap < 30 µs; other: the rest.
    Returns one row per activity that follows a gap: [device, stream, gap_ts, gap_end, gap, cause,
    launch_ts, i, name, op].
    """
    work = gpu_work(gpu)
    if work.height == 0:
        return pl.DataFrame(schema={"device": pl.Int64, "stream": pl.Int64, "gap_ts": pl.Int64,
                                    "gap_end": pl.Int64, "gap": pl.Int64, "cause": pl.String})
    s = work.sort("device", "stream", "ts", maintain_order=True).with_columns(
        gap_ts=pl.col("end").shift().over("device", "stream"))
    s = s.filter(pl.col("gap_ts").is_not_null() & (pl.col("ts") > pl.col("gap_ts")))
    return s.with_columns(
        gap_end=pl.col("ts"), gap=pl.col("ts") - pl.col("gap_ts"),
        cause=pl.when(pl.col("launch_ts").is_not_null() & (pl.col("launch_ts") > pl.col("gap_ts")))
        .then(pl.lit("host_wait"))
        .when((pl.col("ts") - pl.col("gap_ts")) < KERNEL_WAIT_NS).then(pl.lit("kernel_wait"))
        .otherwise(pl.lit("other")),
    ).select("device", "stream", "gap_ts", "gap_end", "gap", "cause", "launch_ts", "i", "name", "op")


def idle_breakdown(gpu: pl.DataFrame) -> pl.DataFrame:
    """Per (device, stream): idle ns by cause [device, stream, host_wait, kernel_wait, other, idle]."""
    empty = pl.DataFrame(schema={c: pl.Int64 for c in ("device", "stream", "host_wait", "kernel_wait", "other",
                                                       "idle")})
    work = gpu_work(gpu)
    if work.height and not any(work[c].null_count() for c in ("device", "stream", "ts", "end")):
        out = _idle_arrays(work)
        return out if out.height else empty
    g = stream_gaps(work)
    if g.height == 0:
        return empty
    return (g.group_by("device", "stream").agg([
        pl.col("gap").filter(pl.col("cause") == c).sum().alias(c) for c in ("host_wait", "kernel_wait", "other")])
        .with_columns(idle=pl.col("host_wait") + pl.col("kernel_wait") + pl.col("other")).sort("device", "stream", maintain_order=True))


def _idle_arrays(work: pl.DataFrame) -> pl.DataFrame:
    """`idle_breakdown` of occupying activities without nulls, on arrays: a stable sort by (device, stream,
    ts), each activity's gap after the previous one of its stream, sums per stream (`stream_gaps`' causes)."""
    dv, st = work["device"].to_numpy(), work["stream"].to_numpy()
    ts, end = work["ts"].to_numpy().astype(np.int64), work["end"].to_numpy().astype(np.int64)
    o = np.lexsort((ts, st, dv))
    dv, st, ts, end = dv[o], st[o], ts[o], end[o]
    has_launch = notnull(work["launch_ts"]).to_numpy()[o][1:]
    launch = filled(work["launch_ts"], 0).to_numpy().astype(np.int64)[o][1:]
    prev_end, nxt = end[:-1], ts[1:]
    keep = (dv[1:] == dv[:-1]) & (st[1:] == st[:-1]) & (nxt > prev_end)
    gap = (nxt - prev_end)[keep]
    host = (has_launch & (launch > prev_end))[keep]
    kern = ~host & (gap < KERNEL_WAIT_NS)
    kd, ks = dv[1:][keep], st[1:][keep]
    at = np.flatnonzero(np.r_[True, (kd[1:] != kd[:-1]) | (ks[1:] != ks[:-1])]) if gap.size else np.zeros(0, np.int64)

    def per_stream(x: np.ndarray) -> np.ndarray:
        return np.add.reduceat(x, at) if at.size else np.zeros(0, np.int64)

    hw, kw = per_stream(np.where(host, gap, 0)), per_stream(np.where(kern, gap, 0))
    ot = per_stream(np.where(~host & ~kern, gap, 0))
    return pl.DataFrame({"device": kd[at], "stream": ks[at], "host_wait": hw, "kernel_wait": kw, "other": ot,
                         "idle": hw + kw + ot},
                        schema={"device": work.schema["device"], "stream": work.schema["stream"],
                                "host_wait": pl.Int64, "kernel_wait": pl.Int64, "other": pl.Int64, "idle": pl.Int64})
