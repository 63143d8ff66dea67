"""TV301 pageable-memcpy: copies between the GPU and pageable (unpinned) host memory.

## What it detects
`Memcpy HtoD (Pageable -> Device)` and `Memcpy DtoH (Device -> Pageable)` activities (the memcpy's source or
destination kind is pageable host memory), grouped by direction and by the op that issued them.

## Why it is slow
The GPU's copy engines can only DMA from page-locked memory. A copy from pageable memory is staged by the
driver through a pinned bounce buffer in chunks, runs at a fraction of the link bandwidth, and is
synchronous with respect to the host: `non_blocking=True` cannot overlap it with compute (it needs pinned
memory to be truly asynchronous). A device→pageable copy also forces the host
to wait for the GPU.

## How to fix
Allocate the host side pinned: `DataLoader(..., pin_memory=True)` or `tensor.pin_memory()`, then copy with
`.to(device, non_blocking=True)` so the copy runs on the copy engine while the GPU computes; for results
going to the host, copy into a pre-allocated pinned buffer with `non_blocking=True` and wait on an event.

## Evidence
Per (direction, op): number of copies, bytes, total copy time, achieved GB/s against a practical pinned
bandwidth for the device's host link (spec table), the costliest copy's time window and stream. Savings =
Σ max(0, copy time − bytes / pinned bandwidth): the time a pinned copy at full link speed would not take
(more when the copy can then overlap compute). Every pageable copy is reported; the severity follows the
savings share of the window.

## Options
- `moderate_pct` (3.0): savings share at which a finding is a warning — XProf moderate threshold (input/H2D 5 % is stricter; 3 % keeps small copies visible).
- `high_pct` (15.0): savings share at which it is an error — XProf high threshold.
- `min_bytes` (0): smallest copy reported (Nsight Systems' `cuda_memcpy_sync` ignores H2D copies ≤ 64 KiB; 0 reports all).

## References
- Nsight Systems expert rule `cuda_memcpy_async` (Async Memcpy with Pageable Memory) — Nsight Systems User Guide, Expert Systems Analysis: https://docs.nvidia.com/nsight-systems/UserGuide/.
- tb_plugin ResNet-50 samples: a 19.3 MB pageable H2D copy per step followed by cudaStreamSynchronize — https://github.com/pytorch/kineto (tb_plugin/samples/resnet50_num_workers_0).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.names import contains
from traceview.analyses.replay import Transform
from traceview.analyses.rowid import join_by_id
from traceview.analyses.windows import step_of
from traceview.evidence import Meta, Span
from traceview.ingest.categories import RUNTIME_CATS
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext

CODE = "TV301"
NAME = "pageable-memcpy"
CLASS = "gpu_memory"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "Copy to/from pageable host memory (staged, synchronous, slow)"
OPTIONS = {
    **XPROF_SEVERITY,
    "min_bytes": Option(0, "smallest copy reported, bytes (nsys cuda_memcpy_sync skips <= 64 KiB H2D)"),
}
FIX = ("The GPU can only DMA from page-locked memory, so this copy is staged through a pinned bounce buffer by "
       "the driver: it runs below link speed and blocks the host, and non_blocking=True cannot overlap it. Pin the "
       "host memory (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy with .to(device, "
       "non_blocking=True); for device-to-host results copy into a pinned buffer and wait on a CUDA event.")


class WorstCopy(Span, kw_only=True):
    """The group's longest copy."""

    bytes: Annotated[int | None, Meta(description="its size (bytes)")]
    step: Annotated[int, Meta(description="its step")]


class Evidence(msgspec.Struct, kw_only=True):
    memcpy: Annotated[str, Meta(description="the copy's activity name (e.g. `Memcpy HtoD (Pageable -> Device)`)")]
    direction: Annotated[str, Meta(description="HtoD, DtoH, DtoD or HtoH")]
    op: Annotated[str | None, Meta(description="the host op that issued the copies")]
    copies: Annotated[int, Meta(description="pageable copies of this direction and op in the analysed steps")]
    bytes: Annotated[int | None, Meta(description="their bytes")]
    copy_time_us: Annotated[float, Meta(description="their device time (µs)")]
    achieved_gbps: Annotated[float | None, Meta(description="their achieved bandwidth (GB/s)")]
    pinned_reference_gbps: Annotated[float, Meta(description="the host link's pinned bandwidth of the device (GB/s)")]
    device: Annotated[str, Meta(description="the device the reference comes from")]
    stream: Annotated[int | None, Meta(description="the stream of the longest copy")]
    worst: Annotated[WorstCopy, Meta(description="the longest copy")]


