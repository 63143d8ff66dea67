"""Kernels whose work is sized by the model's parameters, not by the batch.

torch.optim records one `Optimizer.step#<Class>.step` user annotation per step and one
`Optimizer.zero_grad#<Class>.zero_grad` per gradient reset; DDP's reducer runs its gradient-bucket copies and the
division by the world size in `torch::distributed::reducer::…` / `torch.distributed.ddp.reducer::…` ops, from C++
in its autograd hooks. The kernels launched inside them touch each parameter (or gradient bucket) once, whatever
the batch: a larger batch does not widen them, and no compiler fuses them with the model's kernels. Their fixes
are their own (a fused or foreach optimizer, `zero_grad(set_to_none=True)`, `no_sync()` or larger buckets), so
the rules about the model's kernels (elementwise chains, small grids) leave them out.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceview.analyses.features import host_names
from traceview.engine import CHAIN
from traceview.model import Trace

OPT_STEP_RE = r"^Optimizer\.step#(.+)\.step$"
ZERO_GRAD_RE = r"^Optimizer\.zero_grad#(.+)\.zero_grad$"
REDUCER_RE = r"^(torch::distributed::reducer::|torch\.distributed\.ddp\.reducer::)"


def param_sized(trace: Trace, g: pl.DataFrame, *, zero_grad: bool = False) -> pl.Series:
    """Per row of `g` (GPU rows with `launch_ts`, `launch_tid`): whether its kernel was launched inside an
    optimizer step's span (and a `zero_grad`'s, with `zero_grad`), or inside one of DDP's reducer ops on the
    launching thread (the annotations span the whole process; the reducer's ops are the launching thread's)."""
    hit = np.zeros(g.height, dtype=bool)
    span_re = f"{OPT_STEP_RE}|{ZERO_GRAD_RE}" if zero_grad else OPT_STEP_RE
    spans = host_names(trace, "user_annotation").str.contains(span_re).any()  # (the regex on the distinct names)
    names = host_names(trace, "cpu_op")
    names = names.filter(names.str.contains(REDUCER_RE))  # (the regex on the distinct names only)
    if not spans and not names.len():  # neither span in the trace: nothing to search (no query more)
        return pl.Series("_param", hit, pl.Boolean)
    at = g.lazy().select(pl.int_range(pl.len()).alias("_row"), "launch_ts", "launch_tid").filter(
        pl.col("launch_ts").is_not_null()).sort("launch_ts").collect(**CHAIN)
    if spans:
        opt = trace.host.select("cat", "name", "ts", "end").filter(pl.col("cat") == "user_annotation").filter(
            pl.col("name").str.contains(span_re))  # (the regex on the annotations only, not on every host row)
        hit[_inside(at, opt)] = True
    if names.len():
        red = trace.host.select("cat", "name", "ts", "end", pl.col("tid").alias("launch_tid")).filter(
            (pl.col("cat") == "cpu_op") & pl.col("name").is_in(names.implode()))
        hit[_inside(at.filter(pl.col("launch_tid").is_not_null()), red, by="launch_tid")] = True
    return pl.Series("_param", hit, pl.Boolean)


def _inside(at: pl.DataFrame, spans: pl.DataFrame, by: str | None = None) -> np.ndarray:
    """The `_row`s of `at` (sorted by `launch_ts`) launched inside one of `spans` [ts, end) — the last one started
    at or before the launch, on the same `by` value when given."""
    w = spans.select(*([by] if by else []), pl.col("ts").alias("_sts"), pl.col("end").alias("_send")).sort("_sts")
    # (at is sorted by launch_ts; polars cannot check that within the `by` groups)
    j = at.join_asof(w, left_on="launch_ts", right_on="_sts", by=by, strategy="backward", check_sortedness=False)
    return j.filter(pl.col("launch_ts") < pl.col("_send"))["_row"].to_numpy()
