"""Step windows helpers shared by the classifier and the rules: which steps are complete, and which step an
event belongs to."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..engine import CHAIN, IN_MEMORY
from ..frames import pick, take
from ..model import Trace
from .intervals import open_at
from .timeline import gpu_work

CUT_OFF_RATIO = 0.8  # tb_plugin: a last step with < 80 % of the previous step's GPU ops was cut off


def gpu_ops_per_step(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """[step, gpu_ops]: GPU activities whose launch call lies in the step's host span (tb_plugin's count)."""
    # one query (a small trace's run is mostly polars' fixed cost per query)
    w = pick(steps, "step", "cpu_ts", "cpu_end").lazy().sort("cpu_ts")
    g = gpu_work(pick(trace.gpu, "kind", "launch_ts").lazy()).filter(pl.col("launch_ts").is_not_null()).select("launch_ts")
    g = g.sort("launch_ts")
    got = (g.join_asof(w, left_on="launch_ts", right_on="cpu_ts", strategy="backward")
           .filter(pl.col("launch_ts") < pl.col("cpu_end")).group_by("step").len())
    return pick(steps, "step").lazy().join(got, on="step", how="left").select(
        "step", pl.col("len").fill_null(0).cast(pl.Int64).alias("gpu_ops")).sort("step").collect(**CHAIN)


def complete_steps(trace: Trace, steps: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Drop trailing steps that launched no GPU work and a last step cut off by the end of the recording
    (fewer than 80 % of the previous step's GPU ops), as the tb_plugin does. Returns (steps, warnings)."""
    if steps.height < 2 or not trace.has_gpu:
        return steps, []
    n = gpu_ops_per_step(trace, steps)
    ops = n["gpu_ops"].to_list()
    nums = n["step"].to_list()
    warns: list[str] = []
    # trailing steps without GPU work: everything after the last step that launched some
    last = max((k for k, v in enumerate(ops) if v > 0), default=-1)
    if 0 <= last < len(ops) - 1:
        idle = nums[last + 1:]
        del nums[last + 1:], ops[last + 1:]
        what = (f"step {idle[0]}" if len(idle) == 1 else
                f"steps {idle[0]}-{idle[-1]} ({len(idle):,} steps)" if idle == list(range(idle[0], idle[-1] + 1))
                else f"{len(idle):,} steps ({idle[0]}, {idle[1]}, ... {idle[-1]})")
        warns.append(f"{what} left out of the rules and the classification: "
                     f"{'it' if len(idle) == 1 else 'they'} launched no GPU work")
    if len(ops) > 1 and ops[-1] < CUT_OFF_RATIO * ops[-2]:
        warns.append(f"step {nums.pop()} left out of the rules and the classification: it launched {ops[-1]} "
                        f"GPU ops vs {ops[-2]} in the step before (< 80 %: cut off by the end of the recording)")
        ops.pop()
    if not warns:
        return steps, []
    return steps.filter(pl.col("step").is_in(nums)), warns


def _no_rows(df: pl.DataFrame, out: str) -> bool:
    """`df` has no rows (and no column the step joins add): its step is known without a query (on a small trace
    each query's fixed cost counts, and many callers pass the empty result of a filter)."""
    return df.height == 0 and not {out, "_wts", "_wend"} & set(df.columns)


def _with_no_step(df: pl.DataFrame, steps: pl.DataFrame, out: str) -> pl.DataFrame:
    """What the step joins give on a frame without rows: its columns and an empty `out` of the steps' type."""
    return df.hstack([pl.Series(out, [], steps["step"].dtype)])


def step_of(df: pl.DataFrame, steps: pl.DataFrame, col: str = "ts", out: str = "step") -> pl.DataFrame:
    """Add `out`: the step whose device window [ts, end) contains `col` (null outside every step)."""
    if _no_rows(df, out):
        return _with_no_step(df, steps, out)
    w = steps.select(pl.col("step").alias(out), pl.col("ts").alias("_wts"), pl.col("end").alias("_wend")).sort("_wts")
    res = df.sort(col).join_asof(w, left_on=col, right_on="_wts", strategy="backward")
    return res.with_columns(pl.when(pl.col(col) < pl.col("_wend")).then(pl.col(out)).alias(out)).drop("_wts", "_wend")


