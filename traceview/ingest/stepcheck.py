"""Checks of the ProfilerStep spans and GPU launch times a step window is built from, each with what was done.

The profiler writes one `ProfilerStep#N` span per step on the training thread, numbered in time order, each
enclosing the step's ops; and a GPU activity starts after the runtime call that launched it. A span or activity
that breaks this (a hand-edited or corrupt trace, issue 33) would move every step window silently.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..engine import IN_MEMORY as _IN_MEMORY
from ..frames import filled, members


def _us(ns: int | float) -> str:
    return f"{ns / 1000:,.1f} µs"


def by_start(steps: pl.DataFrame) -> pl.DataFrame:
    """`steps.sort("cpu_ts", "step")`, without a query when the spans already start in strictly increasing order
    (the usual case: a run's steps follow one another)."""
    ts = steps["cpu_ts"]
    if not ts.null_count() and bool((np.diff(ts.to_numpy()) > 0).all()):
        return steps
    return steps.sort("cpu_ts", "step", maintain_order=True)


def drop_zero_length(cpu: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """`cpu` [name, i, ts, end, ...] (the ProfilerStep annotations) without those of zero length: a span of 0 µs
    encloses no work, and as a step it would be a 0 µs step whatever ran around it."""
    if not (cpu["end"] <= cpu["ts"]).any():  # (the usual case: no filter query)
        return cpu
    zero = cpu.filter(pl.col("end") <= pl.col("ts"))
    warnings.append(f"ignored {zero.height:,} zero-length ProfilerStep annotations ('dur' 0, e.g. {zero['name'][0][:40]!r}): "
                    "a 0 µs span holds no step; their time belongs to the step around them"
                    + (", or to one step of the whole trace when none is left" if zero.height == cpu.height else ""))
    return cpu.filter(pl.col("end") > pl.col("ts"))


def _starting_in(host: pl.DataFrame, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many host events start in each [lo, hi) (a few ranges: one polars pass; many: one sort)."""
    if lo.size == 0:
        return np.zeros(0, np.int64)
    if lo.size <= 64:
        ts = pl.col("ts")
        return np.asarray(host.select([((ts >= int(a)) & (ts < int(b))).sum().alias(str(k))
                                       for k, (a, b) in enumerate(zip(lo, hi, strict=True))]).row(0))
    t = np.sort(host["ts"].drop_nulls().to_numpy())
    return np.searchsorted(t, hi, side="left") - np.searchsorted(t, lo, side="left")


def drop_displaced(steps: pl.DataFrame, host: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """`steps` [step, name, host_idx, cpu_ts, cpu_end] (one row per number) without the spans moved away from their
    work (a `ts` of 0, a corrupt timestamp): a span that encloses no other event, on any thread, and either breaks
    the numbers' time order or is followed by events outside every span before the next step starts (its work,
    left behind). Such a span holds none of its work and would move the steps around it. An empty step among
    steps in order with nothing left behind is kept (the last one may be empty: the profiler stopped right after
    `step()`); so is every span when most are empty (nothing to stand on)."""
    if steps.height < 2 or steps["host_idx"].null_count() or "parent" not in host.columns:
        return steps
    st = by_start(steps)
    # a span encloses an event when some host row has it as its parent (the call tree: one pass, no sort); the
    # others (overlapping spans do not nest) are checked by time, on every thread
    # (the rows whose parent is a span first: a test against the few spans, then the distinct parents of those
    # alone, not a hash of every host row's parent)
    par = host["parent"]
    spans = st["host_idx"].cast(par.dtype, strict=False)  # (an id beyond the parents' type is no parent)
    empty = ~st["host_idx"].is_in(members(par.filter(par.is_in(members(spans))).unique())).to_numpy()
    if not empty.any():
        return steps
    lo, hi = st["cpu_ts"].to_numpy(), st["cpu_end"].to_numpy()
    idx = np.flatnonzero(empty)
    empty[idx] = _starting_in(host, lo[idx], hi[idx]) <= 1  # (its own start counts 1)
    if st["step"].is_sorted():  # in order: displaced only when its work is left behind it, outside every span
        idx = np.flatnonzero(empty[:-1])
        nxt = lo[idx + 1]
        empty[idx] = _starting_in(host, hi[idx], nxt) > 0
        empty[-1] = False
    if not empty.any() or 2 * empty.sum() >= empty.size:
        return steps
    k = int(np.argmax(empty))
    t0 = host["ts"].min()
    warnings.append(f"ignored {int(empty.sum()):,} ProfilerStep annotations that enclose no other event, away from "
                    f"their work (e.g. {st['name'][k][:40]!r} at {_us(int(st['cpu_ts'][k]) - t0)} into the trace: a "
                    "corrupt or zero 'ts' or 'dur'): its time belongs to the steps around it")
    return st.filter(pl.Series(~empty))


def drop_trailing_empty(steps: pl.DataFrame, host: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """`steps` (as `drop_displaced` takes them, two or more) without the last step in time when its span encloses no
    other event on any thread: the loop ended after the `step()` that opened it (it left
    `with profile(schedule=...)` inside an active cycle), so it ran nothing of the loop, and as a step it would
    average a period of no work into the loop's: a near-zero one (a 2.4 ms CPU step read as 1.2 ms), or the
    teardown after the loop (a DataLoader's workers shutting down: 12.5 ms of nothing, which made an input-bound
    CPU loop read as bound outside its ops)."""
    if steps.height < 2 or steps["host_idx"].null_count() or "parent" not in host.columns:
        return steps
    st = by_start(steps)
    last = st.tail(1)
    idx, lo, hi = int(last["host_idx"][0]), int(last["cpu_ts"][0]), int(last["cpu_end"][0])
    # an op, call or annotation inside it, on any thread (the Python frames of the profiler's own stop, which
    # `with_stack` records there, are not the loop's)
    inside = ((pl.col("cat") != "python_function") & (pl.col("i") != idx)
              & ((pl.col("parent") == idx).fill_null(False) | ((pl.col("ts") >= lo) & (pl.col("ts") < hi))))
    if host.select(inside.any()).item():
        return steps
    warnings.append(f"ignored the last step, {last['name'][0][:40]!r} ({_us(hi - lo)}): it encloses no "
                    "op or call on any thread: the loop ended after the `step()` that opened it, and the profiler "
                    "stopped, so it is not a step of the loop")
    return st.head(st.height - 1)


#: the span PyTorch records around every `optimizer.step()` (`Optimizer.step#SGD.step`, `#AdamW.step`, …)
OPTIMIZER_STEP = "Optimizer.step#"
#: a repeated annotation's key: its name less a trailing number (`step_3`, `batch 12`, `iter#7` -> one key)
_NUMBERED = r"[_#\s-]?\d+$"
#: the share of the traced host time a repeated annotation's spans must cover to be taken as the loop's steps
ANNOTATED_COVER = 0.5


def inferred_steps(host: pl.DataFrame, lo: int, warnings: list[str]) -> pl.DataFrame | None:
    """Step windows [step, name, host_idx, cpu_ts, cpu_end] of a trace without ProfilerStep annotations (a profiler
    used without a `schedule`), or None (the whole trace is then one step). A training loop calls
    `optimizer.step()` once per step and PyTorch records it (`Optimizer.step#…`; of several optimizers, the one
    that runs last): with two or more on one thread, step k runs from the end of the (k-1)-th to the end of the
    k-th, k >= 1 (before the first end: the loop's start or setup, and its first step's lazy work, from no observed
    boundary; after the last: its teardown). Else a `record_function` the loop wraps each step in: the most
    frequent top-level annotation, its trailing number ignored (`step_0`, `step_1`, … or every `train_step`), two or
    more spans, all on one thread (the same task on a pool of threads is no loop), that do not overlap and together
    cover at least `ANNOTATED_COVER` of the trace's host time. Said in a warning either way."""
    ann = host.lazy().filter(pl.col("cat") == "user_annotation").select("i", "name", "tid", "ts", "end", "parent")
    opt = (ann.filter(pl.col("name").str.starts_with(OPTIMIZER_STEP)).collect(**_IN_MEMORY))
    if opt.height >= 2:
        tid = opt["tid"].mode().sort()[0]
        opt = opt.filter(pl.col("tid") == tid).sort("ts")
        # several optimizers a step (a GAN's generator and discriminator): the step ends with the last one's
        opt = opt.filter(pl.col("name") == opt["name"][-1])
        if opt.height >= 2 and (opt["ts"].slice(1) >= opt["end"].slice(0, opt.height - 1)).all():
            n, ends = opt.height - 1, opt["end"]
            warnings.append(f"no ProfilerStep#N annotations: the {n:,} periods between the ends of the {n + 1:,} "
                            f"optimizer steps ({opt['name'][0][:40]!r}) are taken as the steps (before the first "
                            "one's end: the loop's start or its first step, from no observed boundary, left out)")
            return pl.DataFrame({"step": range(1, n + 1), "name": opt["name"].slice(1), "host_idx": opt["i"].slice(1),
                                 "cpu_ts": ends.slice(0, n), "cpu_end": ends.slice(1)},
                                schema_overrides={"step": pl.Int64, "host_idx": pl.UInt32})
    # top level: no enclosing op or annotation (a Python frame of with_stack may enclose it)
    framed = host.select(pl.col("i").filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))).to_series().implode()
    top = (ann.filter(~pl.col("parent").is_in(framed).fill_null(False))
           .with_columns(key=pl.col("name").str.replace(_NUMBERED, "")).collect(**_IN_MEMORY))
    if top.height < 2:
        return None
    busy = int((host["end"].max() or 0) - lo)
    groups = (top.lazy().sort("key", "ts", maintain_order=True).with_columns(_apart=(pl.col("ts") >= pl.col("end").shift(1).over("key"))
                                                         .fill_null(True))
              .group_by("key").agg(pl.len().alias("n"), (pl.col("end") - pl.col("ts")).sum().alias("cover"),
                                   pl.col("_apart").all().alias("apart"), pl.col("tid").n_unique().alias("threads"),
                                   pl.col("ts").min().alias("first"))
              # one thread's (a pool of workers running the same task is not a loop of steps)
              .filter((pl.col("n") >= 2) & (pl.col("threads") == 1) & pl.col("apart")
                      & (pl.col("cover") >= ANNOTATED_COVER * busy))
              .sort(["n", "first"], descending=[True, False], maintain_order=True).head(1).collect(**_IN_MEMORY))
    if groups.height == 0:
        return None
    best = top.join(groups.select("key"), on="key").sort("ts")
    warnings.append(f"no ProfilerStep#N annotations: the {best.height:,} spans of the annotation "
                    f"{best['key'][0][:40]!r} (record_function) are taken as the steps")
    return best.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("step"), "name", pl.col("i").alias("host_idx"),
                       pl.col("ts").alias("cpu_ts"), pl.col("end").alias("cpu_end"))


