"""The classifier's partition through its cheaper path (issue 14: ranks instead of label strings, one lazy
query, narrower sweep arrays) agrees with the straightforward computation it replaced, and every segment's
class is the one a brute-force coverage test gives at its start, on real bundled traces."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import load
from polars.testing import assert_frame_equal

from traceview.analyses import classify, intervals
from traceview.analyses.timeline import gpu_work

TRACES = ["gpu_h200/sync_item_nonzero_cpu.json.gz", "gpu_h200/train_tinygpt_input_bound.json.gz",
          "gpu_h200/launch_bound_tiny_ops.json.gz", "gpu_h200/compute_bound_gemm.json.gz",
          "hta/nccl_parser_config/nccl_data.json.gz", "gpu_h200_real/hf_gpt2_train_bf16.json.gz"]


def _string_intervals(trace, lo: int, hi: int) -> pl.DataFrame:
    """[label, ts, end] as the classifier built them before: a join for the roofline bound, label strings."""
    kb = classify.kernel_bound(trace)
    work = gpu_work(trace.gpu).filter((pl.col("end") > lo) & (pl.col("ts") < hi))
    work = work.join(kb.select("i", "bound"), on="i", how="left")
    gpu = work.select(pl.when(pl.col("kind") == "comm").then(pl.lit("communication"))
                      .when((pl.col("kind") == "compute") & (pl.col("bound") == "compute")).then(pl.lit("gpu_compute"))
                      .otherwise(pl.lit("gpu_memory")).alias("label"), "ts", "end")
    idle = classify.idle_gaps(trace, lo, hi)
    sync = pl.concat([classify.sync_windows(trace).select("ts", "end"),
                      classify.sync_ramps(trace, idle).select("ts", "end")])
    sync = sync.select(pl.lit("host_sync").alias("label"), "ts", "end")
    inp = classify.dataloader_spans(trace).select(pl.lit("input").alias("label"), "ts", "end")
    gaps = idle.select(
        pl.when(pl.col("late")).then(pl.lit("cpu_launch"))
        .when(pl.col("tail")).then(pl.lit("other_idle"))
        .when(pl.col("end") - pl.col("ts") > classify.QUEUED_IDLE_NS).then(pl.lit(classify._QUEUED))
        .otherwise(pl.lit("other_idle")).alias("label"), "ts", "end")
    out = pl.concat([gpu, sync, inp, gaps], how="vertical_relaxed")
    return out.filter((pl.col("end") > lo) & (pl.col("ts") < hi))


def _string_partition(trace, steps: pl.DataFrame) -> pl.DataFrame:
    windows = steps.select("step", "ts", "end")
    iv = _string_intervals(trace, int(windows["ts"].min()), int(windows["end"].max()))
    seg = intervals.segments(iv, classify.PRIORITIES, windows, "other_idle").sort("ts")
    return seg.with_columns(cls=pl.when(pl.col("cls") == classify._QUEUED).then(pl.lit("other_idle")).otherwise("cls"))


@pytest.mark.parametrize("rel", TRACES)
def test_partition_is_the_string_label_computation(rel):
    t = load(rel)
    for steps in (t.steps, t.steps.head(max(1, t.steps.height - 1))):  # all steps, and all but the last
        got = classify.partition(t, steps)
        assert_frame_equal(got, _string_partition(t, steps))
        assert got["ts"].is_sorted()  # by start, without a sort


def _covered(iv: pl.DataFrame, at: np.ndarray) -> np.ndarray:
    """Whether an interval of `iv` holds each instant of `at`: the largest end among the intervals that start at
    or before it lies after it (a prefix maximum, no merge or sweep)."""
    iv = iv.filter(pl.col("end") > pl.col("ts")).sort("ts")
    if iv.height == 0:
        return np.zeros(at.size, bool)
    ts, end = iv["ts"].to_numpy(), np.maximum.accumulate(iv["end"].to_numpy())
    j = np.searchsorted(ts, at, side="right") - 1
    return (j >= 0) & (end[np.maximum(j, 0)] > at)


@pytest.mark.parametrize("rel", TRACES)
def test_each_segment_has_the_highest_label_active_at_its_start(rel):
    t = load(rel)
    part = classify.partition(t, t.steps)
    iv = classify.labelled_intervals(t, int(t.steps["ts"].min()), int(t.steps["end"].max())).collect()
    at = part["ts"].to_numpy()
    want = np.full(at.size, "other_idle", object)
    for k in reversed(range(len(classify.PRIORITIES))):  # a higher label overwrites a lower one
        label = "other_idle" if classify.PRIORITIES[k] == classify._QUEUED else classify.PRIORITIES[k]
        want[_covered(iv.filter(pl.col("k") == k), at)] = label
    assert part["cls"].to_list() == want.tolist()
    assert part["cls"].n_unique() > 1


@pytest.mark.parametrize("rel", ["gpu_h200/seed_single_gemm_eager.json.gz", "gpu_h200/sync_item_nonzero_cpu.json.gz"])
def test_sync_windows_without_syncs_are_the_join_on_no_rows(rel):
    t = load(rel)
    syncs = classify.sync_calls(t)
    # the as-of join to the next GPU start, as computed for any number of syncs (no shortcut)
    s = syncs.select("i", "ts", pl.col("end").alias("sync_end")).sort("sync_end").join_asof(
        classify._gpu_starts(t), left_on="sync_end", right_on="next_ts", strategy="forward")
    want = s.with_columns(end=pl.max_horizontal("sync_end", pl.col("next_ts").fill_null(pl.col("sync_end")))).select(
        "i", "ts", "end", "sync_end", "next_ts")
    assert_frame_equal(classify.sync_windows(t), want)
    assert_frame_equal(classify.sync_windows(t, syncs.head(0)), want.head(0))
    assert (syncs.height > 0) == ("sync_item" in rel)  # one trace with sync calls, one without


@pytest.mark.parametrize("rel", ["collected5/gpt2c_recompile/rank0.1796199641146105992.pt.trace.json.gz",
                                 "gpu_h200_memory/memory_pressure_empty_cache.json.gz"])
def test_the_layer_views_partition_adds_the_left_out_steps_to_the_rules(rel: str) -> None:
    """A step the rules leave out (cut off by the recording) is still in the layer view: its segments are
    partitioned alone and put beside the rules' partition, which is not partitioned again. The result is the
    partition of every selected step computed whole, row for row."""
    from traceview.options import Options
    from traceview.report import _part, rule_context, select_steps

    t = load(rel)
    steps = select_steps(t, Options().step)
    ctx, warns, _ = rule_context(t, steps, None)
    assert ctx.steps.height == steps.height - 1 and any("left out of the rules" in w for w in warns)
    got = _part(t, steps, ctx)
    assert_frame_equal(got, classify.partition(t, steps, ctx.kb, keep=False, enum=True))
    assert got.n_chunks() > 1 and got.head(ctx.part.height).equals(ctx.part)  # (the rules' own rows, first)
