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
# the same names as prefixes: a prefix test costs a tenth of the regex (whose alternation defeats its literal
# prefix search) over the ~300 k host events of a large trace
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
COMM_OP_PREFIXES = ("nccl:", "gloo:")


def _starts_with(col: str, prefixes: tuple[str, ...]) -> pl.Expr:
    return pl.any_horizontal([pl.col(col).str.starts_with(p) for p in prefixes])


def role_ranks(trace: Trace) -> pl.DataFrame:
    """[k, ts, end] for every event that has a role, k its role's rank in ROLES (what the sweep reads: no
    string column of every event)."""
    def rank(label: str) -> pl.Expr:
        return pl.lit(ROLES.index(label), pl.Int32)

    kind = pl.col("kind")
    gpu_rank = pl.when(kind == "compute").then(rank("kernel")).when(kind == "comm").then(rank("communication"))
    for k, role in enumerate(ROLES):  # any other kind is its own label (memcpy, memset): ranked if it is a role
        gpu_rank = gpu_rank.when(kind == role).then(pl.lit(k, pl.Int32))
    gpu_roles = trace.gpu.lazy().filter(kind != "sync").select(gpu_rank.otherwise(None).alias("k"), "ts", "end")
    host_roles = trace.host.lazy().filter(pl.col("cat").is_in(["cpu_op", "user_annotation", *RUNTIME_CATS])
                                          & ~pl.col("name").str.contains(STEP_RE)).select(
        pl.when(pl.col("cat").is_in(RUNTIME_CATS)).then(rank("runtime"))
        .when(_starts_with("name", DATALOADER_PREFIXES)).then(rank("dataloader"))
        .when(_starts_with("name", COMM_OP_PREFIXES)).then(rank("communication"))
        .otherwise(rank("cpu_exec")).alias("k"), "ts", "end")
    return pl.concat([gpu_roles, host_roles]).collect()


def role_intervals(trace: Trace) -> pl.DataFrame:
    """[label, ts, end] for every event that has a role."""
    return role_ranks(trace).select(pl.lit(pl.Series(ROLES, dtype=pl.String)).gather(pl.col("k")).alias("label"),
                                    "ts", "end")


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
    part = priority_sweep(role_ranks(trace), ROLES, steps.select("step", "ts", "end"))
    wide = (steps.select("step", "ts", "end", (pl.col("end") - pl.col("ts")).alias("dur"))
            .join(part.group_by("step").agg([pl.col("dur").filter(pl.col("label") == r).sum().alias(r)
                                             for r in [*ROLES, "other"]]), on="step", how="left"))
    return wide.with_columns([pl.col(r).fill_null(0) for r in [*ROLES, "other"]]).sort("step")
