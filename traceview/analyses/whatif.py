"""What a fix takes off the timeline: the intervals (ns, [ts, end)) that disappear when a finding is fixed.

The projected step time removes these intervals from the step windows and lets the rest close up, so two
fixes that remove the same instant count it once. Two principles decide what a fix removes:

- a GPU-side fix that makes kernels shorter saves time only while the GPU was the critical path: a kernel's
  shortened tail is removed only as far as the next GPU activity on its device was already queued (launched
  before the kernel ended); when the host launched the next work late, a shorter kernel only lengthens the
  idle gap after it;
- a host-side fix (no more compiling, no eager code between compiled graphs, fewer launches) removes host
  time, which shortens the step only where the GPU idled: GPU work launched outside the removed host spans
  still has to run.
"""

from __future__ import annotations

import polars as pl

from ..engine import CHAIN
from ..frames import omit, pick
from ..memo import per_trace
from ..model import Trace
from .intervals import clip, merge, per_window
from .timeline import gpu_work

EMPTY = pl.DataFrame(schema={"ts": pl.Int64, "end": pl.Int64})


def shrink_kernels(trace: Trace, k: pl.DataFrame, waits: pl.DataFrame | None = None) -> pl.DataFrame:
    """Intervals removed when the kernels `k` [i, new_dur] ran in `new_dur` ns instead of their `dur`.

    Each kernel loses the tail [end - cut, end). A busy run of the device (activities back to back) passes its
    cuts on only when the GPU was the critical path at its end: the next activity was already queued (its
    launch came before the run ended), or the host was blocked in one of `waits` [ts, end] (a sync: the host
    waited for the GPU), or nothing follows. Otherwise the host was late anyway and the run's cuts are capped
    by how early the next activity had been launched (usually zero): a shorter kernel only lengthens the idle
    gap after it."""
    if k.height == 0:
        return EMPTY
    work, runs = _busy_runs(trace, waits)
    # one query (a small trace's run is mostly polars' fixed cost per query)
    kk = (k.lazy().join(work.lazy(), on="i", how="inner").sort("device", "ts", maintain_order=True)
          .join_asof(runs.lazy().select("device", pl.col("ts").alias("_rts"), "_run", "_slack"), left_on="ts",
                     right_on="_rts", by="device", strategy="backward", check_sortedness=False))
    kk = kk.with_columns(_cut=(pl.col("end") - pl.col("ts") - pl.col("new_dur")).clip(lower_bound=0))
    scale = pl.when(pl.col("_slack").is_null()).then(1.0).otherwise(
        pl.min_horizontal(pl.lit(1.0), pl.col("_slack") / pl.col("_cut").sum().over("_run"))).fill_nan(0.0)
    kk = kk.with_columns(_gain=(pl.col("_cut") * scale).cast(pl.Int64))
    out = kk.select(ts=pl.col("end") - pl.col("_gain"), end=pl.col("end")).filter(pl.col("end") > pl.col("ts")).collect(
        **CHAIN)
    return merge(out)


@per_trace
def _runs_memo(trace: Trace) -> dict:
    return {}


