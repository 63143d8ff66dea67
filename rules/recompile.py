"""TV104 recompile: torch.compile compiles again inside the analysed steps.

## What it detects
Dynamo and Inductor compile spans (`_compile.compile_inner`, `entire_frame_compile`, `dynamo`,
`compile_fx_inner`, `CachingAutotuner.benchmark_all_configs`, …) inside the analysed steps, after the first
of them: once a function is compiled, every further compile in a step is a recompile (a guard failed: a new
shape, dtype, Python constant or global). The count is the number of Dynamo frame compiles; the region names
(`Torch-Compiled Region: F/C`, C = the frame's compile number) tell which frame recompiled. Compiles only in
the first analysed step are warm-up and are not reported.

## Why it is slow
A compile traces the Python code, lowers the graph and generates and autotunes kernels: hundreds of
milliseconds to minutes of host time, during which the GPU has nothing to run. Each recompile also adds a
cache entry; after `torch._dynamo.config.recompile_limit` (8) entries the frame falls back to eager.

## How to fix
Find why guards fail with `TORCH_LOGS=recompiles` (or `recompiles_verbose`). For changing shapes, mark them
dynamic: `torch.compile(dynamic=True)` or `torch._dynamo.mark_dynamic(x, dim)`, or pad/bucket the shapes
to a few sizes; stop passing changing Python numbers (pass tensors) and mutating globals the function reads.
In production, `torch.compiler.set_stance("fail_on_recompile")` turns a recompile into an error.

## Evidence
The compiles in the analysed steps (count, steps, host time per step), the recompiled regions, the longest
compile phases, and the GPU time the autotuning benchmarks ran. Savings = the compile spans' time during
which the GPU ran nothing but the compile's own autotuning benchmarks: without the compile that time goes. On
a trace without GPU activity (a model compiled for the CPU) the compile spans' host time itself.
The replayed saving (what-if, projection) is in unprofiled terms, and the profiler slows a compilation too
(Dynamo and Inductor dispatch ops it records, and their Python runs under its callbacks), though not like
dispatch: where the collector measured the unprofiled step, the compile spans' time beyond 1 ms per host
interval is deflated by the share that reproduces that measurement (docs/replay.md, "the profiler's cost"), so
the saving never exceeds the measured step; without a measurement it is priced at its traced length.

## Options
- `min_savings_pct` (1.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, "torch.compile: dynamic shapes" and "recompilations" (`TORCH_LOGS=recompiles`, `mark_dynamic`).
- PyTorch docs, `torch.compiler.set_stance`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.features import host_names
from traceview.analyses.intervals import merge
from traceview.analyses.replay import Transform, spans
from traceview.analyses.whatif import EMPTY, gpu_idle_within, removed_per_step
from traceview.analyses.windows import host_step_of
from traceview.evidence import Meta
from traceview.ruleapi import XPROF_SEVERITY, Finding, RuleContext, min_savings

CODE = "TV104"
NAME = "recompile"
SEVERITY = "warning"
CLASS = "cpu_launch"  # the classifier class whose time a fix of these findings removes
CPU = True  # also runs on traces without GPU activity: there the compile's host time is the step's own
TITLE = "torch.compile recompiles inside the steps"
OPTIONS = {
    **min_savings(1.0),
    **XPROF_SEVERITY,
}
_FIX = ("torch.compile compiled again inside these steps: a guard of the compiled function failed (a new shape, "
       "dtype, Python number or global) and Dynamo traced, lowered and autotuned the frame again while {waited}. "
       "Run with TORCH_LOGS=recompiles to see the failing guard; for changing shapes use "
       "torch.compile(dynamic=True) or torch._dynamo.mark_dynamic, or pad/bucket them to a few sizes; pass "
       "changing numbers as tensors; use torch.compiler.set_stance(\"fail_on_recompile\") to catch it.")
FIX = _FIX.format(waited="the GPU waited")
#: a trace without GPU activity: the compile holds up the host's own work
FIX_CPU = _FIX.format(waited="the step's own work waited (the compile runs on the CPU the step needs)")
#: compile phases (with or without the " (dynamo_timed)" suffix of newer releases)
COMPILE_RE = (r"^(dynamo|entire_frame_compile|_compile\.compile_inner|compile_fx_inner|inductor_compile|"
              r"backend_compile|CachingAutotuner\.benchmark_all_configs|async_compile\.precompile)( \(dynamo_timed\))?$")
FRAME_RE = r"^(_compile\.compile_inner|entire_frame_compile)( \(dynamo_timed\))?$"
REGION_RE = r"^Torch-Compiled Region: (\d+)/(\d+)$"


def compile_spans(ctx: RuleContext) -> pl.DataFrame:
    """Compile phases on the host inside the analysed steps: [i, name, tid, ts, end, step]."""
    h = ctx.trace.host[["i", "cat", "name", "tid", "ts", "end"]]
    if not host_names(ctx.trace, "cpu_op").str.contains(COMPILE_RE).any():  # no compile phase: no row (no query)
        return h[["i", "name", "tid", "ts", "end"]].clear().hstack([pl.Series("step", [], ctx.steps.schema["step"])])
    h = h.filter(pl.col("cat") == "cpu_op")
    h = h.filter(pl.col("name").str.contains(COMPILE_RE)).select("i", "name", "tid", "ts", "end")
    return host_step_of(h, ctx.steps, "ts").filter(pl.col("step").is_not_null())


def _spans(ctx: RuleContext) -> pl.DataFrame:
    c = compile_spans(ctx)
    if c.height == 0 or c["step"].n_unique() == 1 and c["step"].min() == ctx.steps["step"].min():
        return c.clear()  # warm-up: the first compile of the recording
    return c


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The compile spans' time when the GPU ran nothing but their autotuning benchmarks; computed once."""
    return ctx.once("removes", lambda: _removes(ctx))