def warn_overlaps(steps: pl.DataFrame, warnings: list[str]) -> None:
    """Say when a step span starts before the previous one (in time) ends: the step periods still partition time
    (each runs from its start to the next step's start), so no instant counts in two steps."""
    st = by_start(steps)
    over = filled(st["cpu_ts"] < st["cpu_end"].shift(1), False)
    n = int(over.sum())
    if n:
        k = int(np.argmax(over.to_numpy()))
        early = int(st["cpu_end"][k - 1]) - int(st["cpu_ts"][k])
        warnings.append(f"{n:,} ProfilerStep spans start before the previous step's span ends (e.g. "
                        f"{st['name'][k][:40]!r}, {_us(early)} early): each step is taken from its start to the "
                        "next step's start, so no time counts in two steps")


def bounding(gpu: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """The GPU activities that may bound a step window: `gpu` less those starting before the runtime call that
    launched them began (a kernel cannot; one that does has a corrupt timestamp or clock and would move its step's
    start). Said once, with the count and the worst gap; `gpu` itself when there are none."""
    if "launch_ts" not in gpu.columns or gpu.height == 0:
        return gpu
    early = (pl.col("ts") < pl.col("launch_ts")).fill_null(False)
    n, gap = gpu.select(early.sum(), (pl.col("launch_ts") - pl.col("ts")).filter(early).max()).row(0)
    if not n:
        return gpu
    warnings.append(f"{n:,} GPU activities start before the runtime call that launched them (up to {_us(gap)} "
                    "before: corrupt timestamps or clocks): their time is kept, but they bound no step window")
    return gpu.filter(~early)