def _busy_runs(trace: Trace, waits: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the GPU work, its busy runs per device with the slack each may pass on): the same for every kernel fix
    of a trace (the waits are its sync calls), so computed once per (trace, waits)."""
    memo = _runs_memo(trace)
    hit = memo.get(id(waits))
    if hit is None or hit[0] is not waits:  # the frame is held, so its id is not reused while cached
        hit = memo[id(waits)] = (waits, _busy_runs_uncached(trace, waits))
    return hit[1]


def _busy_runs_uncached(trace: Trace, waits: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    work = omit(gpu_work(pick(trace.gpu, "kind", "i", "device", "ts", "end", "launch_ts")), "kind")
    # the runs in one query (a small trace's run is mostly polars' fixed cost per query)
    runs = merge(work, ["device"]).lazy().sort("device", "ts", maintain_order=True).with_columns(
        _run=pl.int_range(pl.len()), _next_ts=pl.col("ts").shift(-1).over("device"))
    first_launch = work.lazy().group_by("device", "ts").agg(pl.col("launch_ts").min().alias("_next_launch"))
    runs = runs.join(first_launch.rename({"ts": "_next_ts"}), on=["device", "_next_ts"], how="left")
    slack = (pl.col("end") - pl.col("_next_launch")).clip(lower_bound=0).fill_null(pl.col("end") - pl.col("ts"))
    crit = pl.col("_next_ts").is_null()
    if waits is not None and waits.height:
        w = merge(pick(waits, "ts", "end")).lazy().rename({"ts": "_wts", "end": "_wend"}).sort("_wts")
        runs = runs.sort("end").join_asof(w, left_on="end", right_on="_wts", strategy="backward")
        crit = crit | (pl.col("_wend") >= pl.col("end")).fill_null(False)
    return work, runs.with_columns(_slack=pl.when(crit).then(None).otherwise(slack)).sort("device", "ts", maintain_order=True).collect(
        **CHAIN)


def gpu_idle_within(trace: Trace, spans: pl.DataFrame, lo: int, hi: int,
                    keep_launched_inside: bool = False) -> pl.DataFrame:
    """The parts of host `spans` [ts, end] (clipped to [lo, hi)) during which the GPU did no work that must
    stay: by default no GPU activity at all; with `keep_launched_inside`, activities launched from inside the
    spans (e.g. autotuning benchmarks of a compile) count as removable too."""
    sp = merge(clip(pick(spans, "ts", "end"), lo, hi))
    if sp.height == 0:
        return EMPTY
    work = omit(gpu_work(pick(trace.gpu, "kind", "ts", "end", "launch_ts")).filter((pl.col("end") > lo) & (pl.col("ts") < hi)), "kind")
    if keep_launched_inside and work.height:
        inside = (work.filter(pl.col("launch_ts").is_not_null()).sort("launch_ts")
                  .join_asof(sp.rename({"ts": "_sts", "end": "_send"}).sort("_sts"), left_on="launch_ts",
                             right_on="_sts", strategy="backward")
                  .filter(pl.col("launch_ts") < pl.col("_send")))
        work = work.join(inside.select("ts", "end", "launch_ts"), on=["ts", "end", "launch_ts"], how="anti",
                         nulls_equal=True)
    return subtract(sp, work)


def subtract(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """The union of `a` minus the union of `b` (both [ts, end])."""
    a = merge(pick(a, "ts", "end"))
    if a.height == 0 or b.height == 0:
        return a
    b = merge(pick(b, "ts", "end"))
    pts = pl.concat([
        a.select(pl.col("ts").alias("t"), pl.lit(1).alias("da"), pl.lit(0).alias("db")),
        a.select(pl.col("end").alias("t"), pl.lit(-1).alias("da"), pl.lit(0).alias("db")),
        b.select(pl.col("ts").alias("t"), pl.lit(0).alias("da"), pl.lit(1).alias("db")),
        b.select(pl.col("end").alias("t"), pl.lit(0).alias("da"), pl.lit(-1).alias("db")),
    ]).group_by("t").agg(pl.col("da").sum(), pl.col("db").sum()).sort("t")
    seg = pts.with_columns(pl.col("da").cum_sum(), pl.col("db").cum_sum(), _next=pl.col("t").shift(-1))
    seg = seg.filter((pl.col("da") > 0) & (pl.col("db") == 0) & (pl.col("_next") > pl.col("t")))
    return merge(seg.select(pl.col("t").alias("ts"), pl.col("_next").alias("end")))


def removed_per_step(removed: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """[step, removed]: ns of the union of `removed` inside each step window."""
    if removed.height == 0:
        return steps.select("step", pl.lit(0, pl.Int64).alias("removed"))
    return per_window(pick(removed, "ts", "end"), pick(steps, "step", "ts", "end")).rename({"dur": "removed"})
