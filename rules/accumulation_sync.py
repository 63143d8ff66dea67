"""TV502 accumulation-sync: DDP with gradient accumulation all-reduces the gradients after every micro-batch.

## What it detects
A step (one optimizer step) that runs several DDP forwards (`DistributedDataParallel.forward` annotations:
gradient accumulation over micro-batches) and launches gradient all-reduces (`nccl:all_reduce` annotations,
else `c10d::allreduce_` ops) after more than one of them: one all-reduce set per backward instead of one per
optimizer step. Each all-reduce belongs to the last DDP forward that started before it in the step; the sets
of every micro-batch but the last are avoidable.

## Why it is slow
DDP's reducer fires its bucket all-reduces during every `backward()` unless gradient synchronisation is off:
with k micro-batches the gradients cross the network k times per optimizer step while only the last sum is
used. Each set also costs the reducer's bucket copies and the division by the world size, and the NCCL
kernels take SMs and memory bandwidth from the backward they overlap.

## How to fix
Wrap every micro-batch but the last in `model.no_sync()` (DDP accumulates the gradients locally and the last
backward all-reduces the sum): `ctx = model.no_sync() if i < k - 1 else contextlib.nullcontext()`. With HF
Accelerate, `with accelerator.accumulate(model):`; Lightning's `Trainer(accumulate_grad_batches=k)` does this
itself; FSDP2: `model.set_requires_gradient_sync(False)` on the micro-batches before the last.

## Evidence
Per step the micro-batches (DDP forwards), the micro-batches that all-reduced, the all-reduces per step and
how many are avoidable, their host time and the NCCL kernel time they launched. Savings (per step,
unprofiled) are replayed: `fix_transform` removes the avoidable all-reduce sets and the reducer's bucket work
of those micro-batches (their host spans and the GPU work they launched); the last micro-batch's set stays.

## Options
- `moderate_pct` (3.0): savings share at which a finding is a warning — XProf device-collectives moderate threshold.
- `high_pct` (15.0): savings share at which it is an error — XProf device-collectives high threshold.

## References
- PyTorch docs, `DistributedDataParallel.no_sync` — https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html.
- HF Accelerate, "Gradient accumulation" (`accelerator.accumulate`) — https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.param_work import REDUCER_RE  # the reducer's per-bucket work no_sync() skips too
from traceview.analyses.replay import Transform, spans
from traceview.analyses.windows import host_step_of
from traceview.evidence import Meta
from traceview.frames import pick
from traceview.ruleapi import Finding, RuleContext, xprof_severity

CODE = "TV502"
NAME = "accumulation-sync"
CLASS = "communication"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "DDP all-reduces the gradients after every micro-batch of gradient accumulation"
OPTIONS = {**xprof_severity("device-collectives")}
FIX = (
    "Wrap every micro-batch but the last in model.no_sync() so DDP accumulates gradients locally and all-reduces "
    "once per optimizer step."
)
FORWARD = "DistributedDataParallel.forward"
ALLREDUCE = ("nccl:all_reduce", "gloo:all_reduce")
ALLREDUCE_OP = "c10d::allreduce_"


def _micro(ctx: RuleContext, df: pl.DataFrame, fwd: pl.DataFrame) -> pl.DataFrame:
    """`df` [.., ts, step] with `mb`: the 1-based index in its step of the last DDP forward started before it."""
    f = fwd.select("step", pl.col("ts").alias("_fts"), "mb").sort("_fts")
    return (
        df.sort("ts")
        .join_asof(f, left_on="ts", right_on="_fts", by="step", strategy="backward", check_sortedness=False)
        .drop("_fts")
    )


def _sets(ctx: RuleContext) -> dict | None:
    """The micro-batches and all-reduces of each step, or None when the trace shows no DDP accumulation."""

    def build() -> dict | None:
        h = pick(ctx.trace.host, "i", "cat", "name", "ts", "end", "tid")
        fwd = h.filter((pl.col("name") == FORWARD) & (pl.col("cat") == "user_annotation"))
        if fwd.height < 2:
            return None
        fwd = host_step_of(fwd, ctx.steps, "ts").filter(pl.col("step").is_not_null()).sort("ts")
        fwd = fwd.with_columns(
            mb=pl.col("ts").rank("ordinal").over("step").cast(pl.Int64),
            m=pl.len().over("step").cast(pl.Int64),
        )
        ar = h.filter(pl.col("name").is_in(ALLREDUCE) & (pl.col("cat") == "user_annotation"))
        if ar.height == 0:
            ar = h.filter(pl.col("name") == ALLREDUCE_OP)
        red = h.filter((pl.col("cat") == "cpu_op") & pl.col("name").str.contains(REDUCER_RE))
        if ar.height == 0 or fwd.height == 0:
            return None
        m = fwd.group_by("step").agg(pl.col("m").first())
        ar = _micro(ctx, host_step_of(ar, ctx.steps, "ts").filter(pl.col("step").is_not_null()), fwd).join(
            m, on="step"
        )
        red = _micro(ctx, host_step_of(red, ctx.steps, "ts").filter(pl.col("step").is_not_null()), fwd).join(
            m, on="step"
        )
        return {
            "fwd": fwd,
            "ar": ar.filter(pl.col("mb").is_not_null()),
            "red": red.filter(pl.col("mb").is_not_null()),
        }

    return ctx.once("accumulation-sets", build)


def _avoidable(s: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The all-reduces and reducer ops of every micro-batch but the last of its step."""
    early = pl.col("mb") < pl.col("m")
    return s["ar"].filter(early), s["red"].filter(early)


