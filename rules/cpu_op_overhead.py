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
vectorised op; let `torch.compile` fuse chains of small ops into one generated kernel; for inference,
`torch.jit`/`torch.export` paths with fewer dispatches. When the step is small by nature, run several
requests or samples per call. When the tiny ops are a single-tensor optimizer's per-parameter updates (inside
its `Optimizer.step#…` span), construct it with `fused=True` (Adam, AdamW, SGD and Adagrad have a CPU kernel
since PyTorch 2.4: one op over every parameter) or compile the step; `foreach=True` saves little or nothing on
CPU, where the `_foreach_` ops run the same per-tensor kernels one after another (PyTorch leaves CPU
optimizers single-tensor by default; measured on HF GPT-2 on CPU: 0.13 ms of 11.6 ms, where `fused=True` saved
1.3 ms).

## Evidence
Tiny ops per step and their time, the share of the step; the most frequent tiny ops (name, calls, median
µs); the median duration of all top-level ops; the step's time outside any op (Python between the ops,
`cpu.split_pct.outside_ops` of the report), which shrinks together with the op count; and, with a
`traceview collect` manifest, the profiled and unprofiled step times. Cost = time in the tiny ops.
Savings are replayed (the host-only replay of a CPU trace, solved to the collector's unprofiled step where
there is one: `fix_transform`), in unprofiled terms, each recorded op's time scaled by the step's unprofiled /
traced ratio: a fused optimizer keeps one pass over its parameters' state (`FUSED_TOUCHES` tensors of the
parameter count read from the per-parameter update `addcdiv_`'s shapes, at the bandwidth the loop's first op on
the moments, `lerp_`, reaches in the trace: the ops after it find the tensors in cache) and drops the rest of its per-parameter ops' time; every other tiny op
loses its fixed cost, the floor of the step's top-level op times (`FLOOR_Q`; fusing keeps the arithmetic).
Without recorded shapes the optimizer's ops are priced as the others.

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

from traceview.analyses import opshapes
from traceview.analyses.cpu import COLLECTIVE_RE, top_level_ops
from traceview.analyses.features import Features
from traceview.analyses.fixes import pricing_transform
from traceview.analyses.layers import UNATTRIBUTED, host_layers
from traceview.analyses.param_work import OPT_STEP_RE
from traceview.analyses.replay import Transform, replay
from traceview.analyses.roofline import DTYPE_BYTES
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
       "batch inputs, replace Python loops over small tensors by vectorised ops, and let torch.compile fuse "
       "chains of small ops.")
FIX_OPTIMIZER = (" {pct:.0f} % of their time is the single-tensor {cls} updating each parameter with its own ops: "
                 "construct it with fused=True (one CPU kernel over every parameter since PyTorch 2.4) or compile "
                 "its step; foreach=True saves little on CPU, where its _foreach_ ops run the same per-tensor "
                 "kernels one after another.")
