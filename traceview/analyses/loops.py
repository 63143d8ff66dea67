"""Python loops over items, read off the ops Python called: a short sequence of top-level ops that repeats back to
back many times on one thread (a loss summed sample by sample, an EMA or a manual update tensor by tensor).

Kineto records no tensor identities, so whether a loop's iterations depend on each other does not show; two
shapes of loop say they do not:
- `rows`: each iteration starts by taking a slice of the same tensor (`aten::slice`/`select`/`narrow`/`unbind` on
  inputs of one shape): a loop over the rows of a batch, which one batched call computes at once;
- `tensors`: every op is elementwise and the inputs' shapes change from one iteration to the next: a loop over a
  list of tensors (parameters, buffers), which the `torch._foreach_*` ops run as a few multi-tensor kernels.
Other repeats (a stack of identical layers, each fed by the one before) are not reported."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..model import Trace

#: the fewest back-to-back iterations reported, and the longest iteration (in top-level ops) looked for
MIN_ITERATIONS = 16
MAX_PERIOD = 8
SLICING = ("aten::slice", "aten::select", "aten::narrow", "aten::unbind")
ELEMENTWISE = frozenset({
    "aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::div", "aten::div_",
    "aten::copy_", "aten::lerp", "aten::lerp_", "aten::zero_", "aten::fill_", "aten::addcmul_", "aten::addcdiv_",
    "aten::sqrt", "aten::sqrt_", "aten::mul_scalar", "aten::clamp_", "aten::neg", "aten::neg_",
})


def item_loops(trace: Trace, lo: int, hi: int) -> pl.DataFrame:
    """[tid, kind, ops, iterations, host_ns] of the `rows`/`tensors` loops whose iterations start in [lo, hi),
    one row per loop (its runs in every step together), longest host time first."""
    h = trace.host
    parents = h.select(pl.col("i").alias("parent"), pl.col("cat").alias("_pcat"))
    top = (h.lazy().filter((pl.col("cat") == "cpu_op") & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
           .select("i", "tid", "name", "ts", "end", "parent", "input_dims")
           .join(parents.lazy(), on="parent", how="left")
           .filter((pl.col("_pcat").is_null() | (pl.col("_pcat") != "cpu_op"))
                   & ~pl.col("name").str.starts_with("ProfilerStep"))
           .sort("tid", "ts").collect())
    rows = []
    for (tid,), g in top.group_by("tid", maintain_order=True):  # (one per thread: a handful)
        rows += _runs(int(tid), g)
    out = pl.DataFrame(rows, schema={"tid": pl.Int64, "kind": pl.String, "ops": pl.List(pl.String),
                                     "iterations": pl.Int64, "host_ns": pl.Int64}, orient="row")
    return (out.group_by("tid", "kind", "ops", maintain_order=True)
            .agg(pl.col("iterations").sum(), pl.col("host_ns").sum()).sort("host_ns", descending=True))


def _runs(tid: int, g: pl.DataFrame) -> list[tuple]:
    """The thread's back-to-back repeats of a sequence of 1..MAX_PERIOD ops, each kept once (its shortest period)."""
    names = g["name"].to_numpy()
    codes = g["name"].cast(pl.Categorical).to_physical().to_numpy()
    dims = g["input_dims"].cast(pl.String).fill_null("").to_numpy() if "input_dims" in g.columns else None
    ts, end = g["ts"].to_numpy(), g["end"].to_numpy()
    n, used, out = codes.size, np.zeros(codes.size, bool), []
    for p in range(1, MAX_PERIOD + 1):
        if n <= p * MIN_ITERATIONS:
            break
        same = np.r_[codes[p:] == codes[:-p], False]
        edge = np.diff(np.r_[0, same.astype(np.int8), 0])
        for s, e in zip(np.flatnonzero(edge == 1).tolist(), np.flatnonzero(edge == -1).tolist(), strict=True):
            k = (e - s) // p + 1  # iterations: the run of equal ops p apart spans k - 1 of them
            if k < MIN_ITERATIONS or used[s]:
                continue
            last = s + k * p - 1
            used[s:last + 1] = True
            ops = names[s:s + p].tolist()
            kind = _kind(ops, dims[s:last + 1:p] if dims is not None else None)
            if kind:
                out.append((tid, kind, ops, k, int(end[last] - ts[s])))
    return out


def _kind(ops: list[str], first_dims: np.ndarray | None) -> str | None:
    """`rows`, `tensors` or None (a repeat whose iterations may depend on each other), from the iteration's ops and
    the input shapes of its first op in each iteration."""
    if first_dims is None:
        return None
    if ops[0] in SLICING and np.unique(first_dims).size == 1 and first_dims[0]:
        return "rows"
    if all(o in ELEMENTWISE for o in ops) and np.unique(first_dims).size > 1:
        return "tensors"
    return None
