"""The cheaper forms of report sections (issue 14) agree with the direct computations they replace: the step
breakdown's rank matrix with the priority sweep's rows, name prefixes with the regexes they stand for, the
memory peak with a full sort, the recording edges with a filter of every host event."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
from conftest import load

from traceview.analyses import breakdown, memory
from traceview.analyses.intervals import priority_sweep, sweep_totals
from traceview.analyses.names import starts_with_any
from traceview.analyses.windows import recording_edges

TRACES = ["gpu_h200/train_tinygpt_input_bound.json.gz", "gpu_h200/train_tinygpt_modules.json.gz",
          "gpu_h200_memory/memory_pressure_empty_cache.json.gz", "gpu_h200/seed_single_gemm_eager.json.gz"]


def _pivot(sweep: pl.DataFrame, windows: pl.DataFrame, labels: list[str]) -> np.ndarray:
    got = {(r["step"], r["label"]): r["dur"] for r in sweep.iter_rows(named=True)}
    return np.array([[got.get((s, lab), 0) for lab in labels] for s in windows["step"].to_list()], np.int64)


@pytest.mark.parametrize("rel", TRACES)
def test_sweep_totals_are_the_priority_sweep(rel):
    t = load(rel)
    w = t.steps.select("step", pl.col("tb_ts").alias("ts"), pl.col("tb_end").alias("end"))
    ranks = breakdown.role_ranks(t)
    labels = [*breakdown.ROLES, "other"]
    # the sweep over string labels (its own path) against the rank matrix
    named = ranks.select(pl.lit(pl.Series(breakdown.ROLES)).gather(pl.col("k")).alias("label"), "ts", "end")
    tot = sweep_totals(ranks, breakdown.ROLES, w)
    assert tot.tolist() == _pivot(priority_sweep(named, breakdown.ROLES, w), w, labels).tolist()
    # every instant of a window counted once: each row sums to the window's length
    assert tot.sum(axis=1).tolist() == (w["end"] - w["ts"]).to_list()
    assert tot[:, 0].sum() > 0  # kernels ran in these steps


def test_sweep_totals_windows_sharing_a_key_share_their_sum():
    iv = pl.DataFrame({"k": [0, 1, 0], "ts": [0, 5, 20], "end": [10, 30, 25]},
                      schema={"k": pl.Int32, "ts": pl.Int64, "end": pl.Int64})
    w = pl.DataFrame({"step": [7, 8, 7], "ts": [0, 10, 20], "end": [10, 20, 40]})
    tot = sweep_totals(iv, ["a", "b"], w)
    # window 1 (key 7): a 10; window 2 (key 8): b 10; window 3 (key 7): a 5 (20-25), b 5 (25-30), other 10
    assert tot.tolist() == [[15, 5, 10], [0, 10, 0], [15, 5, 10]]
    sweep = priority_sweep(iv.select(pl.col("k").replace_strict({0: "a", 1: "b"}).alias("label"), "ts", "end"),
                           ["a", "b"], w)
    assert sweep.sort("step", "label").rows() == [(7, "a", 15), (7, "b", 5), (7, "other", 10), (8, "b", 10)]


NAMES = ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "enumerate(DataPipe)#x",
         "enumerate(DataLoaderX)#", "xenumerate(DataLoader)#", "enumerate(DataLoader)", "nccl:all_reduce",
         "gloo:broadcast", "ncclKernel", "c10d::allreduce_", "aten::mm", "", "nccl", "gloo:"]


@pytest.mark.parametrize(("rx", "prefixes", "hits"), [(breakdown.DATALOADER_RE, breakdown.DATALOADER_PREFIXES, 2),
                                                      (breakdown.COMM_OP_RE, breakdown.COMM_OP_PREFIXES, 3)])
def test_role_prefixes_are_the_regexes(rx, prefixes, hits):
    df = pl.DataFrame({"name": NAMES})
    got = df.select(starts_with_any("name", prefixes))["name"].to_list()
    assert got == [re.match(rx, n) is not None for n in NAMES]
    assert sum(got) == hits


def test_driver_alloc_prefixes_cover_the_regex():
    alternatives = re.match(r"\^\((.*?)\)", memory.DRIVER_ALLOC_RE).group(1).split("|")
    assert len(alternatives) == 12
    assert all(a.startswith(memory.DRIVER_ALLOC_PREFIXES) for a in alternatives)
    t = load("gpu_h200_memory/memory_pressure_empty_cache.json.gz")
    full = t.host.filter(pl.col("name").str.contains(memory.DRIVER_ALLOC_RE))
    assert full.height == 20  # cudaMalloc/cudaFree calls of the empty_cache trace
    assert memory.driver_calls(t, t.steps)["i"].to_list() == (
        memory.host_step_of(full.select("i", "name", "ts", "end"), t.steps, "ts")
        .filter(pl.col("step").is_not_null())["i"].to_list())


@pytest.mark.parametrize("rel", ["gpu_h200/train_tinygpt_modules.json.gz",
                                 "gpu_h200_memory/memory_pressure_empty_cache.json.gz"])
def test_peak_is_the_first_event_at_the_highest_total(rel):
    t = load(rel)
    ev = memory.gpu_events(t, t.steps)
    top = ev.sort(["total_allocated", "ts"], descending=[True, False]).row(0, named=True)
    peak = memory.peak_op(t, ev)
    assert (peak["ts"], peak["allocated"], peak["step"]) == (top["ts"], top["total_allocated"], top["step"])
    assert peak["allocated"] == ev["total_allocated"].max() > 0
    assert peak["ts"] == ev.filter(pl.col("total_allocated") == peak["allocated"])["ts"].min()


@pytest.mark.parametrize("rel", TRACES)
def test_recording_edges_read_the_events_after_the_last_step(rel):
    t = load(rel)
    edges, warns = recording_edges(t, t.steps)
    last = t.steps.sort("step").row(-1, named=True)
    after = t.host.filter((pl.col("ts") >= last["cpu_end"]) & pl.col("cat").is_in(["cuda_runtime", "cuda_driver"])
                          & pl.col("name").str.contains("Synchronize"))
    named = [w for w in warns if "after the last step" in w]
    assert len(named) == (1 if edges["excluded"]["after_us"] and after.height else 0)
    if named:
        assert after["name"][0] in named[0]


@pytest.mark.parametrize("rel", TRACES)
def test_busy_per_window_is_the_union_in_each_window(rel):
    from traceview.analyses.intervals import clip, total
    from traceview.analyses.timeline import busy_per_window, gpu_work

    t = load(rel)
    # a second device: the same work 7 ns later; a step number shared by two windows sums them
    gpu = pl.concat([t.gpu, t.gpu.with_columns(device=pl.col("device") + 1, ts=pl.col("ts") + 7,
                                               end=pl.col("end") + 7)])
    steps = t.steps.with_columns(step=pl.when(pl.col("step") == t.steps["step"][-1]).then(t.steps["step"][0])
                                 .otherwise(pl.col("step")))
    got = {(r["device"], r["step"]): r["busy"] for r in busy_per_window(gpu, steps).iter_rows(named=True)}
    work = gpu_work(gpu)
    want: dict[tuple[int, int], int] = {}
    for dev in work["device"].unique().to_list():
        w = work.filter(pl.col("device") == dev)
        for s, a, b in steps.select("step", "ts", "end").rows():
            want[(dev, s)] = want.get((dev, s), 0) + total(clip(w, a, b))
    assert got == want
    assert sum(got.values()) > 0
    # windows of one device each (the job's per-rank windows); a device without work is idle
    own = steps.select("step", "ts", "end").with_columns(device=pl.lit(int(work["device"].min()), pl.Int64))
    own = pl.concat([own, own.head(1).with_columns(device=pl.lit(-5, pl.Int64), step=pl.lit(10**6, pl.Int64))])
    got_own = {(r["device"], r["step"]): r["busy"] for r in busy_per_window(gpu, own).iter_rows(named=True)}
    assert got_own == {**{k: v for k, v in want.items() if k[0] == int(work["device"].min())}, (-5, 10**6): 0}


@pytest.mark.parametrize("rel", [*TRACES, "gpu_h200/launch_bound_tiny_ops.json.gz"])
def test_temporal_and_idle_arrays_are_the_frame_computations(rel):
    from traceview.analyses import timeline
    from traceview.analyses.intervals import merge

    t = load(rel)
    gpu = pl.concat([t.gpu, t.gpu.with_columns(device=pl.col("device") + 3, ts=pl.col("ts") + 7,
                                               end=pl.col("end") + 7, stream=pl.col("stream") + 1)])
    work = timeline.gpu_work(gpu)
    # idle: the gaps of stream_gaps (frame path) summed per stream
    g = timeline.stream_gaps(work)
    want = (g.group_by("device", "stream").agg([pl.col("gap").filter(pl.col("cause") == c).sum().alias(c)
                                                for c in ("host_wait", "kernel_wait", "other")])
            .with_columns(idle=pl.col("host_wait") + pl.col("kernel_wait") + pl.col("other")).sort("device", "stream"))
    got = timeline.idle_breakdown(gpu)
    assert got.rows() == want.rows() and got.height == 2 * t.gpu["stream"].n_unique()
    assert got["idle"].sum() == g["gap"].sum() > 0
    # temporal: span, idle, compute from the merged intervals by group-by
    allm, comp = merge(work, ["device"]), merge(work.filter(pl.col("kind") == "compute"), ["device"])
    per = allm.group_by("device").agg((pl.col("end") - pl.col("ts")).sum().alias("busy"), pl.col("ts").min().alias("lo"),
                                      pl.col("end").max().alias("hi")).sort("device")
    c = dict(comp.group_by("device").agg((pl.col("end") - pl.col("ts")).sum()).rows())
    tb = timeline.temporal_breakdown(work)
    assert tb.rows() == [(d, hi - lo, hi - lo - b, c.get(d, 0), b - c.get(d, 0)) for d, b, lo, hi in per.rows()]


@pytest.mark.parametrize("rel", ["gpu_h200/launch_bound_tiny_ops.json.gz", "gpu_h200/train_tinygpt_modules.json.gz"])
def test_top_tables_are_the_two_tables(rel):
    from traceview.analyses import kernels

    t = load(rel)
    for n in (3, 10):
        k, o = kernels.top_tables(t, n)
        assert k.rows() == kernels.top_kernels(t, n).rows() and k.height == min(n, k.height) > 0
        assert o.rows() == kernels.top_ops(t, n).rows() and o.height > 0
        # shares of the whole non-sync GPU time; ops: each op's kernels counted once
        busy = t.gpu.filter(pl.col("kind") != "sync")
        assert k["share"].to_list() == pytest.approx([v / busy["dur"].sum() for v in k["total"].to_list()], rel=1e-12)
        assert o["kernels"].sum() <= busy.height
