"""Checks of the ProfilerStep spans and GPU launch times a step window is built from, each with what was done.

The profiler writes one `ProfilerStep#N` span per step on the training thread, numbered in time order, each
enclosing the step's ops; and a GPU activity starts after the runtime call that launched it. A span or activity
that breaks this (a hand-edited or corrupt trace, issue 33) would move every step window silently.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def _us(ns: int | float) -> str:
    return f"{ns / 1000:,.1f} µs"


def drop_zero_length(cpu: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """`cpu` [name, i, ts, end, ...] (the ProfilerStep annotations) without those of zero length: a span of 0 µs
    encloses no work, and as a step it would be a 0 µs step whatever ran around it."""
    zero = cpu.filter(pl.col("end") <= pl.col("ts"))
    if zero.height == 0:
        return cpu
    warnings.append(f"ignored {zero.height:,} zero-length ProfilerStep annotations (e.g. {zero['name'][0][:40]!r}): "
                    "a 0 µs span holds no step; their time belongs to the step around them"
                    + (", or to one step of the whole trace when none is left" if zero.height == cpu.height else ""))
    return cpu.filter(pl.col("end") > pl.col("ts"))


def drop_displaced(steps: pl.DataFrame, host: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """`steps` [step, name, host_idx, cpu_ts, cpu_end] (one row per number) without the spans that break the time
    order of the step numbers and enclose no other host event: a step moved away from its work (a `ts` of 0, a
    corrupt timestamp). Steps in time order are returned as they are (this costs a sort of the host times only
    when they are not)."""
    by_num = steps.sort("step")
    if steps.height < 2 or by_num["cpu_ts"].is_sorted():
        return steps
    ts = np.sort(host["ts"].drop_nulls().to_numpy())
    lo, hi = by_num["cpu_ts"].to_numpy(), by_num["cpu_end"].to_numpy()
    inside = np.searchsorted(ts, hi, side="left") - np.searchsorted(ts, lo, side="left")  # its own start counts 1
    empty = pl.Series(inside <= 1)
    gone = by_num.filter(empty)
    if gone.height == 0 or gone.height == steps.height:
        return steps
    k = int(np.argmax(empty.to_numpy()))
    warnings.append(f"ignored {gone.height:,} ProfilerStep annotations out of time order that enclose no other "
                    f"event (e.g. {gone['name'][0][:40]!r} at {_us(lo[k] - ts[0])} into the trace, away from "
                    "its work): its work counts for the step before it")
    return by_num.filter(~empty).sort("cpu_ts", "step")


def warn_overlaps(steps: pl.DataFrame, warnings: list[str]) -> None:
    """Say when a step span starts before the previous one (in time) ends: the step periods still partition time
    (each runs from its start to the next step's start), so no instant counts in two steps."""
    st = steps.sort("cpu_ts", "step")
    over = (st["cpu_ts"] < st["cpu_end"].shift(1)).fill_null(False)
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
