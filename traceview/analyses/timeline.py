"""GPU busy/idle time: union over streams, HTA's temporal breakdown and idle-time split."""

from __future__ import annotations

import numpy as np
import polars as pl

from .intervals import merge

KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay (30 µs)
BUSY_KINDS = ["compute", "comm", "memcpy", "memset"]


def gpu_work(gpu: pl.DataFrame) -> pl.DataFrame:
    """GPU activities that occupy the device (not sync records)."""
    return gpu.filter(pl.col("kind").is_in(BUSY_KINDS))


def busy_per_window(gpu: pl.DataFrame, windows: pl.DataFrame, win: str = "step") -> pl.DataFrame:
    """Busy ns of each device inside each window: [device, win, busy] — of every device, or only of the
    window's own when `windows` has a `device` column (linear in windows then, e.g. one window set per rank).

    With B(t) = busy time before t (a cumulative sum over the merged intervals, read with an as-of
    join), the busy time in [a, b) is B(b) - B(a): linear, no cross join."""
    work = gpu_work(gpu)
    if work.height == 0:
        return pl.DataFrame(schema={"device": pl.Int64, win: pl.Int64, "busy": pl.Int64})
    merged = merge(work, ["device"])
    fast = _busy_arrays(merged, windows, win)
    if fast is not None:
        return fast
    m = (merged.sort("device", "ts")
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
            .sort("device", win))


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
                        win: windows[win].gather(pl.Series(np.concatenate(out_w), dtype=pl.UInt32)),
                        "busy": pl.Series(np.concatenate(out_busy), dtype=pl.Int64)})
    # windows sharing a key (per device) share one row, as a group-by over them
    return res.group_by("device", win).agg(pl.col("busy").sum()).sort("device", win)


def temporal_breakdown(gpu: pl.DataFrame) -> pl.DataFrame:
    """HTA's temporal breakdown per device, exact ns.

    span = last end - first start of the given GPU events; idle = span - union(all);
    compute = union(compute kernels); non_compute = union(all) - compute (comm, memcpy, memset, sync).
    Returns [device, span, idle, compute, non_compute] in ns.
    """
    if gpu.height == 0:
        return pl.DataFrame(schema={c: pl.Int64 for c in ("device", "span", "idle", "compute", "non_compute")})
    allm = merge(gpu, ["device"]).group_by("device").agg(
        (pl.col("end") - pl.col("ts")).sum().alias("busy"), pl.col("ts").min().alias("_lo"),
        pl.col("end").max().alias("_hi"))
    comp = merge(gpu.filter(pl.col("kind") == "compute"), ["device"]).group_by("device").agg(
        (pl.col("end") - pl.col("ts")).sum().alias("compute"))
    return (allm.join(comp, on="device", how="left").with_columns(pl.col("compute").fill_null(0))
            .select("device", (pl.col("_hi") - pl.col("_lo")).alias("span"),
                    (pl.col("_hi") - pl.col("_lo") - pl.col("busy")).alias("idle"), "compute",
                    (pl.col("busy") - pl.col("compute")).alias("non_compute"))
            .sort("device"))


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
    s = work.sort("device", "stream", "ts").with_columns(
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
    g = stream_gaps(gpu)
    if g.height == 0:
        return pl.DataFrame(schema={c: pl.Int64 for c in ("device", "stream", "host_wait", "kernel_wait",
                                                          "other", "idle")})
    return (g.group_by("device", "stream").agg([
        pl.col("gap").filter(pl.col("cause") == c).sum().alias(c) for c in ("host_wait", "kernel_wait", "other")])
        .with_columns(idle=pl.col("host_wait") + pl.col("kernel_wait") + pl.col("other")).sort("device", "stream"))