def check(ctx: RuleContext) -> list[Finding]:
    trace, steps, opts, spec = ctx.trace, ctx.steps, ctx.options, ctx.spec
    g = trace.gpu[["i", "kind", "name", "ts", "end", "dur", "bytes", "op", "stream", "device"]]
    m = g.filter((pl.col("kind") == "memcpy") & contains(g, "Pageable"))  # (the test on the distinct names)
    m = m.filter(pl.col("bytes").fill_null(0) >= opts["min_bytes"])
    if m.height == 0:
        return []
    m = step_of(m, steps).filter(pl.col("step").is_not_null())
    if m.height == 0:
        return []
    link = spec.host_gbps * 1e9
    m = join_by_id(m, "op", trace.host, pl.col("name").alias("op_name"))
    m = m.with_columns(
        direction=pl.col("name").str.extract(r"(HtoD|DtoH|DtoD|HtoH)").fill_null("?"),
        pinned_ns=(pl.col("bytes").fill_null(0).cast(pl.Float64) / link * 1e9),
    ).with_columns(save=(pl.col("dur").cast(pl.Float64) - pl.col("pinned_ns")).clip(lower_bound=0))
    groups = (m.group_by("direction", "op_name")
              .agg(pl.len().alias("count"), pl.col("dur").sum(), pl.col("bytes").sum(), pl.col("save").sum(),
                   pl.col("name").first().alias("kind"), pl.col("step").unique().sort().alias("steps"),
                   pl.col("i").sort_by(["dur", "ts"], descending=[True, False]).first().alias("worst"), pl.col("i").alias("ids"))
              .sort(["save", "direction"], descending=[True, False], maintain_order=True))
    out = []
    for g in groups.to_dicts():  # one per (direction, op)
        w = m.filter(pl.col("i") == g["worst"]).to_dicts()[0]
        gbps = g["bytes"] / (g["dur"] / 1e9) / 1e9 if g["dur"] else None
        ev = Evidence(memcpy=g["kind"], direction=g["direction"], op=g["op_name"], copies=g["count"],
                      bytes=g["bytes"], copy_time_us=round(g["dur"] / 1000, 3),
                      achieved_gbps=round(gbps, 2) if gbps else None, pinned_reference_gbps=spec.host_gbps,
                      device=spec.name, stream=w["stream"],
                      worst=WorstCopy(start_us=round(w["ts"] / 1000, 3), end_us=round(w["end"] / 1000, 3),
                                      bytes=w["bytes"], step=w["step"]))
        out.append(ctx.finding(title=f"{g['kind']} in {g['op_name'] or '?'}", steps=g["steps"], count=g["count"],
                               cost_ns=g["dur"], savings_ns=g["save"], evidence=ev, kernel_ids=g["ids"]))
    return out


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each pageable copy runs from pinned memory at the host link's pinned
    bandwidth (`Spec.host_gbps`), and an upload is non-blocking — the calls that issued it no longer wait for the
    device, and its memcpy call, which staged the copy on the host, takes a launch call's median time. A download
    (DtoH) keeps its wait: the host reads the value it fetches (`.cpu()`, `.item()`), so only removing that sync
    (host-sync's fix) takes the wait off, and pricing it here would count the sync twice."""
    g = ctx.trace.gpu[["i", "kind", "name", "bytes", "op", "dur"]]
    m = g.filter((pl.col("kind") == "memcpy") & contains(g, "Pageable"))
    m = m.filter(pl.col("bytes").fill_null(0) >= ctx.options["min_bytes"])
    if m.height == 0:
        return None
    link = ctx.spec.host_gbps * 1e9
    new = m.select("i", pl.min_horizontal(pl.col("dur"), (pl.col("bytes").cast(pl.Float64) / link * 1e9).cast(pl.Int64)))
    up = m.filter(~pl.col("name").str.contains("DtoH"))["op"].drop_nulls()
    rt = ctx.trace.host.filter(pl.col("cat").is_in(RUNTIME_CATS))
    calls = rt.filter(pl.col("op").is_in(up.implode()))
    # the driver stages a pageable upload through its bounce buffer inside the memcpy call, which returns only
    # when the last chunk is queued: the call's time is the copy's, on the host path whether or not it "waits".
    # From pinned memory the call only queues the DMA: it takes what the trace's own launch calls take.
    copies = calls.filter(pl.col("name").str.starts_with("cudaMemcpy"))
    launch = rt.filter(pl.col("name").str.starts_with("cudaLaunchKernel"))["dur"].median()
    cut: dict[int, float] = {}
    if copies.height and launch is not None:
        c = copies.select(pl.col("i").cast(pl.Int64), (pl.col("dur") - launch).clip(0).cast(pl.Float64))
        cut = {int(i): float(v) for i, v in c.iter_rows() if v > 0}
    return Transform(NAME, gpu_dur=dict(new.rows()), no_wait=calls["i"].cast(pl.Int64).to_list(), host_cut=cut)
