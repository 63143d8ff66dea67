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

from ..frames import filled, omit, take
from ..memo import per_trace
from ..model import Trace
from .rowid import positions

#: the fewest back-to-back iterations reported (inside one step), and the longest iteration (in top-level ops)
#: looked for
MIN_ITERATIONS = 16
MAX_PERIOD = 8
#: the longest median host time of a loop's ops: an eager op that launches a kernel costs tens of µs on the host; one
#: that takes longer does work of its own (a blocking copy, a collective) that batching the loop does not remove
MAX_OP_NS = 200_000
SLICING = ("aten::slice", "aten::select", "aten::narrow", "aten::unbind")
ELEMENTWISE = frozenset({
    "aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::div", "aten::div_",
    "aten::copy_", "aten::lerp", "aten::lerp_", "aten::zero_", "aten::fill_", "aten::addcmul_", "aten::addcdiv_",
    "aten::sqrt", "aten::sqrt_", "aten::mul_scalar", "aten::clamp_", "aten::neg", "aten::neg_",
})


def item_loops(trace: Trace, lo: int, hi: int, bounds: tuple[int, ...] = ()) -> pl.DataFrame:
    """[tid, kind, ops, iterations, host_ns] of the `rows`/`tensors` loops whose iterations start in [lo, hi),
    one row per loop (its runs in every step together), longest host time first."""
    out = loop_runs(trace, lo, hi, bounds).filter(pl.col("kind").is_not_null())
    return (out.group_by("tid", "kind", "ops", maintain_order=True)
            .agg(pl.col("iterations").sum(), (pl.col("end") - pl.col("ts")).sum().alias("host_ns"))
            .sort("host_ns", descending=True))


def batched_spans(trace: Trace, lo: int, hi: int, bounds: tuple[int, ...] = ()) -> list[tuple[int, int, int]]:
    """(tid, ts, end) of what batching each `rows`/`tensors` loop in [lo, hi) takes off the host: every iteration
    after the first (their ops, launches and the Python between them), and for a loop over rows the backward's run
    of autograd nodes with as many iterations that follows it on another thread (the per-row backward)."""
    runs = loop_runs(trace, lo, hi, bounds)
    if runs.height == 0:
        return []
    out = []
    fwd = runs.filter(pl.col("kind").is_not_null())
    bwd = runs.filter(pl.col("kind").is_null() & pl.col("ops").list.eval(
        pl.element().str.starts_with("autograd::engine::evaluate_function:")).list.all())
    for r in fwd.iter_rows(named=True):  # (one per run of a loop: a few a step)
        out.append((r["tid"], r["second"], r["end"]))
        if r["kind"] == "rows":
            b = bwd.filter((pl.col("tid") != r["tid"]) & (pl.col("iterations") == r["iterations"])
                           & (pl.col("ts") >= r["end"])).head(1)
            out += [(int(b["tid"][0]), int(b["second"][0]), int(b["end"][0]))] if b.height else []
    return out


