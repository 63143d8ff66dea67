"""TV110 cpu-op-overhead: a CPU step made of many tiny ops, each paying the fixed cost of an eager op.

## What it detects
On a trace without GPU activity (CPU training or inference), the top-level ops (those called from Python, not
from inside another op) whose kind (op name and input shapes) runs for less than `tiny_op_us` per call
(median), and the share of the analysed steps they take. It fires when that share reaches `moderate_pct`; `error` from `high_pct`. Traces with GPU activity are
left to `launch-bound` (TV101), where the same overhead shows as a GPU waiting for launches.

## Why it is slow
Every eager PyTorch op pays a fixed CPU cost before any arithmetic: the Python call, argument parsing, the
dispatcher, dtype/device checks and allocating its output — a few µs. An op on a small tensor (a 64 x 64
add, an optimizer update of one small parameter) does less arithmetic than that, so a step made of thousands
of them spends most of its time in the framework rather than computing. Recording the trace adds to each op
as well (the collector's manifest shows how much: the profiled against the unprofiled step time).

## How to fix
Do the same work in fewer, larger ops: batch the inputs; replace Python loops over small tensors by one
vectorised op; use foreach or fused optimizer implementations (`foreach=True`) instead of a per-parameter
update; let `torch.compile` fuse chains of small ops into one generated kernel; for inference,
`torch.jit`/`torch.export` paths with fewer dispatches. When the step is small by nature, run several
requests or samples per call.

## Evidence
Tiny ops per step and their time, the share of the step; the most frequent tiny ops (name, calls, median
µs); the median duration of all top-level ops; the step's time outside any op (Python between the ops,
`cpu.split_pct.outside_ops` of the report), which shrinks together with the op count; and, with a
`traceview collect` manifest, the profiled and unprofiled step times. Cost = time in the tiny ops; savings
= the same, an upper bound: fusing them removes their per-op cost, not their arithmetic.
No replay model: the rule runs on traces without GPU activity, where there is no device graph to replay; its saving is its own per-step estimate of the tiny ops' time.

## Options
- `tiny_op_us` (20.0): an op shorter than this is dominated by its fixed per-op cost (eager PyTorch spends a
  few µs per op before any arithmetic, so under ~20 µs most of an op's time is overhead).
- `moderate_pct` (5.0): share of step time at which a finding is a warning.
- `high_pct` (20.0): share at which it is an error.

## References
- PyTorch performance tuning guide, "Use torch.compile" and "Use foreach/fused optimizers":
  https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
- torch.profiler `key_averages()`: per-op CPU total and self time, the measure used here.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.cpu import COLLECTIVE_RE, top_level_ops
from traceview.analyses.features import Features
from traceview.analyses.layers import UNATTRIBUTED, host_layers
from traceview.analyses.rowid import join_by_id
from traceview.evidence import UNSET, Meta, UnsetType
from traceview.ingest.manifest import step_overhead_ms
from traceview.ruleapi import Finding, Option, RuleContext

CODE = "TV110"
NAME = "cpu-op-overhead"
SEVERITY = "warning"
TITLE = "The CPU step is made of many tiny ops; their fixed per-op cost dominates"
CPU = True  # runs on traces without GPU activity (only there: with a GPU, launch-bound judges the same cost)
CLASS = "cpu_launch"  # the same per-op cost that, with a GPU, shows as the GPU waiting for launches
OPTIONS = {
    "tiny_op_us": Option(20.0, "an op shorter than this (µs) is dominated by the fixed cost of an eager op"),
    "moderate_pct": Option(5.0, "share of step time in tiny ops at which a finding is reported (warning)"),
    "high_pct": Option(20.0, "share at which it is an error"),
}
FIX = ("Each eager op pays a fixed CPU cost (Python call, dispatcher, checks, output allocation) of a few µs "
       "before any arithmetic, and these ops do less work than that. Do the same work in fewer, larger ops: "
       "batch inputs, replace Python loops over small tensors by vectorised ops, use foreach/fused optimizers, "
       "and let torch.compile fuse chains of small ops.")


class TinyOp(msgspec.Struct, kw_only=True):
    """A tiny op kind by its calls."""

    op: Annotated[str, Meta(description="the op's name")]
    calls: Annotated[int, Meta(description="its tiny calls in the analysed steps")]
    median_us: Annotated[float, Meta(description="their median time (µs)")]


class Evidence(msgspec.Struct, kw_only=True):
    tiny_ops_per_step: Annotated[float, Meta(description="top-level ops per step whose kind's median is under `tiny_op_us`")]
    ops_per_step: Annotated[float, Meta(description="top-level ops per step")]
    tiny_op_time_per_step_us: Annotated[float, Meta(description="the tiny ops' time per step (µs)")]
    tiny_op_pct: Annotated[float, Meta(description="that as % of the analysed window")]
    tiny_op_us: Annotated[float, Meta(description="the `tiny_op_us` option in force (µs)")]
    median_op_us: Annotated[float, Meta(description="median top-level op time (µs)")]
    top_tiny_ops: Annotated[list[TinyOp], Meta(description="the 5 tiny op kinds with the most calls")]
    outside_ops_pct: Annotated[float | None, Meta(description="% of the window outside any op (Python between ops)")]
    profiled_step_ms: Annotated[float | UnsetType, Meta(
        description="the collector's profiled step time (ms; with a manifest)")] = UNSET
    unprofiled_step_ms: Annotated[float | UnsetType, Meta(
        description="the collector's unprofiled step time (ms; with a manifest)")] = UNSET
    note: Annotated[str | UnsetType, Meta(description="set when the profiler inflates the per-op overhead")] = UNSET


def fix_for(f: Features) -> str:
    """The fix without the optimizer advice when the trace already runs a fused or foreach optimizer."""
    return FIX.replace(" use foreach/fused optimizers,", "") if f.fused_optimizer or f.foreach_optimizer else FIX


def check(ctx: RuleContext) -> list[Finding]:
    trace, steps = ctx.trace, ctx.steps
    if ctx.cpu is None or steps.height == 0 or not ctx.window_ns:
        return []
    opts = ctx.options
    w = steps.select("step", pl.col("ts").alias("_wts"), pl.col("end").alias("_wend")).sort("_wts")
    top = (top_level_ops(trace).filter(~pl.col("name").str.contains(COLLECTIVE_RE)).sort("ts")
           .join_asof(w, left_on="ts", right_on="_wts", strategy="backward").filter(pl.col("ts") < pl.col("_wend")))
    if top.height == 0:
        return []
    # an op kind (name and input shapes) is tiny by its median call: one call stretched by the scheduler on a
    # busy machine does not make the kind big, nor one fast call a big kind tiny
    dims = pl.col("input_dims").cast(pl.String).fill_null("") if "input_dims" in trace.host.columns else pl.lit("")
    top = join_by_id(top, "i", trace.host, dims.alias("input_dims")).with_columns(
        _med=pl.col("dur").median().over("name", "input_dims"))
    tiny = top.filter(pl.col("_med") < opts["tiny_op_us"] * 1000)
    cost = int(tiny["dur"].sum())
    share = ctx.pct(cost)
    if share < opts["moderate_pct"]:
        return []
    names = (tiny.group_by("name").agg(pl.len().alias("calls"), pl.col("dur").median().alias("med"))
             .sort("calls", "name", descending=[True, False]).head(5))
    split = ctx.cpu.get("totals") or {}
    n = steps.height
    ev = Evidence(
        tiny_ops_per_step=round(tiny.height / n, 1), ops_per_step=round(top.height / n, 1),
        tiny_op_time_per_step_us=round(cost / n / 1000, 3), tiny_op_pct=round(share, 2),
        tiny_op_us=opts["tiny_op_us"], median_op_us=round(float(top["dur"].median()) / 1000, 3),
        top_tiny_ops=[TinyOp(op=r["name"], calls=r["calls"], median_us=round(r["med"] / 1000, 3))
                      for r in names.iter_rows(named=True)],  # 5 rows
        outside_ops_pct=round(ctx.pct(split["outside_ops"]), 2) if split.get("outside_ops") is not None else None,
    )
    st = ((trace.meta.manifest or {}).get("step_time")) or {}
    prof, unprof = st.get("profiled_ms_median"), st.get("unprofiled_ms_median")
    if isinstance(prof, (int, float)) and isinstance(unprof, (int, float)) and unprof > 0:
        ev.profiled_step_ms, ev.unprofiled_step_ms = prof, unprof
        if (step_overhead_ms(trace.meta.manifest) or 0) > 0.2 * unprof:
            ev.note = (f"recorded steps took {prof:.2f} ms against {unprof:.2f} ms unprofiled: the profiler adds "
                          "its own cost to every op, so part of this per-op overhead is the recording's; the "
                          "unprofiled step bounds what fusing can save")
    lay = host_layers(trace).join(tiny.select("i"), on="i").filter(pl.col("layer") != UNATTRIBUTED)
    f = ctx.finding(cost_ns=cost, count=tiny.height, steps=sorted(tiny["step"].unique().to_list()), evidence=ev,
                    fix=fix_for(ctx.features),
                    title=f"{ev.tiny_ops_per_step:g} ops per step run under {opts['tiny_op_us']:g} µs each, "
                          f"dominated by their fixed per-op cost ({share:.1f} % of the step)")
    f.layer = str(lay["layer"].mode().sort().first()) if lay.height else None  # a host layer: ctx.layer_of is GPU-side
    return [f]