#: optimizer classes with a fused CPU kernel (PyTorch >= 2.4) and the tensors of a parameter's size its fused
#: step reads and writes: Adam/AdamW the parameter, its gradient and both moments (4 reads, 3 writes); Adagrad the
#: parameter, its gradient and the sum of squares (3 + 2)
FUSED_TOUCHES = {"Adam": 7, "AdamW": 7, "Adagrad": 5}
#: the per-parameter update every single-tensor step above calls once per parameter (`param.addcdiv_`): its
#: first input's shapes sum to the parameter count
PER_PARAM_OP = "aten::addcdiv_"
#: the per-parameter step counter's increment (`step_t += 1`, on a 0-d tensor): the fused step keeps it
COUNTER_OP = "aten::add_"
#: in-place elementwise ops the bandwidth is read from, and the tensors of their size each reads and writes. The
#: first op on a parameter's moments (Adam's `exp_avg.lerp_(grad, …)`) reads them from memory; the ops after it find
#: them in cache and run faster than the fused step's one pass can stream (read from them, GPT-2 and the MLP at
#: width 512 priced +29 % and +18 %; from `lerp_`, +20 % and +13 %): `lerp_` where the loop has it, else all of them
COLD_TOUCHES = {"aten::lerp_": 3}
INPLACE_TOUCHES = {"aten::mul_": 2, "aten::add_": 3, "aten::lerp_": 3, "aten::addcmul_": 4, "aten::addcdiv_": 4}
#: the smallest such op read for the bandwidth (elements), whose time less the op floor is its bytes' (smaller ones
#: are mostly their fixed cost)
BW_MIN_ELEMS = 1 << 12
#: quantile of the step's top-level op times taken as an op's fixed cost (the ops with no arithmetic beside it)
FLOOR_Q = 0.1


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
    optimizer: Annotated[str | UnsetType, Meta(
        description="the single-tensor optimizer class whose per-parameter ops are among the tiny ones")] = UNSET
    optimizer_loop_per_step_us: Annotated[float | UnsetType, Meta(
        description="its per-parameter loop per step: from the first to the last op inside its `Optimizer.step#…` "
                    "spans, the ops and the Python between them (µs, traced)")] = UNSET
    optimizer_params: Annotated[int | UnsetType, Meta(
        description="elements of the parameters one step updates (its `addcdiv_` calls' first inputs)")] = UNSET
    fused_pass_us: Annotated[float | UnsetType, Meta(
        description="the fused step's one pass over the parameters' state per step (µs, unprofiled): its bytes "
                    "at the bandwidth the loop's first op on the moments (`lerp_`) reaches")] = UNSET
    op_floor_us: Annotated[float, Meta(
        description="an op's fixed cost: the floor of the step's top-level op times (µs, traced; `FLOOR_Q`)")] = 0.0
    unprofiled_ratio: Annotated[float, Meta(
        description="replayed unprofiled step / traced step: the scale of each recorded op's time")] = 1.0


def fix_for(f: Features, optimizer: str | None = None, pct: float = 0.0) -> str:
    """The fix, with the fused-optimizer advice where the tiny ops are a single-tensor optimizer's (`optimizer`,
    `pct` % of their time): never where the trace already runs a fused or foreach one."""
    if optimizer and not (f.fused_optimizer or f.foreach_optimizer):
        return FIX + FIX_OPTIMIZER.format(cls=optimizer, pct=pct)
    return FIX


def _tops(ctx: RuleContext) -> pl.DataFrame:
    """The top-level ops in the analysed steps [i, name, tid, ts, end, dur, step, input_dims, input_type, _med]."""
    trace, steps = ctx.trace, ctx.steps
    w = steps.select("step", pl.col("ts").alias("_wts"), pl.col("end").alias("_wend")).sort("_wts")
    top = (top_level_ops(trace).filter(~pl.col("name").str.contains(COLLECTIVE_RE)).sort("ts")
           .join_asof(w, left_on="ts", right_on="_wts", strategy="backward").filter(pl.col("ts") < pl.col("_wend")))
    cols = [c for c in ("input_dims", "input_type") if c in trace.host.columns]
    top = join_by_id(top, "i", trace.host, *cols) if cols else top
    for c in ("input_dims", "input_type"):
        if c not in top.columns:
            top = top.with_columns(pl.lit(None, pl.String).alias(c))
    # an op kind (name and input shapes) is tiny by its median call: one call stretched by the scheduler on a
    # busy machine does not make the kind big, nor one fast call a big kind tiny
    return top.with_columns(_med=pl.col("dur").median().over("name", pl.col("input_dims").cast(pl.String).fill_null("")))


