"""TV207 small-grid: kernels launch fewer thread blocks than the GPU has SMs, so most of the GPU idles while busy.

## What it detects
Compute kernels in the analysed steps whose grid (`grid` x·y·z from Kineto's kernel args, or its `blocks per
SM` < 1) is smaller than the device's SM count (`deviceProperties.numSms`) and that are short (under
`max_kernel_us`): at least one SM, usually most, has no block to run while the kernel is on the timeline. A
longer kernel with few blocks loops inside each block (cuDNN batch norm's one block per channel, a split-K
GEMM's tail) and a larger batch makes it longer, not wider: it is left out. Reported when such kernels hold at
least `min_share_pct` of the GPU-busy time and the conservative saving (below) reaches `min_savings_pct` of
the step.

## Why it is slow
A kernel's blocks are spread over the SMs; with b blocks on an S-SM GPU only b SMs work and the kernel's time is
that of one block's latency chain (its loads, its reduction), not the GPU's throughput. "GPU busy" then
overstates what the GPU does: a batch-1 decode GEMV, a tiny batch's layer norm or a 128x128 elementwise op
keeps 1-10 % of the SMs busy. More rows per kernel (a larger batch, batched requests, several small ops
fused into one) run in about the same time while the grid still fits one wave of SMs.

## How to fix
Give each kernel more work: raise the batch size (or batch concurrent requests: continuous batching for
inference), fuse small per-sample ops into one kernel over the batch (`torch.compile`, `torch.vmap`,
`torch._foreach_*`), and for GEMMs/attention at batch 1 use split-K / flash-decoding kernels that split the
reduction dimension across SMs. CUDA Graphs remove launch cost, not idle SMs.

## Evidence
Small-grid kernels per step, their time and share of the GPU-busy time, their median blocks and the share of SMs
they use (time-weighted), Kineto's estimated achieved occupancy, the top kernels. The saving is stated as a
range per step at the same number of samples: **low** = doubling the batch per kernel (kernels that still fit
one wave, blocks <= S/2, take half their time per sample), **high** = filling the SMs (each kernel's time per
sample scaled by blocks/S: the kernel time constant while its grid grows to one wave). A kernel whose blocks
take more rows each as the batch grows gains more than the high end (measured: 4-row calls -> 128-row calls
under a CUDA graph saved 95 % against a 63 % high end), so the low end is the claim: `fix_transform` replays it
(GPU time only: the host's per-sample launch cost is left as it is, so a launch-bound step shows little saving).

## Options
- `max_kernel_us` (20.0): longest small-grid kernel counted; a longer one does serial work per block that a
  larger batch lengthens.
- `min_share_pct` (25.0): share of GPU-busy time in small-grid kernels below which nothing is reported.
- `min_savings_pct` (2.0): smallest low-end saving (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- NVIDIA CUDA C++ Best Practices Guide, "Occupancy" and "Execution Configuration Optimizations" (at least as
  many blocks as SMs).
- PyTorch profiler kernel args: `grid`, `block`, `blocks per SM`, `warps per SM`, `est. achieved occupancy %`.
- Flash-decoding (Dao et al., 2023): splitting the KV length across SMs at batch 1.
- Measured on an H200 (sample_traces/collected4): an MLP served 4 rows per call under a CUDA graph 1.76 ms per
  128 rows, 128 rows per call 0.09 ms (range 0.88-1.11 ms of kernel time, 0.34 ms replayed).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.replay import Transform
from traceview.analyses.rowid import join_by_id
from traceview.evidence import Meta
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

CODE = "TV207"
NAME = "small-grid"
CLASS = "gpu_compute"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "Kernels launch fewer blocks than the GPU has SMs: most SMs idle while the GPU is busy"
OPTIONS = {
    "max_kernel_us": Option(20.0, "longest small-grid kernel counted (a longer one loops inside its blocks)"),
    "min_share_pct": Option(
        25.0, "share of GPU-busy time in small-grid kernels below which nothing is reported"
    ),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
FIX = (
    "Give each kernel more work: raise the batch size or batch concurrent requests, fuse small per-sample ops "
    "into one kernel over the batch (torch.compile, torch.vmap, foreach ops); at batch 1 use split-K / "
    "flash-decoding kernels."
)


def num_sms(ctx: RuleContext) -> int | None:
    props = ctx.trace.meta.device_properties
    n = props[0].get("numSms") if props else None
    return n if isinstance(n, int) and n > 0 else None


def _kernels(ctx: RuleContext) -> pl.DataFrame:
    """Compute kernels in the analysed steps with [i, name, dur, op, blocks, used (blocks / SMs), occupancy,
    small, new_dur (the doubled-batch time per sample)]."""

    def build() -> pl.DataFrame:
        sms = num_sms(ctx)
        g = ctx.trace.gpu.select(
            "i", "name", "kind", "ts", "dur", "op", "grid_x", "grid_y", "grid_z", "blocks_per_sm", "occupancy"
        ).filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
        blocks = pl.col("grid_x") * pl.col("grid_y").fill_null(1) * pl.col("grid_z").fill_null(1)
        g = g.with_columns(blocks=blocks)
        used = (pl.col("blocks") / sms) if sms else pl.col("blocks_per_sm")
        g = g.with_columns(used=pl.coalesce(used, pl.col("blocks_per_sm")).cast(pl.Float64))
        short = pl.col("dur") < ctx.options["max_kernel_us"] * 1000
        g = g.with_columns(small=((pl.col("used") < 1.0) & short).fill_null(False))
        half = pl.col("small") & (pl.col("used") <= 0.5)
        return g.with_columns(new_dur=pl.when(half).then(pl.col("dur") // 2).otherwise(pl.col("dur")))

    return ctx.once("grid_kernels", build)


class SavingsRange(msgspec.Struct, kw_only=True):
    """What a fix saves per step, at the two ends of the range."""

    double_batch: Annotated[float, Meta(description="twice the blocks per kernel (µs)")]
    fill_sms: Annotated[float, Meta(description="every SM busy (µs)")]


class SmallKernel(msgspec.Struct, kw_only=True):
    """A small-grid kernel by its time."""

    kernel: Annotated[str, Meta(description="its name (first 120 characters)")]
    op: Annotated[str | None, Meta(description="the op that launched it")]
    count: Annotated[int, Meta(description="its launches in the analysed steps")]
    time_per_step_us: Annotated[float, Meta(description="its time per step (µs)")]
    median_blocks: Annotated[float | None, Meta(description="its median grid size (blocks)")]


class Evidence(msgspec.Struct, kw_only=True):
    sms: Annotated[int | None, Meta(description="the device's SMs")]
    small_grid_kernels_per_step: Annotated[
        float, Meta(description="kernels per step whose grid leaves SMs idle")
    ]
    small_grid_time_per_step_us: Annotated[float, Meta(description="their time per step (µs)")]
    share_of_gpu_busy_pct: Annotated[float, Meta(description="that as % of the GPU's busy time")]
    median_blocks: Annotated[float | None, Meta(description="their median grid size (blocks)")]
    sm_share_used_pct: Annotated[
        float | None, Meta(description="% of the SMs their grids occupy (time-weighted)")
    ]
    est_achieved_occupancy_pct: Annotated[
        float | None, Meta(description="their estimated achieved occupancy, time-weighted (%)")
    ]
    savings_range_per_step_us: Annotated[
        SavingsRange, Meta(description="what a fix saves per step, low and high")
    ]
    top_kernels: Annotated[list[SmallKernel], Meta(description="the small-grid kernels with the most time")]


def check(ctx: RuleContext) -> list[Finding]:
    if num_sms(ctx) is None and ctx.trace.gpu["blocks_per_sm"].null_count() == ctx.trace.gpu.height:
        return []
    k = _kernels(ctx)
    busy = int(k["dur"].sum())
    s = k.filter(pl.col("small"))
    if busy == 0 or s.height == 0:
        return []
    share = 100.0 * int(s["dur"].sum()) / busy
    low = int((s["dur"] - s["new_dur"]).sum())
    high = float((s["dur"].cast(pl.Float64) * (1.0 - s["used"].clip(0.0, 1.0))).sum())
    if share < ctx.options["min_share_pct"] or ctx.pct(low) < ctx.options["min_savings_pct"]:
        return []
    n = max(ctx.steps.height, 1)
    w = s["dur"].cast(pl.Float64)
    used = float((w * s["used"]).sum() / w.sum()) if w.sum() else None
    occ = s.filter(pl.col("occupancy").is_not_null())
    top = (
        join_by_id(s, "op", ctx.trace.host, pl.col("name").alias("op_name"))
        .group_by("name")
        .agg(
            pl.len().alias("count"), pl.col("dur").sum(), pl.col("blocks").median(), pl.col("op_name").first()
        )
        .sort(["dur", "name"], descending=[True, False])
        .head(5)
    )
    sms = num_sms(ctx)
    evidence = Evidence(
        sms=sms,
        small_grid_kernels_per_step=round(s.height / n, 2),
        small_grid_time_per_step_us=round(float(s["dur"].sum()) / n / 1000, 3),
        share_of_gpu_busy_pct=round(share, 2),
        median_blocks=float(s["blocks"].median()) if s["blocks"].null_count() < s.height else None,
        sm_share_used_pct=round(100.0 * used, 2) if used is not None else None,
        est_achieved_occupancy_pct=round(float((occ["occupancy"] * occ["dur"]).sum() / occ["dur"].sum()), 2)
        if occ.height and occ["dur"].sum()
        else None,
        savings_range_per_step_us=SavingsRange(
            double_batch=round(low / n / 1000, 3),
            fill_sms=round(high / n / 1000, 3),
        ),
        top_kernels=[
            SmallKernel(
                kernel=r["name"][:120],
                op=r["op_name"],
                count=r["count"],
                time_per_step_us=round(r["dur"] / n / 1000, 3),
                median_blocks=r["blocks"],
            )
            for r in top.to_dicts()
        ],
    )
    pct_sm = f"{100.0 * used:.0f} %" if used is not None else "a fraction"
    launch = ctx.features.cuda_graphs
    fix = (
        f"{s.height / n:.0f} kernels per step ({share:.0f} % of the GPU-busy time) launch fewer blocks than the "
        f"{sms or 'available'} SMs (median {evidence.median_blocks:.0f} blocks; {pct_sm} of the SMs in use, "
        "time-weighted): the GPU is busy but mostly idle. Give each kernel more work: raise the batch size (or "
        "batch concurrent requests), fuse small per-sample ops into one kernel over the batch (torch.compile, "
        "torch.vmap, foreach ops); at batch 1, split-K / flash-decoding kernels spread the reduction over the SMs. "
        f"At the same number of samples these kernels' time per step falls by about {low / n / 1e6:.2f} ms "
        f"when the batch doubles, and by about {high / n / 1e6:.2f} ms when the grids grow to fill the SMs (more "
        "where a kernel's blocks take more rows each)."
        + (
            " The step already replays CUDA graphs: launch cost is gone, the idle SMs remain."
            if launch
            else ""
        )
    )
    steps = sorted(int(x) for x in ctx.steps["step"].to_list())
    return [
        ctx.finding(
            cost_ns=int(s["dur"].sum()),
            savings_ns=low,
            count=s.height,
            steps=steps,
            evidence=evidence,
            fix=fix,
            kernel_ids=s["i"],
        )
    ]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The low end of the range as a replay transformation: each small-grid kernel that still fits one wave at
    twice the batch (blocks <= SMs / 2) takes half its time per sample; the host's per-sample cost stays."""
    k = _kernels(ctx).filter(pl.col("new_dur") < pl.col("dur"))
    if k.height == 0:
        return None
    return Transform(
        NAME, gpu_dur=dict(zip(k["i"].cast(pl.Int64).to_list(), k["new_dur"].to_list(), strict=True))
    )
