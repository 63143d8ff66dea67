"""The Kineto TensorBoard plugin's priority-ordered step-time breakdown (github.com/pytorch/kineto,
tb_plugin/torch_tb_profiler/profiler/overall_parser.py).

Every instant of a step goes to the highest-priority role active then:
Kernel > Memcpy > Memset > Communication > Runtime > DataLoader > CPU Exec > Other.
Unlike the plugin, DataLoader spans recorded as user annotations and `cuda_driver` launches
(Triton) count, and each step is counted once.
"""

from __future__ import annotations

import polars as pl

from ..engine import IN_MEMORY
from ..memo import per_windows
from ..model import RUNTIME_CATS, STEP_RE, Trace
from .intervals import sweep_totals
from .names import starts_with_any

ROLES = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec"]
DATALOADER_RE = r"^enumerate\((DataLoader|DataPipe)\)#"
COMM_OP_RE = r"^(nccl|gloo):"
# the same names as prefixes: a prefix test costs a tenth of the regex (whose alternation defeats its literal
# prefix search) over the ~300 k host events of a large trace
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
COMM_OP_PREFIXES = ("nccl:", "gloo:")


def role_ranks(trace: Trace) -> pl.DataFrame:
    """[k, ts, end] for every event that has a role, k its role's rank in ROLES (what the sweep reads: no
    string column of every event)."""
    return _role_ranks(trace).collect(**IN_MEMORY)


def _role_ranks(trace: Trace) -> pl.LazyFrame:
    """`role_ranks` as a query: the sweep builds the rows and frees them once merged."""
    def rank(label: str) -> pl.Expr:
        return pl.lit(ROLES.index(label), pl.Int32)

    kind = pl.col("kind")  # the model's kinds: compute | comm | memcpy | memset | sync
    gpu_roles = trace.gpu.lazy().filter(kind != "sync").select(
        pl.when(kind == "compute").then(rank("kernel")).when(kind == "comm").then(rank("communication"))
        .when(kind == "memcpy").then(rank("memcpy")).when(kind == "memset").then(rank("memset")).alias("k"),
        "ts", "end")
    host_roles = trace.host.lazy().filter(pl.col("cat").is_in(["cpu_op", "user_annotation", *RUNTIME_CATS])
                                          & ~pl.col("name").str.contains(STEP_RE)).select(
        pl.when(pl.col("cat").is_in(RUNTIME_CATS)).then(rank("runtime"))
        .when(starts_with_any("name", DATALOADER_PREFIXES)).then(rank("dataloader"))
        .when(starts_with_any("name", COMM_OP_PREFIXES)).then(rank("communication"))
        .otherwise(rank("cpu_exec")).alias("k"), "ts", "end")
    return pl.concat([gpu_roles, host_roles])


def step_breakdown(trace: Trace, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Wide frame: one row per step [step, ts, end, dur, kernel, memcpy, ..., other] (ns), over tb_plugin's
    step windows ([tb_ts, tb_end) of the steps frame) so that its numbers compare with the plugin's.

    Cached per (trace, step windows): the report and the input-bound rule both need it."""
    steps = trace.steps if steps is None else steps
    ts, end = ("tb_ts", "tb_end") if "tb_ts" in steps.columns else ("ts", "end")
    return _step_breakdown(trace, steps.select("step", pl.col(ts).alias("ts"), pl.col(end).alias("end")))


@per_windows("step", "ts", "end")
def _step_breakdown(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    tot = sweep_totals(_role_ranks(trace), ROLES, steps)
    return steps.with_columns((pl.col("end") - pl.col("ts")).alias("dur"), *[
        pl.Series(r, tot[:, k], dtype=pl.Int64) for k, r in enumerate([*ROLES, "other"])]).sort("step")