@per_trace
def loop_runs(trace: Trace, lo: int, hi: int, bounds: tuple[int, ...] = ()) -> pl.DataFrame:
    """[tid, kind, ops, iterations, ts, second, end] of every back-to-back repeat in [lo, hi) that no step boundary
    (`bounds`: the steps' starts) cuts (`second`: the second iteration's start), by thread and start; kind null for a
    repeat that may be a chain (a stack of layers) or whose ops do work of their own (`MAX_OP_NS`)."""
    h = trace.host
    top = (h.lazy().filter((pl.col("cat") == "cpu_op") & (pl.col("ts") >= lo) & (pl.col("ts") < hi)
                           & ~pl.col("name").str.starts_with("ProfilerStep"))
           .select("i", "tid", "name", "ts", "end", "parent", "input_dims").collect())
    # the top-level ops: a parent that is no op (or none). The parent's row is found by position (no hash join of
    # every op onto every host row: at 10 M events the join was a phase's peak)
    pos = positions(h, top["parent"])
    if pos is None:  # (ids with nulls: the hash join)
        parents = h.select(pl.col("i").alias("parent"), pl.col("cat").alias("_pcat"))
        nested = top.join(parents, on="parent", how="left")["_pcat"] == "cpu_op"
    else:
        nested = take(h["cat"] == "cpu_op", pos)  # (a mask of the host rows, gathered: no text per op)
    top = omit(top.filter(~filled(nested, False)), "i", "parent")
    if not _strictly_sorted(top["tid"].to_numpy(), top["ts"].to_numpy()):  # (else the sort is the order it has:
        top = top.sort("tid", "ts")  # a single thread's ops, in time order, are; no copy of every op's columns)
    rows = []
    for (tid,), g in top.group_by("tid", maintain_order=True):  # (one per thread: a handful)
        rows += _runs(int(tid), g, np.searchsorted(np.asarray(bounds, np.int64), g["ts"].to_numpy(), side="right"))
    return pl.DataFrame(rows, schema={"tid": pl.Int64, "kind": pl.String, "ops": pl.List(pl.String),
                                      "iterations": pl.Int64, "ts": pl.Int64, "second": pl.Int64, "end": pl.Int64},
                        orient="row").sort("tid", "ts")


def _strictly_sorted(tid: np.ndarray, ts: np.ndarray) -> bool:
    """Whether the rows are in (tid, ts) order with no two equal (so that any sort by them keeps the order)."""
    if tid.size < 2:
        return True
    up = tid[1:] > tid[:-1]
    return bool((up | ((tid[1:] == tid[:-1]) & (ts[1:] > ts[:-1]))).all())


def _runs(tid: int, g: pl.DataFrame, step: np.ndarray) -> list[tuple]:
    """The thread's back-to-back repeats of a sequence of 1..MAX_PERIOD ops inside one step (`step`: each op's),
    each kept once (its shortest period)."""
    codes = g["name"].cast(pl.Categorical).to_physical().to_numpy()
    ts, end = g["ts"].to_numpy(), g["end"].to_numpy()
    n, used, out = codes.size, np.zeros(codes.size, bool), []
    for p in range(1, MAX_PERIOD + 1):
        if n <= p * MIN_ITERATIONS:
            break
        same = np.r_[(codes[p:] == codes[:-p]) & (step[p:] == step[:-p]), False]
        edge = np.diff(np.r_[0, same.astype(np.int8), 0])
        starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
        iters = (ends - starts) // p + 1  # iterations: the run of equal ops p apart spans k - 1 of them
        keep = iters >= MIN_ITERATIONS  # (the long runs alone reach the loop below: a few a step)
        for s, k in zip(starts[keep].tolist(), iters[keep].tolist(), strict=True):
            if used[s]:
                continue
            last = s + k * p - 1
            used[s:last + 1] = True
            ops = g["name"].slice(s, p).to_list()
            short = float(np.median(end[s:last + 1] - ts[s:last + 1])) <= MAX_OP_NS
            # (each iteration's first op's input shapes; "": not recorded)
            dims = g["input_dims"].slice(s, k * p).gather_every(p).cast(pl.String).fill_null("").to_numpy()
            kind = _kind(ops, dims) if short else None
            out.append((tid, kind, ops, k, int(ts[s]), int(ts[s + p]), int(end[last])))
    return out


def _kind(ops: list[str], first_dims: np.ndarray) -> str | None:
    """`rows`, `tensors` or None (a repeat whose iterations may depend on each other), from the iteration's ops and
    the input shapes of its first op in each iteration."""
    if ops[0] in SLICING and np.unique(first_dims).size == 1 and first_dims[0]:
        return "rows"
    if all(o in ELEMENTWISE for o in ops) and np.unique(first_dims).size > 1:
        return "tensors"
    return None
