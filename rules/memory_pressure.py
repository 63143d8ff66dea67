"""TV302 memory-pressure: GPU memory near the device's capacity, fragmented, or grown and released per step.

## What it detects
From the trace's `[memory]` events (recorded with `profile_memory=True`) and the device's memory in
`deviceProperties`, per analysed step: (1) peak reserved memory at or above `near_capacity_pct` of the
device; (2) reserved memory at least `fragmentation_ratio` times the peak allocated memory and at least
`min_gap_gib` above it (the caching allocator holds blocks it cannot reuse); (3) the allocator going to the
driver inside the steps (`cudaMalloc`/`cudaFree` calls: after the first steps a steady loop should reuse its
cached blocks). Traces without memory events cannot be judged.

## Why it is slow
Near capacity, an allocation that finds no cached block makes the allocator free its cache
(`cudaFree`, which synchronises the device) and retry, and the next larger batch fails with out-of-memory.
Fragmentation wastes capacity the same way: the free memory is split into blocks too small for the
request. `cudaMalloc` and `cudaFree` cost tens of µs to ms of host time each, and `cudaFree` waits for the
GPU, which then idles until the host launches again.

## How to fix
Near capacity: activation checkpointing (`torch.utils.checkpoint`) on the large blocks, a smaller micro-batch
with gradient accumulation, bf16 activations, `set_to_none=True` gradients, fewer kept temporaries (no
lists of per-step tensors). Fragmentation or driver calls per step:
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` lets segments grow in place; keep shapes stable across
steps (pad/bucket variable lengths); avoid `torch.cuda.empty_cache()` inside the loop.

## Evidence
The device capacity, per step the peak allocated and reserved memory, allocations and frees and the bytes
allocated, the op running at the peak, the driver allocation calls and their host time. Savings = the GPU
idle time during the driver allocation calls inside the steps (the rest of the pressure is a risk, not a
measured cost: such findings are `info` unless memory is near capacity, then `warning`).
Savings (per step, unprofiled) are replayed: `fix_transform` takes the driver's allocation calls off the host path.

## Options
- `near_capacity_pct` (90.0): peak reserved share of device memory at which memory counts as near capacity.
- `fragmentation_ratio` (1.5): reserved / peak allocated at which the cache counts as fragmented.
- `min_gap_gib` (1.0): smallest reserved-minus-allocated gap (GiB) worth reporting as fragmentation.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, "CUDA semantics: memory management" (caching allocator, `expandable_segments`, `empty_cache`).
- PyTorch docs, `torch.utils.checkpoint`; `torch.profiler` `profile_memory`.
"""

from __future__ import annotations

import polars as pl

from traceview.analyses import memory as M
from traceview.analyses.replay import Transform
from traceview.analyses.whatif import EMPTY, gpu_idle_within, removed_per_step
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext

