"""The Kineto TensorBoard plugin's priority-ordered step-time breakdown (github.com/pytorch/kineto,
tb_plugin/torch_tb_profiler/profiler/overall_parser.py).

Every instant of a step goes to the highest-priority role active then:
Kernel > Memcpy > Memset > Communication > Runtime > DataLoader > CPU Exec > Other.
Unlike the plugin, DataLoader spans recorded as user annotations and `cuda_driver` launches
(Triton) count, and each step is counted once.
"""

from __future__ import annotations

import polars as pl

from ..memo import per_trace
from ..model import RUNTIME_CATS, STEP_RE, Trace
from .intervals import priority_sweep

ROLES = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec"]
DATALOADER_RE = r"^enumerate\((DataLoader|DataPipe)\)#"
COMM_OP_RE = r"^(nccl|gloo):"


def role_intervals(trace: Trace) -> pl.DataFrame:
    """[label, ts, end] for every event that has a role."""
    g = trace.gpu.lazy().filter(pl.col("kind") != "sync")
    gpu_roles = g.select(
        pl.when(pl.col("kind") == "compute").then(pl.lit("kernel"))
        .when(pl.col("kind") == "comm").then(pl.lit("communication"))
        .otherwise(pl.col("kind")).alias("label"), "ts", "end")
    h = trace.host.lazy()
    host_roles = h.filter(pl.col("cat").is_in(["cpu_op", "user_annotation", *RUNTIME_CATS])
                          & ~pl.col("name").str.contains(STEP_RE)).select(
        pl.when(pl.col("cat").is_in(RUNTIME_CATS)).then(pl.lit("runtime"))
        .when(pl.col("name").str.contains(DATALOADER_RE)).then(pl.lit("dataloader"))
        .when(pl.col("name").str.contains(COMM_OP_RE)).then(pl.lit("communication"))
        .otherwise(pl.lit("cpu_exec")).alias("label"), "ts", "end")
    return pl.concat([gpu_roles, host_roles]).collect()


def step_breakdown(trace: Trace, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Wide frame: one row per step [step, ts, end, dur, kernel, memcpy, ..., other] (ns), over tb_plugin's
    step windows ([tb_ts, tb_end) of the steps frame) so that its numbers compare with the plugin's.

    Cached per (trace, step windows): the report and the input-bound rule both need it."""
    steps = trace.steps if steps is None else steps
    ts, end = ("tb_ts", "tb_end") if "tb_ts" in steps.columns else ("ts", "end")
    return _step_breakdown(trace, tuple(steps["step"]), tuple(steps[ts]), tuple(steps[end]))


@per_trace
def _step_breakdown(trace: Trace, step: tuple, ts: tuple, end: tuple) -> pl.DataFrame:
    steps = pl.DataFrame({"step": list(step), "ts": list(ts), "end": list(end)},
                         schema={"step": pl.Int64, "ts": pl.Int64, "end": pl.Int64})
    part = priority_sweep(role_intervals(trace), ROLES, steps.select("step", "ts", "end"))
    wide = (steps.select("step", "ts", "end", (pl.col("end") - pl.col("ts")).alias("dur"))
            .join(part.group_by("step").agg([pl.col("dur").filter(pl.col("label") == r).sum().alias(r)
                                             for r in [*ROLES, "other"]]), on="step", how="left"))
    return wide.with_columns([pl.col(r).fill_null(0) for r in [*ROLES, "other"]]).sort("step")
