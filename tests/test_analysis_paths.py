"""Cheaper forms of the analysis helpers (issue 14) agree with direct computations on real bundled traces: the
union per window without a group-by when each window has its own key, the memory events computed once for the
memory section and the memory-pressure rule, the elementwise chains numbered along the frame."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import load
from traceview.rules.elementwise_chain import chains

from traceview.analyses import classify, memory
from traceview.analyses.fusible import OTHER, REDUCTION, kernel_class
from traceview.analyses.intervals import clip, merge, per_window
from traceview.analyses.param_work import param_sized
from traceview.analyses.timeline import busy_per_window, gpu_work, step_busy
from traceview.analyses.windows import host_step_of, in_steps, step_of

TRACES = ["gpu_h200/train_tinygpt_modules.json.gz", "gpu_h200/sync_item_nonzero_cpu.json.gz",
          "gpu_h200_real/hf_gpt2_train_bf16.json.gz"]


@pytest.mark.parametrize("rel", TRACES)
def test_per_window_is_the_union_clipped_to_each_window(rel):
    t = load(rel)
    iv = gpu_work(t.gpu).select("ts", "end")
    got = per_window(iv, t.steps.select("step", "ts", "end"))
    want = [int((lambda m: (m["end"] - m["ts"]).sum())(merge(clip(iv, a, b)))) for a, b in
            t.steps.select("ts", "end").iter_rows()]
    assert got["step"].to_list() == t.steps["step"].to_list()
    assert got["dur"].to_list() == want
    assert sum(want) > 0
    # a key shared by two windows: both rows carry the key's total (the group-by path)
    w = pl.concat([t.steps.select("step", "ts", "end").head(2),
                   t.steps.select(pl.lit(t.steps["step"][0], pl.Int64).alias("step"), "ts", "end").slice(2, 1)])
    shared = per_window(iv, w)["dur"].to_list()
    assert shared[0] == shared[2] == want[0] + want[2] and shared[1] == want[1]


def test_memory_events_once_per_host_spans():
    t = load("gpu_h200_memory/memory_pressure_empty_cache.json.gz")
    ev = memory.gpu_events(t, t.steps)
    assert ev is memory.gpu_events(t, t.steps.select("step", "cpu_ts", "cpu_end"))  # one computation
    # the direct computation: GPU memory events by host span, in time order
    m = t.memory.filter(pl.col("device_type") == memory.GPU_DEVICE_TYPE).sort("ts")
    want = host_step_of(m.select("ts", "bytes"), t.steps, "ts").filter(pl.col("step").is_not_null()).sort("ts")
    assert ev.select("ts", "bytes", "step").equals(want.select("ts", "bytes", "step"))
    assert ev.height == 72  # the GPU allocations and frees of the analysed steps
    drv = memory.driver_calls(t, t.steps)
    assert drv is memory.driver_calls(t, t.steps.select("step", "cpu_ts", "cpu_end"))
    assert drv.height == host_step_of(t.host.filter(pl.col("name").str.contains(memory.DRIVER_ALLOC_RE)), t.steps,
                                      "ts")["step"].count()


def _chains_by_stream_windows(trace, steps, kb, min_kernels=2):
    """The elementwise chains as numbered before (a running count per (device, stream), windows over three
    keys, chains ranked by a struct): the reference for `elementwise_chain.chains`."""
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    g = trace.gpu.filter(pl.col("kind").is_in(["compute", "comm", "memcpy", "memset"]) & (pl.col("ts") >= lo)
                         & (pl.col("ts") < hi)).select("i", "name", "kind", "ts", "end", "dur", "launch_ts", "launch_tid",
                                                       "device", "stream")
    g = g.join(kb.select("i", "op_name", "category", "bytes", "in0_bytes", "extra_bytes", "out_bytes"), on="i",
               how="left")
    cls = kernel_class(g)
    # the kernels the rule never chains (an optimizer step's, DDP's reducer's) leave both numberings alike
    g = g.with_columns(_elem=(cls != OTHER) & ~param_sized(trace, g), _red=cls == REDUCTION)
    g = pl.concat([host_step_of(g.filter(pl.col("launch_ts").is_not_null()), steps, "launch_ts"),
                   step_of(g.filter(pl.col("launch_ts").is_null()), steps)], how="diagonal_relaxed")
    g = g.filter(pl.col("step").is_not_null()).sort("device", "stream", "ts", maintain_order=True)
    brk = ~pl.col("_elem") | (pl.col("step") != pl.col("step").shift()).fill_null(True)
    brk = brk | pl.col("_red").shift().fill_null(False)  # a reduction ends its chain
    g = g.with_columns(_run=brk.cast(pl.Int64).cum_sum().over("device", "stream"))
    g = g.filter(pl.col("_elem")).with_columns(k=pl.len().over("device", "stream", "_run"),
                                               pos=pl.int_range(pl.len()).over("device", "stream", "_run"))
    g = g.filter(pl.col("k") >= min_kernels).with_columns(chain=pl.struct("device", "stream", "_run").rank("dense"))
    return g.select("chain", "step", "device", "stream", "i", "name", "op_name", "ts", "end", "dur", "bytes",
                    "in0_bytes", "extra_bytes", "out_bytes", "pos", "k")


@pytest.mark.parametrize("rel", ["gpu_h200/elementwise_chain_eager.json.gz", "gpu_h200/train_tinygpt_modules.json.gz",
                                 "gpu_h200_real/hf_gpt2_train_bf16.json.gz", "nccl_h200x2/ddp_balanced/rank0.1795959685011564177.pt.trace.json.gz"])
def test_chains_numbered_along_the_frame_are_the_per_stream_runs(rel):
    t = load(rel)
    kb = classify.kernel_bound(t)
    got = chains(t, t.steps, kb)
    assert got.drop("sole").equals(_chains_by_stream_windows(t, t.steps, kb))
    assert got["chain"].n_unique() > 1


@pytest.mark.parametrize("rel", TRACES)
def test_step_busy_is_the_busy_per_window_of_the_steps(rel):
    t = load(rel)
    got = step_busy(t, t.steps)
    assert got.equals(busy_per_window(t.gpu, t.steps))
    assert got is step_busy(t, t.steps.select("step", "ts", "end"))  # once per (trace, windows)
    assert int(got["busy"].sum()) > 0


@pytest.mark.parametrize("rel", TRACES)
def test_in_steps_is_step_of_inside_the_steps(rel):
    """The binary-search path of `in_steps` (no nulls) against `step_of`'s as-of join, on GPU rows, host rows and
    launch times; with a null time (every third launch blanked) it drops those rows too."""
    t = load(rel)
    holes = t.gpu.select("i", launch_ts=pl.when(pl.int_range(pl.len()) % 3 > 0).then(pl.col("launch_ts")))
    for df, col in ((t.gpu.select("i", "ts", "dur"), "ts"), (t.host.select("i", "ts", "dur"), "ts"),
                    (t.gpu.select("i", "launch_ts"), "launch_ts"), (holes, "launch_ts")):
        got = in_steps(df, t.steps, col)
        want = step_of(df, t.steps, col).filter(pl.col("step").is_not_null())
        assert got.height > 0 and got[col].null_count() == 0
        assert got.equals(want), (rel, col)
