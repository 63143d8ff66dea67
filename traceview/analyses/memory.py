"""Device memory over time from the trace's own `[memory]` events (`profile_memory=True`).

Each event is one caching-allocator allocation (bytes > 0) or free (bytes < 0) with the allocator's totals
after it (`Total Allocated`, `Total Reserved`); device type 1 is the GPU. Events carry host timestamps, so
they are assigned to the step whose host span holds them.
"""

from __future__ import annotations

import polars as pl

from ..frames import pick
from ..memo import per_windows
from ..model import Trace
from .names import starts_with_any
from .windows import host_step_of

GPU_DEVICE_TYPE = 1  # Kineto's `Device Type` of CUDA/HIP memory events (0 = CPU)
#: driver memory calls whose own time is the driver's work on the host (page tables, the device's implicit
#: synchronisation)
_DRIVER_WORK = ("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cuMemCreate", "cuMemRelease", "cuMemMap",
                "cuMemUnmap", "hipMalloc", "hipFree")
#: host calls that reach the driver: the caching allocator grew or released memory (with the stream-ordered
#: allocator's cudaMallocAsync/cudaFreeAsync)
DRIVER_ALLOC_RE = rf"^({'|'.join((*_DRIVER_WORK, 'cudaMallocAsync', 'cudaFreeAsync'))})(_v\d+)?$"
DRIVER_ALLOC_PREFIXES = ("cu", "hip")  # every name DRIVER_ALLOC_RE matches starts with one (tests check)
#: those whose own time is the driver's work: not the stream-ordered calls, a few µs each served from the pool
DRIVER_WORK_RE = rf"^({'|'.join(_DRIVER_WORK)})(_v\d+)?$"


@per_windows("step", "cpu_ts", "cpu_end")
def gpu_events(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """GPU memory events inside the steps' host spans: [step, ts, tid, bytes, total_allocated, total_reserved,
    device]. Once per (trace, host spans): the memory section and the memory-pressure rule both read them."""
    m = trace.memory.filter(pl.col("device_type") == GPU_DEVICE_TYPE)
    if m.height == 0 or steps.height == 0:
        return pl.DataFrame(schema={"step": pl.Int64, "ts": pl.Int64, "tid": pl.Int64, "bytes": pl.Int64,
                                    "total_allocated": pl.Int64, "total_reserved": pl.Int64, "device": pl.Int64})
    m = m.select("ts", "tid", "bytes", "total_allocated", "total_reserved", pl.col("device_id").alias("device"))
    m = m.sort("ts")
    if m["total_allocated"].null_count():  # (the running sums below cost 5x the sort: only where they fill)
        # old traces record no totals: allocated since the recording began, from the running sum of the events
        m = m.with_columns(total_allocated=pl.col("total_allocated").fill_null(
            pl.col("bytes").cum_sum().over("device")
            - pl.col("bytes").cum_sum().over("device").min().over("device").clip(upper_bound=0)))
    return host_step_of(m, steps, "ts").filter(pl.col("step").is_not_null()).sort("ts")


def per_step(ev: pl.DataFrame) -> pl.DataFrame:
    """[device, step, peak_allocated, peak_reserved, min_allocated, start_allocated, end_allocated, allocs,
    alloc_bytes, frees]."""
    return (ev.group_by("device", "step").agg(
        pl.col("total_allocated").max().alias("peak_allocated"), pl.col("total_reserved").max().alias("peak_reserved"),
        pl.col("total_allocated").min().alias("min_allocated"),
        (pl.col("total_allocated").first() - pl.col("bytes").first()).alias("start_allocated"),
        pl.col("total_allocated").last().alias("end_allocated"),
        (pl.col("bytes") > 0).sum().alias("allocs"), pl.col("bytes").clip(lower_bound=0).sum().alias("alloc_bytes"),
        (pl.col("bytes") < 0).sum().alias("frees"))
        .sort("device", "step", maintain_order=True))


@per_windows("step", "cpu_ts", "cpu_end")
def step_summary(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """`per_step` of `gpu_events(trace, steps)`, once per (trace, host spans): the memory section and the
    memory-pressure rule both read it."""
    return per_step(gpu_events(trace, steps))


def timeline(ev: pl.DataFrame, steps: pl.DataFrame, points: int = 50) -> pl.DataFrame:
    """Allocated and reserved over time, at most `points` per step and device (the maximum of each slice of
    the step's host span, so peaks survive): [device, step, ts, allocated, reserved]."""
    w = steps.select("step", pl.col("cpu_ts").alias("_a"), pl.col("cpu_end").alias("_b"))
    e = ev.join(w, on="step").with_columns(
        _k=((pl.col("ts") - pl.col("_a")) * points // (pl.col("_b") - pl.col("_a")).clip(lower_bound=1)).clip(0, points - 1))
    return (e.group_by("device", "step", "_k").agg(pl.col("ts").min(), pl.col("total_allocated").max().alias("allocated"),
                                                  pl.col("total_reserved").max().alias("reserved"))
            .sort("device", "step", "ts", maintain_order=True).drop("_k"))


def peak_op(trace: Trace, ev: pl.DataFrame) -> dict | None:
    """The innermost op running when allocated memory peaked (on the allocating thread), with the time."""
    if ev.height == 0:
        return None
    # the first event at the highest total (a two-key sort of every event costs ~5 ms on a large trace)
    top = ev.filter(pl.col("total_allocated") == pl.col("total_allocated").max()).sort(
        "ts", maintain_order=True).row(0, named=True)
    ops = pick(trace.host, "cat", "tid", "ts", "end", "depth", "name").filter(
        (pl.col("cat") == "cpu_op") & (pl.col("tid") == top["tid"]) & (pl.col("ts") <= top["ts"])
        & (pl.col("end") >= top["ts"]))
    op = ops.sort(["depth", "ts"], descending=[True, True], maintain_order=True).head(1)
    return {"ts": int(top["ts"]), "step": int(top["step"]), "device": int(top["device"]),
            "allocated": int(top["total_allocated"]),
            "reserved": None if top["total_reserved"] is None else int(top["total_reserved"]),
            "op": op["name"][0] if op.height else None}


@per_windows("step", "cpu_ts", "cpu_end")
def driver_calls(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """cudaMalloc/cudaFree-like calls inside the steps' host spans: [i, name, ts, end, step]; once per (trace,
    host spans), as `gpu_events`."""
    # the regex only on names with its prefixes (its alternation defeats the regex engine's own prefix search)
    h = (pick(trace.host, "i", "name", "ts", "end")  # the filters then copy these columns only
         .filter(starts_with_any("name", DRIVER_ALLOC_PREFIXES)))
    if h.height == 0:  # no call with a driver allocation's prefix (most traces): no regex, no step join
        return h.hstack([pl.Series("step", [], steps.schema["step"])])
    h = h.filter(pl.col("name").str.contains(DRIVER_ALLOC_RE))
    return host_step_of(h, steps, "ts").filter(pl.col("step").is_not_null())


def capacity(trace: Trace, device: int) -> int | None:
    """The device's memory (`totalGlobalMem` of deviceProperties), bytes."""
    for p in trace.meta.device_properties:
        if p.get("id", 0) == device and isinstance(p.get("totalGlobalMem"), int):
            return int(p["totalGlobalMem"])
    return None
