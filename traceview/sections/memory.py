"""The `memory` report section: GPU memory over the analysed steps, read from the trace's own `[memory]`
events (recorded with `profile_memory=True`): allocated and reserved over time per step, the peak and the op
running at it, allocations per step, and the device's capacity from deviceProperties. None when the trace
has no GPU memory events."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analyses import memory as M
from .section import Section

SECTION = Section(
    keys=('memory',), computes="GPU memory over the analysed steps, from the trace's `[memory]` events",
    json_type='object\\|null', text=None, app_page='memory',
    json_doc="GPU memory from the trace's `[memory]` events (`profile_memory=True`), null without them: `source`, `devices` [{`device`, `capacity_gib` (deviceProperties `totalGlobalMem`), `peak_allocated_gib`, `peak_reserved_gib` (null in old traces without the total), `peak_reserved_pct_of_capacity`, `steps` [{`step`, `peak_allocated_gib`, `peak_reserved_gib`, `start_allocated_gib`, `end_allocated_gib`, `allocs`, `frees`, `alloc_gib`}], `timeline` {`step`, `ts_us`, `allocated_gib`, `reserved_gib`} (columns; at most 50 points per step, each the maximum of its slice of the step)}], `peak` {`step`, `device`, `op` (innermost op running at the allocated peak), `ts_us`, `allocated_gib`, `reserved_gib`}, `driver_alloc_calls`, `driver_alloc_us` (cudaMalloc/cudaFree-like calls inside the steps)",
)

GIB = 2**30


def _gib(b: float | None) -> float | None:
    return None if b is None else round(float(b) / GIB, 3)


def _gibs(s: pl.Series) -> list[float | None]:
    """`_gib` of every value (inline: the timeline holds up to 50 points per step and device)."""
    return [None if b is None else round(float(b) / GIB, 3) for b in s.to_list()]


def memory_section(trace, steps: pl.DataFrame, points: int = 50) -> dict[str, Any] | None:
    ev = M.gpu_events(trace, steps)
    if ev.height == 0:
        return None
    per = M.step_summary(trace, steps)
    tl = M.timeline(ev, steps, points)
    peak = M.peak_op(trace, ev)
    drv = M.driver_calls(trace, steps)
    devices = []
    for dev in sorted(per["device"].unique().to_list()):  # one per GPU: a handful
        p = per.filter(pl.col("device") == dev)
        cap = M.capacity(trace, dev)
        t = tl.filter(pl.col("device") == dev)
        pa, pr = p["peak_allocated"].max(), p["peak_reserved"].max()  # reserved: null in old traces
        devices.append({
            "device": dev, "capacity_gib": _gib(cap),
            "peak_allocated_gib": _gib(pa), "peak_reserved_gib": _gib(pr),
            "peak_reserved_pct_of_capacity": round(100.0 * pr / cap, 2) if cap and pr is not None else None,
            "steps": [{"step": r["step"], "peak_allocated_gib": _gib(r["peak_allocated"]),
                       "peak_reserved_gib": _gib(r["peak_reserved"]), "start_allocated_gib": _gib(r["start_allocated"]),
                       "end_allocated_gib": _gib(r["end_allocated"]), "allocs": r["allocs"], "frees": r["frees"],
                       "alloc_gib": _gib(r["alloc_bytes"])} for r in p.iter_rows(named=True)],
            "timeline": {"step": t["step"].to_list(), "ts_us": [round(x / 1000, 3) for x in t["ts"].to_list()],
                         "allocated_gib": _gibs(t["allocated"]), "reserved_gib": _gibs(t["reserved"])},
        })
    return {
        "source": "[memory] events (profile_memory=True)", "devices": devices,
        "peak": ({"step": peak["step"], "device": peak["device"], "op": peak["op"], "ts_us": round(peak["ts"] / 1000, 3),
                  "allocated_gib": _gib(peak["allocated"]), "reserved_gib": _gib(peak["reserved"])} if peak else None),
        "driver_alloc_calls": drv.height,
        "driver_alloc_us": round(float((drv["end"] - drv["ts"]).sum()) / 1000, 3) if drv.height else 0.0,
    }