def _in_optimizer(ctx: RuleContext, top: pl.DataFrame) -> pl.DataFrame:
    """`top` with `_cls` and `_sts`: the class (one of FUSED_TOUCHES) and start of the single-tensor optimizer's
    `Optimizer.step#<class>.step` span on the op's thread that holds it, else null."""
    h = ctx.trace.host
    spans = (h.select("name", "tid", pl.col("ts").alias("_sts"), pl.col("end").alias("_send"))
             .filter(pl.col("name").str.contains(OPT_STEP_RE))
             .with_columns(pl.col("name").str.extract(OPT_STEP_RE).alias("_cls"))
             .filter(pl.col("_cls").is_in(list(FUSED_TOUCHES))).drop("name").sort("_sts"))
    if spans.height == 0 or ctx.features.fused_optimizer or ctx.features.foreach_optimizer:
        return top.with_columns(pl.lit(None, pl.String).alias("_cls"), pl.lit(None, pl.Int64).alias("_sts"))
    j = top.sort("ts").join_asof(spans, left_on="ts", right_on="_sts", by="tid", strategy="backward",
                                  check_sortedness=False)  # (both sorted by time; polars cannot check within `by`)
    inside = pl.col("end") <= pl.col("_send")
    return j.with_columns(pl.when(inside).then(pl.col("_cls")).alias("_cls"),
                          pl.when(inside).then(pl.col("_sts")).alias("_sts")).drop("_send")


def _shapes(top: pl.DataFrame) -> pl.DataFrame:
    """[input_dims, input_type, _n, _bpe]: each distinct shape's first tensor's elements and bytes per element
    (null where unreadable)."""
    combos = top.select(pl.col("input_dims").cast(pl.String), pl.col("input_type").cast(pl.String)).unique()
    rows = []
    for d, t in combos.iter_rows():  # distinct shapes, not events
        ts = opshapes.decode(d, t)
        n = None
        if ts:
            n = 1
            for x in ts[0][0]:
                n *= x
        rows.append((d, t, n, DTYPE_BYTES.get(ts[0][1]) if ts else None))
    return pl.DataFrame(rows, schema={"input_dims": pl.String, "input_type": pl.String, "_n": pl.Int64,
                                      "_bpe": pl.Int64}, orient="row")


def _fused_loops(opt: pl.DataFrame, ratio: float, floor: float) -> pl.DataFrame | None:
    """Per optimizer span of `opt` (its ops, with `_cls` and `_sts`): [tid, _cls, loop_ts, loop_end, fused_ns] —
    the per-parameter loop (its first op's start to its last op's end: the ops and the Python between them) and
    the fused step's one pass over the same parameters (unprofiled ns); None without the shapes to size it."""
    if opt["input_dims"].is_null().all():
        return None
    opt = opt.with_columns(pl.col("input_dims").cast(pl.String), pl.col("input_type").cast(pl.String)).join(
        _shapes(opt), on=["input_dims", "input_type"], how="left", nulls_equal=True)
    touches = COLD_TOUCHES if opt["name"].is_in(list(COLD_TOUCHES)).any() else INPLACE_TOUCHES
    big = opt.filter(pl.col("name").is_in(list(touches)) & (pl.col("_n") >= BW_MIN_ELEMS) & (pl.col("dur") > 0))
    if big.height == 0 or not (opt["name"] == PER_PARAM_OP).any():
        return None
    # bytes per ns those of the loop's own in-place ops move, in unprofiled time: an op's time less the fixed
    # cost every op pays (the floor; at least the floor again, so a call at the floor is no infinite rate)
    moving = pl.max_horizontal(pl.col("dur") - floor, pl.lit(floor), pl.lit(1.0)) * ratio
    bw = float(big.select(pl.col("name").replace_strict(touches, return_dtype=pl.Int64) * pl.col("_n")
                          * pl.col("_bpe").fill_null(4) / moving).to_series().median())
    pass_bytes = pl.when(pl.col("name") == PER_PARAM_OP).then(
        pl.col("_cls").replace_strict(FUSED_TOUCHES, return_dtype=pl.Int64) * pl.col("_n").fill_null(0)
        * pl.col("_bpe").fill_null(4)).otherwise(0)
    # and each parameter's step counter incremented: the fused step's `_foreach_add_` runs the loop's own scalar
    # `step_t += 1` (an `add_` on a 0-d tensor) per parameter, one after another, as foreach does on CPU
    counter = (pl.col("name") == COUNTER_OP) & pl.col("input_dims").str.starts_with("[[]")
    return opt.group_by("tid", "_sts", "_cls").agg(
        pl.col("ts").min().alias("loop_ts"), pl.col("end").max().alias("loop_end"),
        (pass_bytes.sum() / bw + pl.col("dur").filter(counter).sum() * ratio).alias("fused_ns"),
        pl.col("_n").filter(pl.col("name") == PER_PARAM_OP).sum().alias("params"),
    ).sort("loop_ts")