def in_steps(df: pl.DataFrame, steps: pl.DataFrame, col: str = "ts") -> pl.DataFrame:
    """`step_of` without the rows outside every step, sorted by `col`: the rows whose `col` falls in a step window
    [ts, end), with their `step` (the last window started at or before each time, while it lasts)."""
    if df[col].null_count() or steps["ts"].null_count() or steps["end"].null_count():
        return step_of(df, steps, col).filter(pl.col("step").is_not_null())
    # without nulls, a binary search among the sorted window starts (no join over the rows)
    df = df.sort(col)
    wts = steps["ts"].to_numpy()
    o = np.argsort(wts, kind="stable").astype(np.uint32)  # (windows are few; a window position per row below)
    j = open_at(wts[o], steps["end"].to_numpy()[o], df[col].to_numpy())
    ok = j >= 0
    if ok.all():  # every row in a step (the usual case): no copy of the rows by a filter
        return df.hstack([take(steps["step"], pl.Series(o[j]))])
    return df.filter(pl.Series(ok)).hstack([take(steps["step"], pl.Series(o[j[ok]]))])


def host_step_of(df: pl.DataFrame, steps: pl.DataFrame, col: str, out: str = "step") -> pl.DataFrame:
    """Add `out`: the step whose host span [cpu_ts, cpu_end) contains `col` (e.g. a kernel's launch_ts)."""
    if _no_rows(df, out):
        return _with_no_step(df, steps, out)
    # one query (called by many rules: on a small trace each query's overhead counts)
    w = steps.lazy().select(pl.col("step").alias(out), pl.col("cpu_ts").alias("_wts"),
                            pl.col("cpu_end").alias("_wend")).sort("_wts")
    res = df.lazy().sort(col).join_asof(w, left_on=col, right_on="_wts", strategy="backward")
    return res.with_columns(pl.when(pl.col(col) < pl.col("_wend")).then(pl.col(out)).alias(out)).drop(
        "_wts", "_wend").collect(**IN_MEMORY)


def recording_edges(trace: Trace, steps: pl.DataFrame) -> tuple[dict, list[str]]:
    """What the step periods leave out at the edges of the recording: {excluded_us, excluded: {before_us,
    after_us}} and warnings that say why.

    Before: from the host's entry into the first analysed step (tb_plugin's start) to its period's start — GPU
    work queued before the recording (launched before it began, or during the profiler's warm-up) that ran into
    the step, or the recording's start-up with the GPU idle (loader._periods). After: host and GPU activity after the last step's period (the script's final
    `torch.cuda.synchronize()`, the profiler's stop and export)."""
    if steps.height == 0:
        return {"excluded_us": 0.0, "excluded": {"before_us": 0.0, "after_us": 0.0}}, []
    by_step = steps.sort("step")
    first, last = by_step.row(0, named=True), by_step.row(-1, named=True)
    tb0 = first.get("tb_ts") if first.get("tb_ts") is not None else first["ts"]
    before = max(0, int(first["ts"]) - int(tb0))
    ends = [v for v in (trace.host["end"].max(), trace.gpu["end"].max() if trace.gpu.height else None) if v is not None]
    after = max(0, int(max(ends)) - int(last["end"])) if ends else 0
    warns = []
    if before:
        warns.append(f"{before / 1000:,.1f} µs at the start of step {first['step']} are left out of its period: the "
                     "GPU was finishing work queued before the recording, or idle through the recording's start-up")
    # the events after the last step first (a handful): the name test then reads only those
    host_after = (trace.host.lazy().filter(pl.col("ts") >= last["cpu_end"]).filter(
        pl.col("cat").is_in(["cuda_runtime", "cuda_driver"]) & pl.col("name").str.contains("Synchronize"))
        .collect(**CHAIN) if after else None)
    if host_after is not None and host_after.height:
        warns.append(f"{after / 1000:,.1f} µs after the last step (the script's final "
                     f"{host_after['name'][0]}, the profiler's stop) are left out of the steps, classes and findings")
    return {"excluded_us": round((before + after) / 1000, 3),
            "excluded": {"before_us": round(before / 1000, 3), "after_us": round(after / 1000, 3)}}, warns
