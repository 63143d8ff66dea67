"""TV203 unfused-optimizer: the optimizer step launches a few tiny kernels per parameter.

## What it detects
`Optimizer.step#…` spans (recorded by torch.optim for every optimizer) whose kernels come from single-tensor
ops (`aten::mul_`, `aten::addcdiv_`, `aten::lerp_`, … once per parameter) rather than multi-tensor ops
(`aten::_foreach_*`, `aten::_fused_*`): at least `min_kernels` such kernels per optimizer step. Traces
without these spans (optimizers that bypass torch.optim's step hooks) cannot be judged.

## Why it is slow
The single-tensor path (`foreach=False`, or parameters that are not all on the GPU) runs the update rule as
a Python loop over the parameters, one op per parameter and arithmetic step: AdamW is about 8 ops per
parameter, so a model with P parameters costs 8·P launches of a few µs of host time each, while each kernel
touches one small tensor and finishes in a few µs. The GPU mostly waits for the host. The multi-tensor
(`foreach=True`) path launches one kernel per arithmetic step for a whole list of tensors, and the fused path
(`fused=True`) one kernel for the whole update.

## How to fix
Construct the optimizer with `fused=True` (Adam, AdamW, SGD, Adagrad on CUDA) or `foreach=True`; PyTorch
picks foreach by default only when every parameter and state is a CUDA tensor and `differentiable=False`,
so check for `foreach=False` in the code and for parameters left on the CPU. `torch.compile` of the step
function also fuses the update.

## Evidence
Per optimizer: the steps, the host time of one optimizer step, the kernels it launches and their GPU time,
the ops that launch them with their counts, and the estimated parameter count (the launches of the least
frequent per-parameter op). The multi-tensor path keeps one launch per distinct kernel: its predicted host
time is the span × distinct kernels / kernels, and its GPU time at least the bytes the kernels move at the
memory bandwidth. Savings = the optimizer span beyond that predicted time, only where the GPU had nothing
else to run (queued forward/backward work still has to run).

## Options
- `min_kernels` (32): fewest single-tensor kernels per optimizer step worth a finding (4 parameters of AdamW).
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, `torch.optim` "Algorithms" (foreach and fused implementations, their defaults).
- PyTorch `torch/optim/optimizer.py` (`Optimizer.step#<name>.step` profiler spans).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.features import host_names
from traceview.analyses.replay import Transform, spans
from traceview.analyses.rowid import join_by_id
from traceview.analyses.whatif import EMPTY, gpu_idle_within, removed_per_step
from traceview.evidence import Meta, OpCount
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

from .elementwise_chain import MULTI_TENSOR_KERNEL_RE

CODE = "TV203"
NAME = "unfused-optimizer"
SEVERITY = "warning"
CLASS = "cpu_launch"  # the classifier class whose time a fix of these findings removes
TITLE = "Optimizer step launches tiny kernels per parameter"
OPTIONS = {
    "min_kernels": Option(32, "fewest single-tensor kernels per optimizer step worth a finding"),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
OPT_RE = r"^Optimizer\.step#(.+)\.step$"
MULTI_TENSOR_RE = r"^aten::_(foreach|fused)_"


def _fix(opt: str) -> str:
    return (f"{opt}.step runs its update one parameter at a time (the single-tensor path): about a handful of ops "
            "per parameter, each a few µs of host time for a kernel that finishes in a few µs, so the GPU waits "
            f"for the host. Construct it with {opt}(..., fused=True) (one kernel for the whole update) or "
            "foreach=True (one kernel per arithmetic step over all parameters). PyTorch picks foreach by default "
            "only when every parameter and state is a CUDA tensor and differentiable=False: look for "
            "foreach=False in the code and for parameters left on the CPU.")


FIX = _fix("The optimizer")


def optimizer_spans(ctx: RuleContext, min_kernels: int) -> pl.DataFrame:
    """One row per single-tensor optimizer step in the analysed steps: [i, opt, ts, end, kernels, kinds,
    gpu_ns, bytes, kept, ids, ops]."""
    host = ctx.trace.host
    if not host_names(ctx.trace, "user_annotation").str.contains(OPT_RE).any():  # no optimizer step annotated
        return pl.DataFrame()
    # the regex only on the annotations (a few hundred rows, not every host event)
    spans = host[["i", "cat", "name", "ts", "end"]].filter(pl.col("cat") == "user_annotation")
    spans = spans.filter(pl.col("name").str.contains(OPT_RE) & (pl.col("ts") >= ctx.trace.steps["cpu_ts"].min()))
    spans = spans.filter(pl.col("end") > ctx.lo).select("i", pl.col("name").str.extract(OPT_RE).alias("opt"), "ts", "end")
    if spans.height == 0:
        return pl.DataFrame()
    k = ctx.trace.gpu[["i", "name", "kind", "dur", "op", "launch_ts"]].filter(
        (pl.col("kind") == "compute") & pl.col("launch_ts").is_not_null())
    k = (k.sort("launch_ts").join_asof(spans.rename({"i": "span", "ts": "_sts", "end": "_send"}).sort("_sts"),
                                      left_on="launch_ts", right_on="_sts", strategy="backward")
         .filter(pl.col("launch_ts") < pl.col("_send")))
    k = join_by_id(k, "op", host, pl.col("name").alias("op_name"))  # the op names of those kernels only
    k = k.join(ctx.kb.select("i", pl.col("bytes").alias("_kb")), on="i", how="left")
    per = k.group_by("span").agg(
        pl.len().alias("kernels"), pl.col("name").n_unique().alias("kinds"), pl.col("dur").sum().alias("gpu_ns"),
        pl.col("_kb").fill_null(0).sum().alias("bytes"), pl.col("i").alias("ids"),
        # multi-tensor by the op that launched it or, where no op is linked (CUDA graphs, apex), by the kernel
        (pl.col("op_name").fill_null("?").str.contains(MULTI_TENSOR_RE)
         | pl.col("name").str.contains(MULTI_TENSOR_KERNEL_RE)).sum().alias("multi"),
        pl.col("op_name").fill_null("?").alias("ops"))
    per = spans.rename({"i": "span"}).join(per, on="span", how="inner").rename({"span": "i"})
    per = per.filter((pl.col("multi") == 0) & (pl.col("kernels") >= min_kernels))
    span = (pl.col("end") - pl.col("ts")).cast(pl.Float64)
    kept = pl.max_horizontal(span * pl.col("kinds") / pl.col("kernels"), pl.col("bytes") / ctx.spec.bw * 1e9)
    return per.with_columns(kept=kept.cast(pl.Int64))


def _removed(ctx: RuleContext, per: pl.DataFrame) -> pl.DataFrame:
    if per.height == 0:
        return EMPTY
    cut = per.select(ts=pl.col("ts") + pl.col("kept"), end=pl.col("end")).filter(pl.col("end") > pl.col("ts"))
    return gpu_idle_within(ctx.trace, cut, ctx.lo, ctx.hi, keep_launched_inside=True)


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The optimizer host time beyond the multi-tensor path's, where the GPU had nothing else to run."""
    return ctx.once("removes", lambda: _removed(ctx, _spans(ctx)))


