"""TV207 small-grid: kernels launch fewer thread blocks than the GPU has SMs, so most of the GPU idles while busy.

## What it detects
Compute kernels in the analysed steps whose grid (`grid` x·y·z from Kineto's kernel args, or its `blocks per
SM` < 1) is smaller than the device's SM count (`deviceProperties.numSms`) and that are short (under
`max_kernel_us`): at least one SM, usually most, has no block to run while the kernel is on the timeline. A
longer kernel with few blocks loops inside each block (cuDNN batch norm's one block per channel, a split-K
GEMM's tail) and a larger batch makes it longer, not wider: it is left out. So are the kernels launched inside an
optimizer step, a `zero_grad` or DDP's reducer ops: they are sized by the parameters, and a larger batch leaves
them as they are (a fused or foreach optimizer is unfused-optimizer's fix, DDP's buckets accumulation-sync's). Reported when the *batchable* ones
(below: small grids that still fit one wave at twice the batch) hold at least `min_share_pct` of the GPU-busy
time and the point estimate (below) reaches `min_savings_pct` of the step.

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

## Evidence and the model
Small-grid kernels per step, their time and share of the GPU-busy time, their median blocks and the share of SMs
they use (time-weighted), Kineto's estimated achieved occupancy, the top kernels. The saving is the **wave
model** at the same number of samples: an SM holds R blocks of a kernel at once (the CUDA occupancy calculator
on the kernel's threads, registers and shared memory and the trace's `deviceProperties`; Kineto's own estimate
hides R below one block per SM), and a short kernel's blocks each take its time, so k times the batch takes
ceil(k·b / (S·R)) waves of it where it took ceil(b / (S·R)): per sample, its time x waves(k·b) / (k·waves(b)).
That holds for kernels whose blocks are fixed-size chunks of the rows (elementwise, normalization, pooling,
reductions: the MLP twin's GELU went from 16 to 512 blocks for 32x the rows, 1.3 to 1.8 µs). A GEMM's or a
convolution's blocks are output tiles instead (library kernels by name: cuBLAS, cuDNN, CUTLASS, nvjet, xmma;
not attention, whose K/V are each sequence's own), and each streams its slice of the weights, which all the rows
share: at a batch that leaves SMs idle the call is bound by that weight read, its tiles have room for more rows,
and for a larger shape the library picks larger tiles. k times the rows in one call keep the call's time unless
k times its FLOPs at the device's peak take longer (the roofline's compute floor, from the op's shapes; a CUDA
graph's kernels have none, and keep the call's time): per sample, max(its time, k·FLOPs / peak) / k. Measured: 32x
the rows took 0.8-1.7x the 4-row calls' time in the MLP twin's GEMMs (the grids grew 1.4-2.7x), and 32x the
images 3.6x in ResNet-18's convolutions (median grid 12 to 110 blocks), where the wave model says 16-32x.
Only *batchable* kernels are priced (b <= S, and 2·b <= S·R: twice the batch still fits one wave): a grid
with a block on every SM is taken as throughput-bound, and one filling over half its slots idles only in its
last wave's tail (wave quantization), which a larger batch does not reliably fill. k, the point estimate's
batch growth, is the steps' own repeats: each kernel (by name, grid and block) launched a multiple of r times
per step is r calls of the same work (a serve loop over chunks of its rows), which one call over all the
rows does in 1/r of the kernels; without repeats, k = 2. The range: doubling the batch .. every SM's block
slots filled (k large; a GEMM's or convolution's at least the point estimate's). `fix_transform` replays the
point estimate: each batchable kernel at its time per sample, each kernel's device gap (a CUDA graph's
node-to-node latency) once per k calls, and a CUDA graph's launch call, whose host work is per node, at 1/k of
its time; the host's per-call cost of an eager loop stays (launch-bound's fix). The identical layers of a model also repeat their kernels, and nothing in a trace tells
a layer from a chunk of rows: the repeats r then count layers too (r = 4 layers x 32 calls for the MLP twin).
That changes little for a grid that fills its wave at k, but a GEMM's k calls become one call's time: the MLP's
fixed step replays at 0.014-0.022 ms where the 128-row run measured 0.090 (its 4 layers' GEMMs priced as one
call), 4 % of the 1.84 ms saved.

## Options
- `max_kernel_us` (20.0): longest small-grid kernel counted; a longer one does serial work per block that a
  larger batch lengthens.
- `min_share_pct` (25.0): share of GPU-busy time in batchable small-grid kernels below which nothing is reported.
- `min_savings_pct` (2.0): smallest point-estimate saving (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- NVIDIA CUDA C++ Best Practices Guide, "Occupancy" and "Execution Configuration Optimizations" (at least as
  many blocks as SMs).
- PyTorch profiler kernel args: `grid`, `block`, `blocks per SM`, `warps per SM`, `est. achieved occupancy %`.
- Flash-decoding (Dao et al., 2023): splitting the KV length across SMs at batch 1.
- NVIDIA CUDA Occupancy Calculator (`cuda_occupancy.h`): resident blocks per SM from threads, registers and
  shared memory; Kineto's `est. achieved occupancy %` = min(grid / SMs, that) x threads / the SM's threads.
- Roofline model (Williams, Waterman, Patterson, CACM 2009): no kernel runs its FLOPs faster than the peak.
- Measured on an H200, unprofiled (replayed point estimate in brackets): torchvision ResNet-18 served 1 image per
  call under a CUDA graph, 11.50 ms per 32 images, 32 per call 1.08 ms (saving 10.42 ms; 10.61 predicted,
  sample_traces/collected5); an MLP served 4 rows per call 1.76 ms per 128 rows, 128 per call 0.09 ms (saving
  1.67 ms, 1.92 in one process with the problem's trace, sample_traces/ab_traced; 1.82 predicted; with its GEMMs
  grown as waves, 1.24), sample_traces/collected4.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np
import polars as pl

from traceview.analyses.names import contains
from traceview.analyses.param_work import param_sized
from traceview.analyses.replay import Transform
from traceview.analyses.roofline import COMPUTE_KERNEL_RE, peak_expr
from traceview.analyses.rowid import by_id, join_by_id
from traceview.engine import CHAIN, SMALL_ROWS, for_rows
from traceview.evidence import Meta
from traceview.frames import dropnull, members, omit, pick
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

CODE = "TV207"
NAME = "small-grid"
CLASS = "gpu_compute"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "Kernels launch fewer blocks than the GPU has SMs: most SMs idle while the GPU is busy"
OPTIONS = {
    "max_kernel_us": Option(20.0, "longest small-grid kernel counted (a longer one loops inside its blocks)"),
    "min_share_pct": Option(
        25.0, "share of GPU-busy time in batchable small-grid kernels below which nothing is reported"
    ),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
FIX = (
    "Give each kernel more work: raise the batch size or batch concurrent requests, fuse small per-sample ops "
    "into one kernel over the batch (torch.compile, torch.vmap, foreach ops); at batch 1 use split-K / "
    "flash-decoding kernels."
)


#: library kernels whose blocks share one operand across the rows: GEMMs and convolutions (the roofline's
#: compute-kernel names), not attention, whose K/V are each sequence's own
ATTENTION_KERNEL_RE = r"(?i)fmha|flash|attention|sdpa"


def num_sms(ctx: RuleContext) -> int | None:
    props = ctx.trace.meta.device_properties
    n = props[0].get("numSms") if props else None
    return n if isinstance(n, int) and n > 0 else None


#: most resident blocks per SM by compute capability (CUDA C++ Programming Guide, "Technical Specifications per
#: Compute Capability"); 32 on every other part from Maxwell on
MAX_BLOCKS_PER_SM = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 16, (12, 0): 24}


def resident_blocks(ctx: RuleContext) -> pl.Expr:
    """Blocks of a kernel one SM holds at once: the CUDA occupancy calculator's limits (threads, registers,
    shared memory, the part's block limit) from the kernel's own args and the trace's `deviceProperties`. Kineto's
    `est. achieved occupancy %` is min(grid/SMs, this) x threads / the SM's threads, so a grid below one block per
    SM hides it: it is computed here. 1 without device properties (a whole SM per block: the fewest)."""
    props = (ctx.trace.meta.device_properties or [{}])[0]
    threads, regs_sm, shm_sm = (
        props.get(x)
        for x in ("maxThreadsPerMultiprocessor", "regsPerMultiprocessor", "sharedMemPerMultiprocessor")
    )
    if not all(isinstance(x, int) and x > 0 for x in (threads, regs_sm, shm_sm)):
        return pl.lit(1.0)
    cap = MAX_BLOCKS_PER_SM.get((props.get("computeMajor"), props.get("computeMinor")), 32)
    t = pl.col("block_x").fill_null(1) * pl.col("block_y").fill_null(1) * pl.col("block_z").fill_null(1)
    warps = ((t + 31) // 32).clip(1)
    by_threads = threads // 32 // warps
    # registers are allocated per warp in units of 256 (all parts from Maxwell on)
    regs = pl.col("regs").fill_null(0)
    by_regs = pl.when(regs > 0).then(regs_sm // (((regs * 32 + 255) // 256) * 256 * warps)).otherwise(cap)
    # each block also reserves 1 KiB of shared memory for the system (compute capability 8.0 and later)
    shm = pl.col("shmem").fill_null(0)
    by_shm = pl.when(shm > 0).then(shm_sm // (shm + 1024)).otherwise(cap)
    return pl.min_horizontal(pl.lit(cap), by_threads, by_regs, by_shm).clip(1).cast(pl.Float64)


def repeats(ctx: RuleContext) -> int:
    """How many times each step runs the same kernels: the greatest common divisor of every kernel's launches per
    step (by name, grid and block). A serve loop over r chunks of its rows launches each of its kernels a multiple
    of r times per step; one call over all the rows does the same work in 1/r of the calls. 1 when the steps do not
    repeat their work (a training step at its batch)."""

    def build() -> int:
        keys = ("name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
        st = ctx.steps.select(pl.col("ts").cast(pl.Int64).alias("_s"), pl.col("step")).sort("_s")
        if st.height == 0:
            return 1
        if st["_s"].null_count():  # (no search of the starts: the as-of join, which skips the steps without one)
            return _repeats_joined(ctx, st, keys)
        # each kernel's step: the last step starting at or before it (a backward as-of match, by a search of the
        # steps' starts); the launches counted per step and kernel in one query that reads the rows a part at a
        # time (`engine.for_rows`: no sorted and joined copy of every kernel's key columns, nor their row keys)
        step = pl.lit(st["step"]).gather(
            pl.lit(st["_s"]).search_sorted(pl.col("ts").cast(pl.Int64), side="right").cast(pl.Int64) - 1)
        counts = (
            ctx.trace.gpu.lazy()
            .filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
            .select(step.alias("step"), *keys)
            .group_by("step", *keys)
            .len()
            .collect(**for_rows(ctx.trace.gpu.height))
        )
        if counts.height == 0:
            return 1
        return max(int(np.gcd.reduce(counts["len"].to_numpy().astype(np.int64))), 1)

    return ctx.once("grid_repeats", build)


def _repeats_joined(ctx: RuleContext, st: pl.DataFrame, keys: tuple[str, ...]) -> int:
    """`repeats` by an as-of join of every kernel onto the steps' starts `st` [_s, step] (sorted)."""
    g = ctx.trace.gpu.select("kind", "ts", *keys).filter(
        (pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
    if g.height == 0:
        return 1
    g = g.select(pl.col("ts").cast(pl.Int64), *keys)
    g = g.sort("ts").join_asof(st, left_on="ts", right_on="_s", strategy="backward")
    counts = g.group_by("step", *keys).len()
    return max(int(np.gcd.reduce(counts["len"].to_numpy().astype(np.int64))), 1)


def _kernels(ctx: RuleContext) -> pl.DataFrame:
    """Compute kernels in the analysed steps with [i, name, dur, op, blocks, used (blocks / SMs), occupancy, small,
    waves (of resident blocks), slots (SMs x resident blocks), and per_sample_k / per_sample_2 (their time per
    the same samples with the batch per kernel k = `batch_factor` and 2 times larger: the wave model)]."""

    def build() -> pl.DataFrame:
        sms = num_sms(ctx)
        g = ctx.trace.gpu.select(
            "i",
            "name",
            "kind",
            "ts",
            "dur",
            "op",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "regs",
            "shmem",
            "blocks_per_sm",
            "occupancy",
            "launch_ts",
            "launch_tid",
        ).filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
        # an optimizer step's, a zero_grad's and DDP's reducer kernels are sized by the parameters: a larger batch
        # leaves them as they are (their fixes are unfused-optimizer's and accumulation-sync's)
        g = omit(g.filter(~param_sized(ctx.trace, g, zero_grad=True)), "launch_ts", "launch_tid")
        weights = contains(g, COMPUTE_KERNEL_RE, unless=ATTENTION_KERNEL_RE)  # (read on `g`'s rows: kept below)
        # the columns below in one query (a small trace's run is mostly polars' fixed cost per query)
        g = g.lazy()
        blocks = pl.col("grid_x") * pl.col("grid_y").fill_null(1) * pl.col("grid_z").fill_null(1)
        g = g.with_columns(blocks=blocks)
        used = (pl.col("blocks") / sms) if sms else pl.col("blocks_per_sm")
        g = g.with_columns(used=pl.coalesce(used, pl.col("blocks_per_sm")).cast(pl.Float64))
        short = pl.col("dur") < ctx.options["max_kernel_us"] * 1000
        g = g.with_columns(small=((pl.col("used") < 1.0) & short).fill_null(False), short=short)
        # the slots a wave fills: without the SM count, blocks per SM (Kineto's grid / SMs) stands for the grid
        slots = resident_blocks(ctx) * (sms if sms else 1)
        b = pl.col("blocks").cast(pl.Float64) if sms else pl.col("blocks_per_sm").cast(pl.Float64)
        g = g.with_columns(slots=slots, _b=b)
        # the kernels a larger batch makes wider at no time: small grids that still fit one wave of resident blocks
        # at twice the batch. A kernel with a block on every SM is taken as throughput-bound, and one whose grid
        # fills over half its slots idles only in its last wave's tail, which a larger batch does not reliably
        # fill (wave quantization): both keep their time per sample
        g = g.with_columns(
            batchable=(pl.col("small") & (2 * pl.col("_b") <= pl.col("slots"))).fill_null(False),
            # a GEMM or convolution: its blocks are output tiles that each stream a slice of the weights, which
            # every row shares: more rows fill the tiles it runs (or a larger tile the library picks for the
            # larger shape) before they add blocks
            weights=weights.fill_null(False),
        )
        # the roofline's floor on the larger call: its k times the FLOPs at the device's peak, as a share of the
        # call's time (the op's shapes; 0 without them, as for a CUDA graph's kernels: nothing bounds it there
        # but the call's own time)
        spec = ctx.spec
        g = g.join(pick(ctx.kb, "i", "flops", "bpe", "tf32").lazy(), on="i", how="left")
        g = g.with_columns(_peak=(pl.col("flops") / peak_expr(spec) * 1e9 / pl.col("dur").cast(pl.Float64).clip(1.0))
                           .fill_null(0.0).fill_nan(0.0)).drop("flops", "bpe", "tf32")

        def per_sample(k: float) -> pl.Expr:
            # k times the work in waves of `slots` blocks, each wave the kernel's own time (a short kernel's blocks
            # are one latency chain each): time per sample = dur x waves(k x blocks) / (k x waves(blocks)). A
            # GEMM/convolution's small grid reads its weights once per call whatever rows its tiles hold: k times
            # the rows in one call keep the call's time (one wave) until k times its FLOPs at the device's peak
            # take longer (the roofline's compute floor)
            w0 = (pl.col("_b") / pl.col("slots")).ceil().clip(1.0)
            wk = pl.when(pl.col("weights")).then(pl.max_horizontal(w0, k * pl.col("_peak"))).otherwise(
                (k * pl.col("_b") / pl.col("slots")).ceil().clip(1.0))
            new = (pl.col("dur").cast(pl.Float64) * wk / (k * w0)).round().cast(pl.Int64)
            return (
                pl.when(pl.col("batchable"))
                .then(pl.min_horizontal(new, pl.col("dur")))
                .otherwise(pl.col("dur"))
            )

        k = float(batch_factor(ctx))
        return g.with_columns(
            per_sample_k=per_sample(k), per_sample_2=per_sample(2.0), waves=(pl.col("_b") / pl.col("slots"))
        ).drop("_b", "_peak").collect(**CHAIN)

    return ctx.once("grid_kernels", build)


def _no_small_grid(ctx: RuleContext) -> bool:
    """Whether no compute kernel of a small trace is `small` (`_kernels`' test, on every kernel: a superset of the
    analysed steps' kernels less the parameter-sized ones), so the check finds none: told in one query, without the
    kernel table and its batch factor (~4 ms of a tiny trace's run). A larger trace builds the table."""
    gpu = ctx.trace.gpu
    if gpu.height >= SMALL_ROWS:
        return False
    sms = num_sms(ctx)
    blocks = pl.col("grid_x") * pl.col("grid_y").fill_null(1) * pl.col("grid_z").fill_null(1)
    used = pl.coalesce((blocks / sms) if sms else pl.col("blocks_per_sm"), pl.col("blocks_per_sm")).cast(pl.Float64)
    small = (used < 1.0) & (pl.col("dur") < ctx.options["max_kernel_us"] * 1000)
    return not gpu.select(((pl.col("kind") == "compute") & small).any()).item()


def batch_factor(ctx: RuleContext) -> int:
    """The batch growth the point estimate is for: the steps' own repeats (r calls of the same kernels in one), else
    doubling the batch."""
    return max(repeats(ctx), 2)


def _range(k: pl.DataFrame) -> tuple[int, int, int]:
    """Kernel time (ns) the fix saves over the analysed steps at the same samples: (doubling the batch, the batch
    factor's, every resident-block slot of every SM filled: each batchable kernel's time per sample x
    waves/ceil(waves))."""
    dur = pl.col("dur").cast(pl.Float64)
    waves = pl.col("waves").fill_null(1.0)
    fill = (waves / waves.ceil().clip(1.0)).clip(0.0, 1.0)
    # a GEMM/convolution's time per sample keeps falling as rows fill its tiles: its high end is at least the
    # point estimate's (the batch factor's rows; beyond them the model does not go)
    full = dur * (1.0 - fill)
    full = pl.when(pl.col("weights")).then(pl.max_horizontal(full, dur - pl.col("per_sample_k"))).otherwise(full)
    high = float(k.select(pl.when(pl.col("batchable")).then(full).otherwise(0.0).sum()).item())
    return int((k["dur"] - k["per_sample_2"]).sum()), int((k["dur"] - k["per_sample_k"]).sum()), int(high)


class SavingsRange(msgspec.Struct, kw_only=True):
    """What a fix saves per step: doubling the batch, the point estimate and every SM's block slots filled."""

    double_batch: Annotated[float, Meta(description="twice the rows per kernel (µs)")]
    batch_factor: Annotated[
        int,
        Meta(
            description="the batch growth of the point estimate (the steps' own repeats of "
            "the same kernels, at least 2)"
        ),
    ]
    point: Annotated[float, Meta(description="the point estimate: the batch grown by batch_factor (µs)")]
    fill_sms: Annotated[float, Meta(description="every SM's block slots busy (µs)")]


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
    batchable_share_pct: Annotated[
        float,
        Meta(description="% of the GPU's busy time in small grids that fit one wave at twice the batch"),
    ]
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
    if _no_small_grid(ctx):
        return []
    k = _kernels(ctx)
    busy = int(k["dur"].sum())
    s = k.filter(pl.col("small"))
    if busy == 0 or s.height == 0:
        return []
    share = 100.0 * int(s["dur"].sum()) / busy
    # the share a larger batch widens at no time (`batchable`): a grid filling over half its slots idles in its tail
    batchable = 100.0 * int(k.filter(pl.col("batchable"))["dur"].sum()) / busy
    # kernel time saved per step at the same samples: doubling the batch, the point estimate's k, filling every slot
    low, point, high = _range(k)
    if batchable < ctx.options["min_share_pct"] or ctx.pct(point) < ctx.options["min_savings_pct"]:
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
        .sort(["dur", "name"], descending=[True, False], maintain_order=True)
        .head(5)
    )
    sms = num_sms(ctx)
    evidence = Evidence(
        sms=sms,
        small_grid_kernels_per_step=round(s.height / n, 2),
        small_grid_time_per_step_us=round(float(s["dur"].sum()) / n / 1000, 3),
        share_of_gpu_busy_pct=round(share, 2),
        batchable_share_pct=round(batchable, 2),
        median_blocks=float(s["blocks"].median()) if s["blocks"].null_count() < s.height else None,
        sm_share_used_pct=round(100.0 * used, 2) if used is not None else None,
        est_achieved_occupancy_pct=round(float((occ["occupancy"] * occ["dur"]).sum() / occ["dur"].sum()), 2)
        if occ.height and occ["dur"].sum()
        else None,
        savings_range_per_step_us=SavingsRange(
            double_batch=round(low / n / 1000, 3),
            batch_factor=batch_factor(ctx),
            point=round(point / n / 1000, 3),
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
        "batch concurrent requests), fuse small per-sample ops into one kernel over the batch "
        + ("(torch.vmap, foreach ops; the step runs compiled already: Inductor's kernels are small here because "
           "their tensors are, so more rows per call is what widens them)"
           if ctx.features.compiled else "(torch.compile, torch.vmap, foreach ops)")
        + "; at batch 1, split-K / flash-decoding kernels spread the reduction over the SMs. "
        + (
            f"The step runs the same kernels {repeats(ctx)} times: one call over all its rows does that work in "
            f"1/{repeats(ctx)} of the kernels. "
            if repeats(ctx) > 1
            else ""
        )
        + f"At the same number of samples the kernels' time per step falls by about {point / n / 1e6:.2f} ms with "
        f"a {batch_factor(ctx)}x batch per call (range {low / n / 1e6:.2f} ms when the batch doubles to "
        f"{high / n / 1e6:.2f} ms when every SM holds as many blocks as it can; a GEMM or convolution is priced at "
        "one call's time for the larger batch, as it reads its weights once per call)."
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
            savings_ns=point,
            count=s.height,
            steps=steps,
            evidence=evidence,
            fix=fix,
            kernel_ids=s["i"],
        )
    ]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The point estimate as a replay transformation: the batch per call grown by `batch_factor` at the same
    samples per step, so each short kernel takes its wave-model time per sample (`_kernels`) and each kernel's
    device gap (a CUDA graph's node-to-node latency, a launch gap) is paid once per batch_factor calls. The host's
    per-call cost stays (an eager loop's launches are launch-bound's fix)."""
    k = _kernels(ctx)
    f = batch_factor(ctx)
    changed = k.filter(pl.col("per_sample_k") < pl.col("dur"))
    if changed.height == 0:
        return None
    ids = k["i"].cast(pl.Int64).to_list()
    gaps = _gaps(ctx, k)
    # a CUDA graph's launch call does host work per node (each kernel node is set up and submitted): a graph of
    # 1/f the nodes takes 1/f of that call's time
    g = ctx.trace.gpu.filter(pl.col("i").is_in(members(k["i"])) & pl.col("graph"))
    launches = dropnull(g["launch"]).unique().cast(pl.UInt32)
    dur = by_id(ctx.trace.host, launches, "dur")["dur"].cast(pl.Int64).to_list() if launches.len() else []
    return Transform(
        NAME,
        gpu_dur=dict(
            zip(changed["i"].cast(pl.Int64).to_list(), changed["per_sample_k"].to_list(), strict=True)
        ),
        gpu_gap={i: g // f for i, g in zip(ids, gaps, strict=True) if g > 0},
        host_cut={int(i): d - d // f for i, d in zip(launches.to_list(), dur, strict=True) if d},
    )


def _gaps(ctx: RuleContext, k: pl.DataFrame) -> list[int]:
    """Each kernel's idle gap (ns) after the activity before it on its stream, in the order of `k`."""
    g = pick(ctx.trace.gpu, "i", "stream", "ts", "end").sort("ts")
    g = g.with_columns(gap=(pl.col("ts") - pl.col("end").shift(1).over("stream")).clip(0).fill_null(0))
    return (
        pick(k, "i")
        .join(pick(g, "i", "gap"), on="i", how="left")["gap"]
        .fill_null(0)
        .cast(pl.Int64)
        .to_list()
    )