def _model(ctx: RuleContext) -> dict:
    """The fix's replay model: {transform, fused (the optimizer's part alone), ratio, floor_ns, cls, opt_ns,
    fused_ns, opt_ids, params} (totals over the analysed steps; `cls` None when no single-tensor optimizer is priced
    as a fused step)."""
    top = _in_optimizer(ctx, _tops(ctx))
    base = pricing_transform(ctx)
    n = max(ctx.steps.height, 1)
    traced = ctx.window_ns / n
    ratio = min(1.0, float(replay(ctx.trace, ctx.steps, [base]).mean()) / traced) if traced else 1.0
    floor = float(top["dur"].quantile(FLOOR_Q)) if top.height else 0.0
    opt = top.filter(pl.col("_cls").is_not_null())
    loops = _fused_loops(opt, ratio, floor) if opt.height else None
    cls = str(loops["_cls"].mode().sort().first()) if loops is not None and loops.height else None
    in_opt = top["_cls"].is_not_null() if cls else pl.Series([False] * top.height)
    # each per-parameter loop (its ops and the Python between them, in unprofiled terms: the step's ratio) gives
    # way to the fused pass, taken off at its first op (a CPU step is one host interval: where is moot); every
    # other tiny op loses its fixed cost and keeps its arithmetic
    loop_cut: dict[int, int] = {}
    if cls:
        firsts = opt.sort("ts").group_by("tid", "_sts").agg(pl.col("i").first())
        got = loops.join(firsts, on=["tid", "_sts"]).select(
            "i", ((pl.col("loop_end") - pl.col("loop_ts")) * ratio - pl.col("fused_ns")).round().cast(pl.Int64))
        loop_cut = {int(i): int(c) for i, c in got.iter_rows() if c > 0}
    tiny = top["_med"] < ctx.options["tiny_op_us"] * 1000
    cut = pl.when(~in_opt & tiny).then(pl.min_horizontal(pl.col("dur"), pl.lit(floor)) * ratio).otherwise(0.0)
    cuts = top.select("i", cut.round().cast(pl.Int64).alias("c")).filter(pl.col("c") > 0)
    t = Transform(NAME, host_cut={**dict(zip(cuts["i"].to_list(), cuts["c"].to_list(), strict=True)), **loop_cut})
    return {"transform": t, "fused": Transform(NAME, host_cut=loop_cut) if loop_cut else None, "ratio": ratio, "floor_ns": floor, "cls": cls,
            "opt_ns": float((loops["loop_end"] - loops["loop_ts"]).sum()) if cls else 0.0,
            "fused_ns": float(loops["fused_ns"].sum()) if cls else 0.0, "opt_ids": top.filter(in_opt)["i"],
            "params": int(loops["params"].max()) if cls else 0}


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation of the CPU step: a single-tensor optimizer's per-parameter ops become one
    fused pass (their bytes at the bandwidth its in-place ops reach from memory), every other tiny op loses its fixed
    cost (the floor of the step's op times), each in unprofiled terms (the step's unprofiled / traced ratio)."""
    if ctx.cpu is None or ctx.steps.height == 0 or not ctx.window_ns:
        return None
    t = ctx.once("model", lambda: _model(ctx))["transform"]
    return t if t.host_cut else None


def fix_variants(ctx: RuleContext) -> dict[str, Transform]:
    """{variant: the fix made that way}: `fused`, the single-tensor optimizer constructed with `fused=True` alone
    (its loops become the fused pass; the other tiny ops stay), where the trace has one. `foreach=True` is no
    variant: on CPU it runs the same per-tensor kernels (priced at nothing)."""
    if ctx.cpu is None or ctx.steps.height == 0 or not ctx.window_ns:
        return {}
    t = ctx.once("model", lambda: _model(ctx))["fused"]
    return {"fused": t} if t is not None else {}


def check(ctx: RuleContext) -> list[Finding]:
    trace, steps = ctx.trace, ctx.steps
    if ctx.cpu is None or steps.height == 0 or not ctx.window_ns:
        return []
    opts = ctx.options
    top = _tops(ctx)
    if top.height == 0:
        return []
    tiny = top.filter(pl.col("_med") < opts["tiny_op_us"] * 1000)
    cost = int(tiny["dur"].sum())
    if ctx.pct(cost) < opts["moderate_pct"]:
        return []
    # (its saving is the fix runner's replay of `fix_transform`, as every rule's: not priced twice here)
    m = ctx.once("model", lambda: _model(ctx))
    n = steps.height
    names = (tiny.group_by("name").agg(pl.len().alias("calls"), pl.col("dur").median().alias("med"))
             .sort("calls", "name", descending=[True, False], maintain_order=True).head(5))
    split = ctx.cpu.get("totals") or {}
    share = ctx.pct(cost)
    ev = Evidence(
        tiny_ops_per_step=round(tiny.height / n, 1), ops_per_step=round(top.height / n, 1),
        tiny_op_time_per_step_us=round(cost / n / 1000, 3), tiny_op_pct=round(share, 2),
        tiny_op_us=opts["tiny_op_us"], median_op_us=round(float(top["dur"].median()) / 1000, 3),
        top_tiny_ops=[TinyOp(op=r["name"], calls=r["calls"], median_us=round(r["med"] / 1000, 3))
                      for r in names.iter_rows(named=True)],  # 5 rows
        outside_ops_pct=round(ctx.pct(split["outside_ops"]), 2) if split.get("outside_ops") is not None else None,
        op_floor_us=round(m["floor_ns"] / 1000, 3), unprofiled_ratio=round(m["ratio"], 4),
    )
    if m["cls"]:
        ev.optimizer = m["cls"]
        ev.optimizer_loop_per_step_us = round(m["opt_ns"] / n / 1000, 3)
        ev.fused_pass_us = round(m["fused_ns"] / n / 1000, 3)
        ev.optimizer_params = m["params"]
    st = ((trace.meta.manifest or {}).get("step_time")) or {}
    prof, unprof = st.get("profiled_ms_median"), st.get("unprofiled_ms_median")
    if isinstance(prof, (int, float)) and isinstance(unprof, (int, float)) and unprof > 0:
        ev.profiled_step_ms, ev.unprofiled_step_ms = prof, unprof
        if (step_overhead_ms(trace.meta.manifest) or 0) > 0.2 * unprof:
            ev.note = (f"recorded steps took {prof:.2f} ms against {unprof:.2f} ms unprofiled: the profiler adds "
                          "its own cost to every op, so part of this per-op overhead is the recording's; the "
                          "saving is priced without it")
    lay = host_layers(trace).join(tiny.select("i"), on="i").filter(pl.col("layer") != UNATTRIBUTED)
    opt_tiny = float(tiny.filter(pl.col("i").is_in(m["opt_ids"].implode()))["dur"].sum()) if m["cls"] else 0.0
    pct_opt = 100.0 * opt_tiny / cost if cost else 0.0
    f = ctx.finding(cost_ns=cost, count=tiny.height, steps=sorted(tiny["step"].unique().to_list()),
                    evidence=ev, fix=fix_for(ctx.features, m["cls"], pct_opt),
                    title=f"{ev.tiny_ops_per_step:g} ops per step run under {opts['tiny_op_us']:g} µs each, "
                          f"dominated by their fixed per-op cost ({share:.1f} % of the step)")
    f.layer = str(lay["layer"].mode().sort().first()) if lay.height else None  # a host layer: ctx.layer_of is GPU-side
    return [f]