def _removes(ctx: RuleContext) -> pl.DataFrame:
    c = _spans(ctx)
    # (on a trace without GPU activity no device work is subtracted: the compile spans' host time, merged)
    return gpu_idle_within(ctx.trace, c, ctx.lo, ctx.hi, keep_launched_inside=True) if c.height else EMPTY


class Phase(msgspec.Struct, kw_only=True):
    """A compile phase by its host time."""

    phase: Annotated[str, Meta(description="the dynamo/inductor phase's name")]
    time_us: Annotated[float, Meta(description="its host time in the analysed steps (µs)")]


class Evidence(msgspec.Struct, kw_only=True):
    compiles: Annotated[int, Meta(description="compilations inside the analysed steps")]
    steps_with_compiles: Annotated[list[int], Meta(description="the steps they ran in")]
    compile_host_time_per_step_us: Annotated[dict[str, float], Meta(
        description="compile host time per step (µs), by step number")]
    recompiled_regions: Annotated[list[str], Meta(description="compiled regions run in a recompiled version (/1, /2 …)")]
    phases: Annotated[list[Phase], Meta(description="the 6 longest compile phases")]
    autotune_gpu_time_us: Annotated[float, Meta(description="device time of autotuning benchmark kernels (µs)")]
    savings_per_step_us: Annotated[dict[str, float], Meta(description="the fix's saving per step (µs), by step number")]


def check(ctx: RuleContext) -> list[Finding]:
    c = _spans(ctx)
    if c.height == 0:
        return []
    rem = removed_per_step(removes(ctx), ctx.steps)
    savings = int(rem["removed"].sum())
    if ctx.pct(savings) < ctx.options["min_savings_pct"]:
        return []
    frames = c.filter(pl.col("name").str.contains(FRAME_RE))
    n = frames.filter(pl.col("name").str.starts_with("_compile")).height or frames.height or \
        merge(c.select("ts", "end")).height
    host = merge(c.select("step", "ts", "end"), ["step"]).group_by("step").agg((pl.col("end") - pl.col("ts")).sum())
    regions = ctx.trace.host[["name", "ts"]].filter(pl.col("name").str.contains(REGION_RE))
    regions = host_step_of(regions.select("name", "ts"), ctx.steps, "ts").filter(pl.col("step").is_not_null())
    recompiled = regions.filter(pl.col("name").str.extract(REGION_RE, 2).cast(pl.Int64) > 0)["name"].unique().sort()
    plain = c.filter(~pl.col("name").str.ends_with(" (dynamo_timed)"))  # one of each timed pair
    phases = ((plain if plain.height else c).group_by("name").agg((pl.col("end") - pl.col("ts")).sum().alias("t"))
              .sort(["t", "name"], descending=[True, False], maintain_order=True).head(6))
    bench = c.filter(pl.col("name").str.starts_with("CachingAutotuner"))
    k = ctx.trace.gpu.select("launch_ts", "dur").filter(pl.col("launch_ts").is_not_null())  # (a filter copies every column)
    bench_gpu = 0
    if bench.height:
        kb = (k.sort("launch_ts").join_asof(merge(bench.select("ts", "end")).rename({"ts": "_b", "end": "_be"}).sort("_b"),
                                           left_on="launch_ts", right_on="_b", strategy="backward")
              .filter(pl.col("launch_ts") < pl.col("_be")))
        bench_gpu = int(kb["dur"].sum())
    evidence = Evidence(
        compiles=n, steps_with_compiles=sorted(c["step"].unique().to_list()),
        compile_host_time_per_step_us={str(s): round(t / 1000, 3) for s, t in host.sort("step").rows()},
        recompiled_regions=recompiled.to_list(),
        phases=[Phase(phase=r["name"], time_us=round(r["t"] / 1000, 3)) for r in phases.to_dicts()],
        autotune_gpu_time_us=round(bench_gpu / 1000, 3),
        savings_per_step_us={str(s): round(r / 1000, 3) for s, r in rem.rows()},
    )
    steps = sorted(c["step"].unique().to_list())
    return [ctx.finding(cost_ns=int(host["end"].sum()), savings_ns=savings, count=n, steps=steps, evidence=evidence,
                        title=f"torch.compile compiled {n} times inside the analysed steps",
                        fix=FIX if ctx.trace.has_gpu else FIX_CPU)]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the compilations inside the steps (after the first, warm-up one)
    leave the host path — every host row inside a compile span — and the kernels they launched (autotuning
    benchmarks) take no device time."""
    c = _spans(ctx)
    if c.height == 0:
        return None
    g = ctx.trace.gpu.select("i", "launch_ts").filter(pl.col("launch_ts").is_not_null()).sort("launch_ts")
    sp = c.select(pl.col("ts").alias("_s"), pl.col("end").alias("_e")).sort("_s")
    bench = (g.join_asof(sp, left_on="launch_ts", right_on="_s", strategy="backward")
             .filter(pl.col("launch_ts") < pl.col("_e"))["i"].cast(pl.Int64).to_list())
    return Transform(NAME, host_spans=spans(c), gpu_dur=dict.fromkeys(bench, 0))