CODE = "TV302"
NAME = "memory-pressure"
SEVERITY = "warning"
CLASS = "host_sync"  # the classifier class whose time a fix of these findings removes
TITLE = "GPU memory pressure"
OPTIONS = {
    "near_capacity_pct": Option(90.0, "peak reserved share of device memory counted as near capacity"),
    "fragmentation_ratio": Option(1.5, "reserved / peak allocated counted as fragmentation"),
    "min_gap_gib": Option(1.0, "smallest reserved-minus-allocated gap (GiB) reported as fragmentation"),
    **XPROF_SEVERITY,
}
GIB = 2**30
FIXES = {
    "near_capacity": ("Peak reserved memory is close to the device's capacity: an allocation that finds no cached "
                      "block makes the allocator free its cache (cudaFree synchronises the device) and retry, and a "
                      "larger batch will not fit. Checkpoint activations of the large blocks "
                      "(torch.utils.checkpoint), use a smaller micro-batch with gradient accumulation, keep "
                      "activations in bf16, and drop kept temporaries."),
    "fragmentation": ("The caching allocator reserves far more than the tensors occupy: its free blocks are split "
                      "into pieces too small for the requests. Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                      "so segments grow in place, and keep tensor shapes stable across steps (pad or bucket "
                      "variable lengths)."),
    "driver_calls": ("The allocator calls the driver (cudaMalloc/cudaFree) inside the steps instead of reusing its "
                     "cached blocks; cudaFree waits for the GPU. Keep shapes stable across steps, do not call "
                     "torch.cuda.empty_cache() in the loop, and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."),
}
FIX = FIXES["near_capacity"]


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The GPU idle time during driver allocation calls inside the steps."""
    drv = M.driver_calls(ctx.trace, ctx.steps)
    return gpu_idle_within(ctx.trace, drv, ctx.lo, ctx.hi) if drv.height else EMPTY


def check(ctx: RuleContext) -> list[Finding]:
    ev = M.gpu_events(ctx.trace, ctx.steps)
    drv = M.driver_calls(ctx.trace, ctx.steps)
    if ev.height == 0 and drv.height == 0:
        return []
    o = ctx.options
    per = M.step_summary(ctx.trace, ctx.steps) if ev.height else pl.DataFrame()
    cases: list[str] = []
    devs = []
    for dev in (sorted(per["device"].unique().to_list()) if per.height else []):  # one per GPU
        p = per.filter(pl.col("device") == dev)
        cap = M.capacity(ctx.trace, dev)
        pa = int(p["peak_allocated"].max() or 0)
        pr = p["peak_reserved"].max()  # null in old traces that record no reserved total
        top = pa if pr is None else int(pr)
        near = bool(cap and 100.0 * top / cap >= o["near_capacity_pct"])
        frag = pr is not None and pr >= o["fragmentation_ratio"] * pa and (pr - pa) >= o["min_gap_gib"] * GIB
        cases += [c for c, on in (("near_capacity", near), ("fragmentation", frag)) if on and c not in cases]
        devs.append({"device": dev, "capacity_gib": round(cap / GIB, 3) if cap else None,
                     "peak_allocated_gib": round(pa / GIB, 3),
                     "peak_reserved_gib": round(pr / GIB, 3) if pr is not None else None,
                     "peak_pct_of_capacity": round(100.0 * top / cap, 2) if cap else None,
                     "allocs_per_step": round(float(p["allocs"].mean()), 1),
                     "alloc_gib_per_step": round(float(p["alloc_bytes"].mean()) / GIB, 3)})
    steps_with_calls = sorted(drv["step"].unique().to_list()) if drv.height else []
    if drv.height and steps_with_calls != [int(ctx.steps["step"].min())]:  # not only the first step's warm-up
        cases.append("driver_calls")
    if not cases:
        return []
    rem = removed_per_step(removes(ctx), ctx.steps) if "driver_calls" in cases else None
    savings = int(rem["removed"].sum()) if rem is not None else 0
    sev_pct = ctx.pct(savings)
    severity = None if sev_pct >= o["moderate_pct"] else ("warning" if "near_capacity" in cases else "info")
    evidence = {
        "cases": cases, "devices": devs, "peak": M.peak_op(ctx.trace, ev),
        "driver_alloc_calls": drv.height, "driver_alloc_steps": steps_with_calls,
        "driver_alloc_us": round(float((drv["end"] - drv["ts"]).sum()) / 1000, 3) if drv.height else 0.0,
    }
    titles = {"near_capacity": "GPU memory near capacity", "fragmentation": "GPU memory fragmented (reserved >> allocated)",
              "driver_calls": "allocator calls cudaMalloc/cudaFree inside the steps"}
    return [ctx.finding(cost_ns=int((drv["end"] - drv["ts"]).sum()) if drv.height else 0, savings_ns=savings,
                        count=drv.height or len(cases), steps=ctx.steps["step"].to_list(), evidence=evidence,
                        severity=severity, title="; ".join(titles[c] for c in cases),
                        fix=" ".join(FIXES[c] for c in cases))]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the driver's allocation calls inside the steps (cudaMalloc/cudaFree
    on a cache miss) leave the host path and no longer wait for the device (the caching allocator serves the
    blocks). Near-capacity findings with no driver call have nothing to replay."""
    drv = M.driver_calls(ctx.trace, ctx.steps)
    if drv.height == 0:
        return None
    ids = drv["i"].cast(pl.Int64).to_list()
    return Transform(NAME, host_removed=ids, no_wait=ids)
