"""TV401 input-bound: the step waits for the DataLoader.

## What it detects
The share of step time spent in the DataLoader (`enumerate(DataLoader)#…__next__` or
`enumerate(DataPipe)#…` spans) as the tb_plugin measures it: the DataLoader role of its priority-ordered
step breakdown (instants not already taken by kernels, copies, communication or runtime calls). It fires when
that share reaches `moderate_pct` (tb_plugin's recommendation rule 1: DataLoader time / step time > 5 %).

## Why it is slow
With `num_workers=0` the training process itself decodes, augments and collates every batch between two
steps, and nothing is queued on the GPU meanwhile; with too few workers or an expensive transform the
workers cannot keep up and `__next__` blocks. Either way the GPU idles for the whole time (the classifier's
`input` class).

## How to fix
Load data in parallel and ahead of time: `DataLoader(num_workers=N, persistent_workers=True,
prefetch_factor=2…)`, `pin_memory=True` with `non_blocking=True` copies; move decoding/augmentation to the
GPU (DALI, torchvision v2 transforms on tensors) or pre-process the dataset offline; cache decoded samples.

On a trace without GPU activity (CPU training) the same spans are measured on the host: the DataLoader part
of the step (`cpu.split_us.input` of the report: instants inside a DataLoader span), which is what moving
data loading into worker processes takes off the critical path.

## Evidence
Per step: DataLoader time and share, the GPU idle time during data loading (`input` class), the DataLoader
op name (single-process vs multi-process iterator); cost = DataLoader host time, savings = the GPU idle time
that overlapping data loading with compute would recover.

## Options
- `moderate_pct` (5.0): DataLoader share at which a finding is reported (warning) — tb_plugin rule 1 (5 %), XProf "moderately input-bound" (5 %).
- `high_pct` (20.0): share at which it is an error — XProf "highly input-bound" (20 %).

## References
- tb_plugin `profiler/data.py: analyze()` recommendation 1 — https://github.com/pytorch/kineto (tb_plugin/torch_tb_profiler/profiler/data.py).
- XProf input-pipeline analysis (5 %/20 %) — https://github.com/openxla/xprof (overview page recommendations).
- torch.profiler `SynchronizedDataLoaderPattern` (num_workers=0) — https://github.com/pytorch/pytorch (torch/profiler/_pattern_matcher.py).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.breakdown import step_breakdown
from traceview.analyses.classify import dataloader_spans
from traceview.analyses.features import Features
from traceview.analyses.intervals import clip, per_window
from traceview.analyses.replay import Transform, spans
from traceview.evidence import UNSET, Meta, UnsetType
from traceview.ruleapi import Finding, Option, RuleContext

CODE = "TV401"
NAME = "input-bound"
CLASS = "input"  # the classifier class whose time a fix of these findings removes
FIX_REMOVES_CLASS = True  # the GPU idles for this reason only: a fix removes every instant of CLASS
SEVERITY = "warning"
TITLE = "Steps wait for the DataLoader; the GPU idles meanwhile"
TITLE_CPU = "Steps wait for the DataLoader in the training process"
CPU = True  # also runs on traces without GPU activity (the host-side measure)
OPTIONS = {
    "moderate_pct": Option(5.0, "tb_plugin rule 1 / XProf moderately input-bound (% of step time)"),
    "high_pct": Option(20.0, "XProf highly input-bound (% of step time)"),
}
FIX = (
    "The GPU has nothing queued while the host prepares the next batch: data loading runs on the critical "
    "path instead of in parallel with the step. Give the DataLoader worker processes (num_workers > 0, "
    "persistent_workers=True, prefetch_factor) so batches are ready before they are needed, pin memory "
    "(pin_memory=True) and copy with non_blocking=True, and make the per-sample transform cheaper (decode once, "
    "augment on the GPU)."
)


FIX_CPU = (
    "Data loading runs on the critical path: the training process prepares each batch itself between "
    "steps instead of in parallel with them. Give the DataLoader worker processes (num_workers > 0, "
    "persistent_workers=True, prefetch_factor) so batches are ready before they are needed, and make the "
    "per-sample transform cheaper (decode once, cache decoded samples)."
)


#: a CPU trace whose DataLoader already has worker processes: more or cheaper workers, never "use workers"
FIX_CPU_WORKERS = (
    "The DataLoader already runs worker processes, yet the training process still waits for batches: the workers "
    "build them slower than the step consumes them, and on a CPU job they share the cores with the training "
    "itself. Raise num_workers only as far as free cores allow (persistent_workers=True, prefetch_factor), and make "
    "the per-sample transform cheaper (decode once, cache decoded samples, smaller inputs)."
)


def _check_cpu(ctx: RuleContext) -> list[Finding]:
    """Host-side measure for traces without GPU activity: the DataLoader part of each step (cpu.step_split)."""
    split = ctx.cpu["split"]
    total = int(split["input"].sum()) if split.height else 0
    pct = ctx.pct(total)
    if pct < ctx.options["moderate_pct"]:
        return []
    dl = dataloader_spans(ctx.trace)
    ev = Evidence(
        dataloader_us=round(total / 1000, 3),
        dataloader_pct=round(pct, 2),
        source="host (no GPU activity)",
        op=dl["name"].mode().sort().first() if dl.height else None,
        calls=dl.height,
        per_step=[
            StepWait(
                step=r["step"],
                dataloader_us=round(r["input"] / 1000, 3),
                pct=round(100.0 * r["input"] / r["dur"], 2) if r["dur"] else None,
            )
            for r in split.iter_rows(named=True)
        ],  # one per step
    )
    fired = split.filter(pl.col("input") > 0)["step"].to_list()
    count = dl.filter((pl.col("end") > ctx.lo) & (pl.col("ts") < ctx.hi)).height if dl.height else 0
    fix = FIX_CPU_WORKERS if ctx.features.dataloader_workers else FIX_CPU
    return [ctx.finding(steps=fired, count=count, cost_ns=total, evidence=ev, title=TITLE_CPU, fix=fix)]


def measure(ctx: RuleContext) -> dict | None:
    """The DataLoader wait of a GPU trace as tb_plugin measures it: {total, pct, idle, calls, fired, evidence}
    (None: no DataLoader). TV402 loader-workers reads the same measure."""
    trace, steps, window = ctx.trace, ctx.steps, ctx.window_ns
    dl = dataloader_spans(trace)
    if dl.height == 0 or not window:
        return None
    lo, hi = ctx.lo, ctx.hi
    host = per_window(clip(dl.select("ts", "end"), lo, hi), steps.select("step", "ts", "end"))
    # tb_plugin's DataLoader time: the DataLoader role of its priority breakdown (instants not taken by
    # kernels, copies, communication or runtime calls)
    per = step_breakdown(trace, steps).select("step", pl.col("dataloader").alias("dur")).sort("step")
    total = int(per["dur"].sum())
    # as a share of tb_plugin's own step windows, the number the plugin reports
    tb = (
        steps.select("step", (pl.col("tb_end") - pl.col("tb_ts")).alias("sd"))
        if "tb_ts" in steps.columns
        else steps.select("step", (pl.col("end") - pl.col("ts")).alias("sd"))
    )
    tb_window = int(tb["sd"].sum())
    pct = 100.0 * total / tb_window if tb_window else 0.0
    part = ctx.class_time("input")
    idle = part.group_by("step").agg((pl.col("end") - pl.col("ts")).sum().alias("idle"))
    idle_total = int(idle["idle"].sum()) if idle.height else 0
    rows = per.join(tb, on="step").join(idle, on="step", how="left").sort("step")
    ev = Evidence(
        dataloader_us=round(total / 1000, 3),
        dataloader_pct=round(pct, 2),
        dataloader_host_us=round(int(host["dur"].sum()) / 1000, 3),
        gpu_idle_during_input_us=round(idle_total / 1000, 3),
        op=dl["name"].mode().sort().first(),
        calls=dl.height,
        per_step=[
            StepWait(
                step=r["step"],
                dataloader_us=round(r["dur"] / 1000, 3),
                pct=round(100.0 * r["dur"] / r["sd"], 2) if r["sd"] else None,
                gpu_idle_us=round((r["idle"] or 0) / 1000, 3),
            )
            for r in rows.to_dicts()
        ],
    )
    return {
        "total": total,
        "pct": pct,
        "idle": idle_total,
        "evidence": ev,
        "calls": dl.filter((pl.col("end") > lo) & (pl.col("ts") < hi)).height,
        "fired": rows.filter(pl.col("dur") > 0)["step"].to_list(),
    }


class StepWait(msgspec.Struct, kw_only=True):
    """One step's DataLoader wait."""

    step: Annotated[int, Meta(description="the step")]
    dataloader_us: Annotated[float, Meta(description="its DataLoader time (µs)")]
    pct: Annotated[float | None, Meta(description="that as % of the step")]
    gpu_idle_us: Annotated[float | UnsetType, Meta(description="GPU idle while waiting for input (µs)")] = (
        UNSET
    )


