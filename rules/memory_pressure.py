"""TV302 memory-pressure: GPU memory near the device's capacity.

## What it detects
From the trace's `[memory]` events (recorded with `profile_memory=True`) and the device's memory in
`deviceProperties`: peak reserved memory (peak allocated in old traces that record no reserved total) at or
above `near_capacity_pct` of the device within the analysed steps. Traces without memory events cannot be
judged. The allocator's own trouble at any fill level — cudaMalloc/cudaFree inside the steps,
`torch.cuda.empty_cache()` in the loop, retries, fragmentation — is TV303 allocator-churn.

## Why it is slow
Near capacity, an allocation that finds no cached block makes the allocator free its cache (`cudaFree`, which
synchronises the device) and retry, and the next larger batch fails with out-of-memory: the job cannot grow
its batch to use the GPU better.

## How to fix
Activation checkpointing (`torch.utils.checkpoint`) on the large blocks, a smaller micro-batch with gradient
accumulation, bf16 activations, `set_to_none=True` gradients, fewer kept temporaries (no lists of per-step
tensors).

## Evidence
The device capacity, per device the peak allocated and reserved memory and their share of the device,
allocations and the bytes allocated per step, the op running at the peak. Being near capacity is a risk, not a
measured cost: the finding carries no saving and stays `info` (the time the allocator loses near capacity is
TV303's finding, with its replayed saving).

## Options
- `near_capacity_pct` (90.0): peak reserved share of device memory at which memory counts as near capacity.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, "CUDA semantics: memory management" (caching allocator, `expandable_segments`, `empty_cache`).
- PyTorch docs, `torch.utils.checkpoint`; `torch.profiler` `profile_memory`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses import memory as M
from traceview.evidence import Meta
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext

CODE = "TV302"
NAME = "memory-pressure"
SEVERITY = "info"  # a risk, not a measured cost: no replayed saving
CLASS = "host_sync"  # the classifier class whose time a fix of these findings removes
TITLE = "GPU memory near capacity"
OPTIONS = {
    "near_capacity_pct": Option(90.0, "peak reserved share of device memory counted as near capacity"),
    **XPROF_SEVERITY,
}


class DeviceMemory(msgspec.Struct, kw_only=True):
    """One GPU whose memory peaked near its capacity."""

    device: Annotated[int, Meta(description="the device index")]
    capacity_gib: Annotated[float, Meta(description="its memory (GiB)")]
    peak_allocated_gib: Annotated[float, Meta(description="peak memory allocated by tensors (GiB)")]
    peak_reserved_gib: Annotated[
        float | None,
        Meta(description="peak memory reserved by the caching allocator (GiB; null: not recorded)"),
    ]
    peak_pct_of_capacity: Annotated[float, Meta(description="the higher peak as % of the capacity")]
    allocs_per_step: Annotated[float, Meta(description="allocations per step (mean)")]
    alloc_gib_per_step: Annotated[float, Meta(description="GiB allocated per step (mean)")]


class PeakOp(msgspec.Struct, kw_only=True):
    """The moment allocated memory peaked and the innermost op running then."""

    ts: Annotated[int, Meta(description="when (ns, trace clock)")]
    step: Annotated[int, Meta(description="the step")]
    device: Annotated[int, Meta(description="the device")]
    allocated: Annotated[int, Meta(description="bytes allocated then")]
    reserved: Annotated[int | None, Meta(description="bytes reserved then (null: not recorded)")]
    op: Annotated[str | None, Meta(description="the innermost op running on the allocating thread")]


class Evidence(msgspec.Struct, kw_only=True):
    cases: Annotated[list[str], Meta(description="what fired: `near_capacity`")]
    devices: Annotated[
        list[DeviceMemory], Meta(description="the GPUs whose peak reached `near_capacity_pct`")
    ]
    peak: Annotated[PeakOp | None, Meta(description="the peak of allocated memory and the op running then")]


GIB = 2**30
FIX = (
    "Peak reserved memory is close to the device's capacity: an allocation that finds no cached block makes the "
    "allocator free its cache (cudaFree synchronises the device) and retry, and a larger batch will not fit. "
    "Checkpoint activations of the large blocks (torch.utils.checkpoint), use a smaller micro-batch with gradient "
    "accumulation, keep activations in bf16, and drop kept temporaries."
)


def check(ctx: RuleContext) -> list[Finding]:
    ev = M.gpu_events(ctx.trace, ctx.steps)
    if ev.height == 0:
        return []
    per = M.step_summary(ctx.trace, ctx.steps)
    devs = []
    for dev in sorted(per["device"].unique().to_list()):  # one per GPU
        p = per.filter(pl.col("device") == dev)
        cap = M.capacity(ctx.trace, dev)
        pa = int(p["peak_allocated"].max() or 0)
        pr = p["peak_reserved"].max()  # null in old traces that record no reserved total
        top = pa if pr is None else int(pr)
        if not (cap and 100.0 * top / cap >= ctx.options["near_capacity_pct"]):
            continue
        devs.append(
            DeviceMemory(
                device=dev,
                capacity_gib=round(cap / GIB, 3),
                peak_allocated_gib=round(pa / GIB, 3),
                peak_reserved_gib=round(pr / GIB, 3) if pr is not None else None,
                peak_pct_of_capacity=round(100.0 * top / cap, 2),
                allocs_per_step=round(float(p["allocs"].mean()), 1),
                alloc_gib_per_step=round(float(p["alloc_bytes"].mean()) / GIB, 3),
            )
        )
    if not devs:
        return []
    peak = M.peak_op(ctx.trace, ev)
    evidence = Evidence(cases=["near_capacity"], devices=devs, peak=PeakOp(**peak) if peak else None)
    return [
        ctx.finding(
            cost_ns=0,
            savings_ns=0,
            count=len(devs),
            steps=ctx.steps["step"].to_list(),
            evidence=evidence,
            severity="info",
        )
    ]