def _spans(ctx: RuleContext) -> pl.DataFrame:
    return ctx.once("spans", lambda: optimizer_spans(ctx, int(ctx.options["min_kernels"])))


class Evidence(msgspec.Struct, kw_only=True):
    optimizer: Annotated[str, Meta(description="the optimizer class whose step runs the single-tensor path")]
    optimizer_steps: Annotated[int, Meta(description="its steps in the analysed window")]
    host_time_per_step_us: Annotated[float, Meta(description="host time of its step per optimizer step (µs)")]
    kernels_per_step: Annotated[float, Meta(description="kernels it launches per optimizer step")]
    gpu_time_per_step_us: Annotated[float, Meta(description="their device time per optimizer step (µs)")]
    distinct_kernels: Annotated[int, Meta(description="distinct kernel names it launches")]
    estimated_parameters: Annotated[int | None, Meta(
        description="parameter tensors (calls of its least frequent op per step)")]
    ops: Annotated[list[OpCount], Meta(description="the 10 ops it calls most")]
    predicted_multi_tensor_time_per_step_us: Annotated[float, Meta(
        description="its step on the multi-tensor (foreach/fused) path, predicted (µs)")]
    savings_per_step_us: Annotated[dict[str, float], Meta(description="the fix's saving per step (µs), by step number")]


def check(ctx: RuleContext) -> list[Finding]:
    per = _spans(ctx)
    if per.height == 0:
        return []
    out = []
    for opt in sorted(per["opt"].unique().to_list()):  # one finding per optimizer class: one or two
        p = per.filter(pl.col("opt") == opt)
        rem = removed_per_step(_removed(ctx, p), ctx.steps)
        savings = int(rem["removed"].sum())
        if ctx.pct(savings) < ctx.options["min_savings_pct"]:
            continue
        ops = p.select(pl.col("ops").explode()).group_by("ops").len().sort(["len", "ops"], descending=[True, False])
        n = p.height
        evidence = Evidence(
            optimizer=opt, optimizer_steps=n,
            host_time_per_step_us=round(float((p["end"] - p["ts"]).sum()) / n / 1000, 3),
            kernels_per_step=round(float(p["kernels"].sum()) / n, 1),
            gpu_time_per_step_us=round(float(p["gpu_ns"].sum()) / n / 1000, 3),
            distinct_kernels=int(p["kinds"].max()),
            estimated_parameters=int(ops["len"].min() // n) if ops.height else None,
            ops=[OpCount(op=r["ops"], count=r["len"]) for r in ops.head(10).to_dicts()],
            predicted_multi_tensor_time_per_step_us=round(float(p["kept"].sum()) / n / 1000, 3),
            savings_per_step_us={str(s): round(r / 1000, 3) for s, r in rem.rows()},
        )
        steps = rem.filter(pl.col("removed") > 0)["step"].to_list()
        out.append(ctx.finding(cost_ns=int((p["end"] - p["ts"]).sum()), savings_ns=savings,
                               count=int(p["kernels"].sum()), steps=steps, evidence=evidence, fix=_fix(opt),
                               title=f"{opt}.step launches {evidence.kernels_per_step:.0f} tiny kernels per step "
                                     "(single-tensor path)",
                               kernel_ids=p["ids"].explode()))
    return out


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: one fused kernel per parameter group instead of the per-parameter
    launches — the optimizer step's host rows (ops, launches) leave the host path, and its kernels together take
    their bytes over the device's bandwidth (or their own time, when shorter or without byte counts), on the
    first kernel."""
    per = _spans(ctx)
    if per.height == 0:
        return None
    h = ctx.trace.host.select("i", "tid")
    sp = per.join(h, on="i", how="left").select("tid", "ts", "end")
    gpu: dict[int, int] = {}
    for ids, b, t in per.select("ids", "bytes", "gpu_ns").rows():  # one row per optimizer step: a handful
        fused = min(int(t), int(b / ctx.spec.bw * 1e9)) if b else int(t)
        gpu.update(dict.fromkeys(ids[1:], 0))
        gpu[int(ids[0])] = fused
    return Transform(NAME, host_spans=spans(sp), gpu_dur=gpu)