def _launched(ctx: RuleContext, host: pl.DataFrame) -> pl.DataFrame:
    """GPU rows launched inside the host spans `host` [tid, ts, end] (their launch on the same thread)."""
    g = ctx.trace.gpu.select("i", "kind", "ts", "end", "launch_ts", "launch_tid").filter(
        pl.col("launch_ts").is_not_null()
    )
    if host.height == 0 or g.height == 0:
        return g.clear()
    w = host.select(
        pl.col("tid").alias("launch_tid"), pl.col("ts").alias("_hts"), pl.col("end").alias("_hend")
    ).sort("_hts")
    j = g.sort("launch_ts").join_asof(
        w, left_on="launch_ts", right_on="_hts", by="launch_tid", strategy="backward", check_sortedness=False
    )
    return j.filter(pl.col("launch_ts") < pl.col("_hend")).drop("_hts", "_hend")


class StepSync(msgspec.Struct, kw_only=True):
    """One optimizer step's micro-batches and all-reduces."""

    step: Annotated[int, Meta(description="the step")]
    m: Annotated[int, Meta(description="its micro-batches")]
    synced: Annotated[int, Meta(description="micro-batches followed by a gradient all-reduce")]
    allreduces: Annotated[int, Meta(description="its gradient all-reduces")]
    avoidable: Annotated[int, Meta(description="those after a micro-batch other than the last")]


class Evidence(msgspec.Struct, kw_only=True):
    micro_batches_per_step: Annotated[int, Meta(description="micro-batches per optimizer step (median)")]
    allreduce_sets_per_step: Annotated[
        float, Meta(description="micro-batches per step that all-reduce (mean)")
    ]
    allreduces_per_step: Annotated[float, Meta(description="gradient all-reduces per step (mean)")]
    avoidable_allreduces_per_step: Annotated[
        float, Meta(description="of which avoidable with no_sync (mean)")
    ]
    avoidable_host_us_per_step: Annotated[
        float, Meta(description="host time of the avoidable all-reduces and bucket work per step (µs)")
    ]
    avoidable_nccl_kernel_us_per_step: Annotated[
        float, Meta(description="their NCCL kernel time per step (µs)")
    ]
    avoidable_gpu_rows: Annotated[int, Meta(description="device activities they launched")]
    per_step: Annotated[list[StepSync], Meta(description="each step where it fired")]