class Evidence(msgspec.Struct, kw_only=True):
    dataloader_us: Annotated[
        float,
        Meta(
            description="DataLoader time in the analysed steps (µs; tb_plugin's DataLoader role, or host time without a GPU)"
        ),
    ]
    dataloader_pct: Annotated[float, Meta(description="that as % of the steps")]
    dataloader_host_us: Annotated[
        float | UnsetType, Meta(description="host time inside the DataLoader's `__next__` spans (µs)")
    ] = UNSET
    gpu_idle_during_input_us: Annotated[
        float | UnsetType, Meta(description="the classifier's `input` time: GPU idle waiting for input (µs)")
    ] = UNSET
    source: Annotated[
        str | UnsetType, Meta(description="set on traces without GPU activity: what was measured")
    ] = UNSET
    op: Annotated[str | None, Meta(description="the DataLoader op's name")]
    calls: Annotated[int, Meta(description="its calls")]
    per_step: Annotated[list[StepWait], Meta(description="each step's wait")]


def check(ctx: RuleContext) -> list[Finding]:
    if ctx.cpu is not None:
        return _check_cpu(ctx)
    if ctx.features.dataloader_workers:  # a loader with workers that cannot keep up: TV402 loader-workers
        return []
    m = measure(ctx)
    if m is None or m["pct"] < ctx.options["moderate_pct"]:
        return []
    return [
        ctx.finding(
            steps=m["fired"],
            count=m["calls"],
            cost_ns=m["total"],
            savings_ns=m["idle"],
            severity_pct=m["pct"],
            evidence=m["evidence"],
            fix=fix_for(ctx.features),
        )
    ]


def fix_for(f: Features) -> str:
    """The fix, conditioned on the trace: a DataLoader that already has worker processes needs more or faster
    workers, not workers."""
    if f.dataloader_workers:
        return (
            "The DataLoader already runs worker processes, yet the host still waits for batches: the workers "
            "cannot keep up. Raise num_workers (up to the free CPU cores), prefetch_factor and "
            "persistent_workers=True, make the per-sample transform cheaper (decode once, smaller images, "
            "augment on the GPU), pin memory and copy with non_blocking=True."
        )
    return FIX


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the DataLoader's `__next__` time leaves the training thread's path
    (workers prepare batches ahead) — every host row inside the spans. Pinning and the copy stay. A loader that
    already has workers is TV402's (its transform is the same)."""
    if ctx.cpu is None and ctx.features.dataloader_workers:
        return None
    sp = dataloader_spans(ctx.trace)
    if sp.height == 0:
        return None
    return Transform(NAME, host_spans=spans(sp))