def check(ctx: RuleContext) -> list[Finding]:
    s = _sets(ctx)
    if s is None:
        return []
    per = (
        s["ar"]
        .group_by("step")
        .agg(
            pl.col("m").first(),
            pl.col("mb").n_unique().alias("synced"),
            pl.len().alias("allreduces"),
            (pl.col("mb") < pl.col("m")).sum().alias("avoidable"),
        )
        .sort("step")
    )
    fired = per.filter((pl.col("m") >= 2) & (pl.col("synced") >= 2))
    if fired.height == 0:
        return []
    ar, red = _avoidable(s)
    ar = ar.filter(pl.col("step").is_in(fired["step"].implode()))
    red = red.filter(pl.col("step").is_in(fired["step"].implode()))
    gpu = _launched(ctx, pl.concat([ar.select("tid", "ts", "end"), red.select("tid", "ts", "end")]))
    comm = gpu.filter(pl.col("kind") == "comm")
    n = fired.height
    host_ns = int((ar["end"] - ar["ts"]).sum() + (red["end"] - red["ts"]).sum())
    comm_ns = int((comm["end"] - comm["ts"]).sum()) if comm.height else 0
    k = int(fired["m"].median())
    sets = float(fired["synced"].mean())
    ev = Evidence(
        micro_batches_per_step=k,
        allreduce_sets_per_step=round(sets, 2),
        allreduces_per_step=round(float(fired["allreduces"].mean()), 2),
        avoidable_allreduces_per_step=round(float(fired["avoidable"].mean()), 2),
        avoidable_host_us_per_step=round(host_ns / 1000 / n, 3),
        avoidable_nccl_kernel_us_per_step=round(comm_ns / 1000 / n, 3),
        avoidable_gpu_rows=gpu.height,
        per_step=[StepSync(**r) for r in fired.to_dicts()],
    )
    where = [f"{host_ns / 1e6 / n:.2f} ms of host time in the all-reduce calls and the reducer's bucket work"]
    if comm_ns:
        where.append(f"{comm_ns / 1e6 / n:.2f} ms of NCCL kernels")
    fix = (
        f"Each optimizer step runs {k} micro-batches and all-reduces the gradients after {sets:g} of them "
        f"({ev.allreduces_per_step:g} all-reduces per step where "
        f"{ev.allreduces_per_step - ev.avoidable_allreduces_per_step:g} would do; the avoidable ones take "
        f"{' and '.join(where)} per step). Wrap the first {k - 1} micro-batches in model.no_sync() — "
        f"`with model.no_sync() if i < {k - 1} else contextlib.nullcontext():` around forward and backward — so DDP "
        "sums the gradients locally and all-reduces once, in the last backward (HF Accelerate: "
        "`with accelerator.accumulate(model):`; Lightning does it with accumulate_grad_batches)."
    )
    return [
        ctx.finding(
            cost_ns=host_ns + comm_ns,
            count=ar.height,
            steps=fired["step"].to_list(),
            evidence=ev,
            fix=fix,
            kernel_ids=comm["i"],
        )
    ]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the avoidable all-reduce sets and the reducer's bucket work of every
    micro-batch but the last leave the host path, and the GPU work they launched (NCCL kernels, bucket copies,
    the division by the world size) takes no time. The last micro-batch's set stays."""
    s = _sets(ctx)
    if s is None:
        return None
    ar, red = _avoidable(s)
    if ar.height == 0:
        return None
    host = pl.concat([ar.select("tid", "ts", "end"), red.select("tid", "ts", "end")])
    gpu = _launched(ctx, host)
    return Transform(NAME, host_spans=spans(host), gpu_dur={int(i): 0 for i in gpu["i"].to_list()})
