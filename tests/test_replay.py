"""The replay model (analyses.replay_graph, analyses.replay): the unmodified graph reproduces the traced step
periods of every trace family, the compiled kernel agrees with its Python reference, transforms compose, the
profiler-cost estimate is bounded, and the host-sync fix's predicted saving is checked against its measured twin
(collected2 labels.json `measured_fix_saving_ms`)."""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import polars as pl
import pytest
from conftest import ROOT, SAMPLES

import traceview
from traceview.analyses import overhead
from traceview.analyses import replay as R
from traceview.analyses.replay_graph import KINDS, build
from traceview.analyses.windows import complete_steps
from traceview.model import Job

sys.path.insert(0, str(ROOT))
host_sync = importlib.import_module("rules.host_sync")

# one or more traces of each family with steps
FAMILIES = {
    "gpu_h200": ["gpu_h200/launch_bound_tiny_ops.json.gz", "gpu_h200/train_tinygpt_input_bound.json.gz",
                 "gpu_h200/seed_fragmented_compiled.json.gz",
                 "gpu_h200/cudagraph_reduce_overhead.json.gz", "gpu_h200/sync_item_nonzero_cpu.json.gz"],
    "gpu_h200_compile": ["gpu_h200_compile/compile_recompile_every_step.json.gz",
                         "gpu_h200_compile/optimizer_single_tensor.json.gz"],
    "gpu_h200_real": ["gpu_h200_real/hf_gpt2_train_bf16.json.gz", "gpu_h200_real/tv_resnet50_train_dataloader_nw0.json.gz"],
    "collected": ["collected/train_tinygpt_modules", "collected/sync_item_nonzero_cpu"],
    "collected2": ["collected2/train_gradnorm_item_b64", "collected2/tinygpt_b8_stack", "collected2/compile_graph_break",
                   "collected2/tiny_ops_n64_cudagraph", "collected2/tiny_ops_n64_reduce_overhead"],
    "cpu_collected": ["cpu_collected/tinygpt_train"],
    "cpu": ["cpu_trace_example_torch2.13.json.gz"],
    "nccl_h200x2": ["nccl_h200x2/ddp_balanced", "nccl_h200x2/fsdp_rank1_slowed"],
    "gloo": ["gloo_straggler/slowed"],
    # ROCm, MTIA (asynchronous runtime calls that overlap), kernels waiting on other streams without a recorded event
    "hta": ["hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
            "hta/negative_queue_length_values_check/rank0.json.gz", "hta/trace_diff/test/test.json.gz"],
    # PyTorch 1.8-era Kineto (2021 format); nw4: a pageable copy staged inside its cudaMemcpyAsync
    "kineto_resnet50": ["kineto_resnet50/resnet50_num_workers_0", "kineto_resnet50/resnet50_num_workers_4"],
}
def _traces(rel: str) -> list[traceview.Trace]:
    t = traceview.load(SAMPLES / rel)
    return list(t.traces) if isinstance(t, Job) else [t]


def _fidelity(rel: str) -> list[tuple[float, float]]:
    out = []
    for t in _traces(rel):
        st, _ = complete_steps(t, t.steps)
        if st.height:
            f = R.fidelity(t, st)["fidelity"]
            out.append((f["mean_error_pct"], f["max_error_pct"]))
    return out


@pytest.mark.parametrize("rel", [r for rs in FAMILIES.values() for r in rs])
def test_replay_reproduces_traced_periods(rel):
    got = _fidelity(rel)
    assert got, "a trace with steps"
    for mean, worst in got:
        assert mean <= 3.0 and worst <= 8.0


def test_fidelity_measures_the_traced_periods():
    # the same replay against step windows whose last period is 30 % longer than traced: a miss, said so
    (t,) = _traces("gpu_h200/launch_bound_tiny_ops.json.gz")
    st, _ = complete_steps(t, t.steps)
    ok = R.fidelity(t, st)
    assert ok["confidence"] == "high" and ok["note"] is None
    last = st["end"].max()
    longer = st.with_columns(end=pl.when(pl.col("end") == last).then(pl.col("ts") + (pl.col("end") - pl.col("ts")) * 13 // 10)
                             .otherwise(pl.col("end")))
    f = R.fidelity(t, longer)
    assert f["confidence"] == "low" and "low confidence" in f["note"]
    assert f["fidelity"]["max_error_pct"] == pytest.approx(100 * (1 - 1 / 1.3), abs=0.5)


def test_compiled_kernel_matches_python_reference():
    (t,) = _traces("collected2/train_gradnorm_item_b32")
    g = build(t)
    a_s, a_e, d_s, d_e = R.simulate(g, [overhead.profiler_transform(t)])
    saved = R._longest_c, R._pull_c
    try:
        R._pull_c = None  # the edge list's compiled kernel
        c = R.simulate(g, [overhead.profiler_transform(t)])
        R._longest_c = None  # the edge list's Python loop
        b = R.simulate(g, [overhead.profiler_transform(t)])
    finally:
        R._longest_c, R._pull_c = saved
    for x, y, z in zip((a_s, a_e, d_s, d_e), b, c, strict=True):
        assert np.array_equal(x, y) and np.array_equal(x, z)
    assert a_e.size == g.a_ts.size and d_s.size == g.d_ts.size and (a_e >= a_s).all()


def test_transforms_compose_not_sum():
    (t,) = _traces("collected2/train_gradnorm_item_b64")
    st, _ = complete_steps(t, t.steps)
    fix = host_sync.fix_transform(t)
    once = R.replay(t, st, [fix])
    assert np.array_equal(once, R.replay(t, st, [fix, fix]))  # the same fix twice is the fix once
    base = R.replay(t, st)
    assert once.sum() <= base.sum()  # (a step may lengthen where the boundary before it moved earlier)
    # removing every kernel's time leaves the host's own chain: never below zero, never above the traced
    zero = R.Transform("no gpu", gpu_dur={int(i): 0 for i in t.gpu["i"]})
    both = R.replay(t, st, [fix, zero])
    assert both.sum() <= once.sum() and (both > 0).all()


def _cuts_row_by_row(g, transforms) -> np.ndarray:
    """The transforms' host cuts (gap, join, own per anchor) added row by row: an independent reference for
    `replay._cuts`, which counts rows per slot once per graph and adds whole ns in one sum per slot."""
    rows, n_a = g.seg_rows, g.a_ts.size
    slot = rows.where.astype(np.int64) * n_a + rows.seg
    at = {int(i): p for p, i in enumerate(rows.i.tolist())}
    cuts = np.zeros(3 * n_a)
    # a row more than HOST_SHARE_MAX_NS into its host interval: the gap from the previous call of its thread (its
    # start where the calls overlap), the joined part from the other thread's call, or the call's own time
    beyond = np.zeros(rows.i.size, bool)
    for p, (a, w, ts) in enumerate(zip(rows.seg.tolist(), rows.where.tolist(), rows.ts.tolist(), strict=True)):
        if w == 2:
            start = g.a_ts[a]
        elif w == 1:
            start = g.a_ts[a] - g.a_jwake[a]
        elif g.a_prev[a] >= 0:
            start = g.a_ts[g.a_prev[a]] if g.a_overlap[a] else g.a_end[g.a_prev[a]]
        else:
            start = g.a_ts[a] - g.a_gap[a]
        beyond[p] = ts - start > R.HOST_SHARE_MAX_NS
    for t in transforms:
        if t.cost_us:
            np.add.at(cuts, slot, np.array([1000 * t.cost_us.get(k, 0.0) for k in KINDS])[rows.kind])
        if t.long_cost_us:
            per = np.array([1000 * t.long_cost_us.get(k, 0.0) for k in KINDS])[rows.kind]
            np.add.at(cuts, slot[beyond], per[beyond])
        for i, ns in t.host_cut.items():
            if int(i) in at:
                cuts[slot[at[int(i)]]] += ns
    removed = sorted({at[int(i)] for t in transforms for i in t.host_removed if int(i) in at})
    np.add.at(cuts, slot[removed], rows.dur[removed].astype(np.float64))
    return cuts


def test_cuts_match_the_row_by_row_sums():
    (t,) = _traces("collected/train_tinygpt_modules")
    g = build(t)
    # 1.5 µs per Python row, the module hooks' measured host time, the recorded ops beyond the share's reach
    prof = overhead.profiler_transform(t)
    assert prof.host_cut and prof.long_cost_us["op"] > 0 and g.seg_rows.i.size > 10_000
    # (and the trace holds such rows: its host intervals of more than 1 ms)
    no_long = R.Transform("p", cost_us=prof.cost_us, host_cut=prof.host_cut)
    assert np.concatenate(R._cuts(g, [prof])[:3]).sum() > np.concatenate(R._cuts(g, [no_long])[:3]).sum()
    ids = g.seg_rows.i[g.seg_rows.kind == list(KINDS).index("op")]
    a = R.Transform("a", host_removed=ids[::3].tolist())
    b = R.Transform("b", host_removed=ids[::2].tolist())  # (rows removed by both leave the host once)
    cases = [[prof], [prof, a], [prof, a, b], [b, a]]
    def total(ts):  # the cuts after the shares plus the per-row cost taken before them (`edges`)
        c = R._cuts(g, ts)
        return np.concatenate(c[:3]) + c[6]

    for ts in cases:  # whole ns: the same sums exactly
        got = total(ts)
        assert np.array_equal(got, _cuts_row_by_row(g, ts)) and got.sum() > 0
    # the per-row cost is kept apart from the other cuts: it is the cost_us rows alone
    only = R.Transform("rows", cost_us=prof.cost_us)
    assert np.array_equal(R._cuts(g, [prof, a])[6], _cuts_row_by_row(g, [only]))
    # a cost of a fraction of a ns per row is added row by row: equal to rounding
    frac = R.Transform("frac", cost_us={"python": 0.3337}, host_cut={int(i): 0.5 for i in ids[:50]})
    for ts in ([frac], [frac, a], [prof, frac, b]):
        np.testing.assert_allclose(total(ts), _cuts_row_by_row(g, ts), rtol=1e-12)


def test_a_set_of_fixes_is_replayed_once():
    (t,) = _traces("collected2/train_gradnorm_item_b64")
    st, _ = complete_steps(t, t.steps)
    fix = host_sync.fix_transform(t)
    calls = []
    real = R.simulate
    try:
        R.simulate = lambda g, ts=(): calls.append(len(ts)) or real(g, ts)
        first = R.replay(t, st, [overhead.profiler_transform(t), fix])
        first[:] = 0  # (the caller's copy)
        again = R.replay(t, st, [overhead.profiler_transform(t), fix])  # a new profiler transform, the same values
        alone = R.replay(t, st, [fix])
    finally:
        R.simulate = real
    assert calls == [2, 1]  # the second set was not replayed again; the fix alone was
    assert (again > 0).all() and np.array_equal(again, R.replay(t, st, [overhead.profiler_transform(t), fix]))
    assert again.mean() < alone.mean()  # (the profiler's cost off too: a different replay, not the cached one)


@pytest.mark.parametrize("run", ["collected2/tinygpt_b8_stack", "collected2/compile_no_break", "collected2/gemm_bf16_n4096",
                                 "collected2/tiny_ops_n64_reduce_overhead", "cpu_collected/launch_bound_tiny_ops"])
def test_unprofiled_estimate_is_bounded(run):
    (t,) = _traces(run)
    st, _ = complete_steps(t, t.steps)
    est = overhead.unprofiled_steps(t, st)
    traced = (st["end"] - st["ts"]).to_numpy()
    busy = overhead.gpu_busy_per_step(t, st)
    assert (est <= traced).all() and (est >= np.minimum(busy, traced)).all()
    e = overhead.estimate(t, st)
    lo, hi = e["error_band_us"]
    assert lo <= e["estimated_unprofiled_step_us"] <= hi <= e["traced_step_us"] + 1e-3


LABELS2 = json.loads((SAMPLES / "collected2/labels.json").read_text())


@pytest.mark.parametrize("run", [
    pytest.param("train_gradnorm_item_b64", marks=pytest.mark.xfail(
        strict=True, reason="1.50 ms predicted vs 1.91 measured (-21.5 %; -17 % under the per-event profiler "
                            "model: with the host-share model the unprofiled host is faster, the sync hides less)")),
    pytest.param("train_gradnorm_item_b32", marks=pytest.mark.xfail(
        strict=True, reason="1.28 ms predicted vs 1.72 measured (-25 %)"))])
def test_host_sync_fix_predicts_measured_twin(run):
    (t,) = _traces(f"collected2/{run}")
    st, _ = complete_steps(t, t.steps)
    pred_ms = float(overhead.saving(t, st, host_sync.fix_transform(t)).mean()) / 1e6
    measured = LABELS2[run]["measured_fix_saving_ms"]  # 1.59 vs 1.91 ms (b64) when written
    assert 0 < pred_ms < LABELS2[run]["unprofiled_step_ms"]
    assert pred_ms == pytest.approx(measured, rel=0.2)


def test_host_sync_fix_saving_is_positive_and_below_the_step():
    for run in ("train_gradnorm_item_b32", "train_gradnorm_item_b64", "train_syncs_item"):
        (t,) = _traces(f"collected2/{run}")
        st, _ = complete_steps(t, t.steps)
        s = overhead.saving(t, st, host_sync.fix_transform(t))
        assert (s >= 0).all() and (s < overhead.unprofiled_steps(t, st)).all()


@pytest.mark.xfail(strict=True, reason="0.37 ms predicted (5.1 % of the 7.10 ms step) where the twin measured no "
                                       "saving (it ran 2.1 ms slower: host-speed noise on a launch-bound step, "
                                       "collected2/MANIFEST.md)")
def test_syncs_item_fix_saves_little():
    # train_syncs_item -> train_syncs_deferred: measured no saving (the twin ran 2.1 ms slower: host-speed noise on a
    # launch-bound step)
    (t,) = _traces("collected2/train_syncs_item")
    st, _ = complete_steps(t, t.steps)
    pred_ms = float(overhead.saving(t, st, host_sync.fix_transform(t)).mean()) / 1e6
    assert 0 <= pred_ms < 0.05 * LABELS2["train_syncs_item"]["unprofiled_step_ms"]


def test_steps_without_host_anchors_replay_from_their_activities() -> None:
    """A trace whose steps have no host call to anchor them (HTA's large-integer sample: no runtime rows on the
    host) replays from the device activities alone; the marker lookup finds no anchor and says so (NaN), not
    an error. Cross-check: its recorded document digest (tests/golden_digests.json)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import golden

    rel = "hta/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
    from traceview.ingest.loader import load_file

    t = load_file(SAMPLES / rel)
    g = build(t)
    assert g.a_ts.size == 0 and g.d_ts.size > 0 and t.steps.height > 0
    assert R.replay(t, t.steps).size == t.steps.height
    assert golden.digest(rel) == json.loads(golden.DIGESTS.read_text())[rel]


def test_a_removed_kernel_takes_its_device_gap():
    """A kernel a transform removes (a fused chain's 2nd..kth) no longer pays the device's gap before it: on the
    eager fragmented run (3 small elementwise kernels after each GEMM, queued ~1 µs apart) the stream edge into a
    removed kernel carries no gap, the others keep theirs, and each kept gap is the raw trace's (kernel start less
    the previous kernel's end on its stream, stdlib-json reading)."""
    from ref_stats import load_events

    run = SAMPLES / "collected2" / "fragmented_eager"
    (t,) = _traces("collected2/fragmented_eager")
    g = build(t)
    a = 2 * g.a_ts.size
    # the kernels queued right behind the previous one (gap under 2 µs), and from those every other one removed
    queued = np.flatnonzero((g.d_prev >= 0) & (g.d_ts - g.d_end[np.maximum(g.d_prev, 0)] < 2_000))
    gone = queued[::2]
    fix = R.Transform("fused", gpu_dur={int(g.d_i[k]): 0 for k in gone})
    _, src, dst, off = R.edges(g, [fix])
    stream = src == a + 2 * g.d_prev[np.maximum((dst - a) // 2, 0)] + 1
    into = {int((d - a) // 2): int(o) for s_, d, o, ok in zip(src, dst, off, stream, strict=True) if ok and d >= a and d % 2 == 0}
    assert gone.size > 20 and all(into[int(k)] == 0 for k in gone)
    kept = queued[1::2]
    assert all(into[int(k)] == g.d_gap[k] > 0 for k in kept)
    # the kept gaps are the raw trace's own
    ev = [e for e in load_events(next(run.glob("*.pt.trace.json*"))) if e.get("cat") == "kernel"]
    ev.sort(key=lambda e: (e["args"].get("stream"), e["ts"]))
    raw = {}
    for p, e in zip(ev, ev[1:], strict=False):
        if p["args"].get("stream") == e["args"].get("stream"):
            raw[round(e["ts"] * 1000)] = round((e["ts"] - p["ts"] - p["dur"]) * 1000)
    t0 = t.meta.t0_us * 1000
    for k in kept[:50]:
        assert abs(raw[round(g.d_ts[k] + t0)] - g.d_gap[k]) <= 2  # (µs with 3 decimals: ns rounding)


def test_a_graph_queued_behind_its_stream_moves_up_with_the_work_before_it():
    """ResNet-18 served 1 image per call as one CUDA graph a step: the host launches each graph ~11-25 ms before its
    first node runs (the previous graph still on the stream). Taking every device gap out (`gpu_gap`) shortens the
    device-bound steps by the gaps the raw kernels leave, once the queue is not kept as a launch latency."""
    path = next((SAMPLES / "collected5/resnet18_serve_c1_graph").glob("*.pt.trace.json.gz"))
    t = traceview.load(path)
    steps, _ = complete_steps(t, t.steps)
    g = build(t)
    base = R.replay(t, steps)
    nogap = R.replay(t, steps, [R.Transform("no gaps", gpu_gap={int(i): 0 for i in g.d_i})])
    raw = json.loads(__import__("gzip").decompress(path.read_bytes()))
    ev = raw["traceEvents"]
    dev = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "gpu_user_annotation"
                 and str(e.get("name", "")).startswith("ProfilerStep#"))
    k = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel")
    # idle time between consecutive kernels inside the device-side steps (µs -> ns)
    idle = sum(max(b[0] - a[1], 0) for a, b in zip(k, k[1:], strict=False) if dev[0][0] <= a[0] < dev[-1][1])
    assert float((base - nogap).mean()) == pytest.approx(idle * 1000 / len(dev), rel=0.1)


def test_the_anchors_do_not_depend_on_the_files_event_order(tmp_path) -> None:
    """A runtime call and a call nested in it can start in the same (rounded) microsecond; the enclosing one
    anchors the host, whatever order the file lists them in. HTA's trace_diff sample has such pairs: read with the
    stdlib, its events written back in reverse give the same anchors, and the count is the stdlib's own: per
    thread, the top-level runtime calls (by start, the longer first at a tie, each ending after all before it) and
    two per step marker."""
    import gzip

    from ref_stats import load_events

    from traceview.ingest.loader import load_file
    from traceview.model import RUNTIME_CATS

    rel = SAMPLES / "hta/trace_diff/test/test.json.gz"
    doc = json.loads(gzip.decompress(rel.read_bytes()))
    doc["traceEvents"] = doc["traceEvents"][::-1]
    rev = tmp_path / "reversed.json"
    rev.write_text(json.dumps(doc))
    g, gr = build(load_file(rel)), build(load_file(rev))
    assert np.array_equal(g.a_ts, gr.a_ts) and np.array_equal(g.a_end, gr.a_end)

    calls: dict = {}
    for e in load_events(rel):
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS:
            calls.setdefault(e["tid"], []).append((e["ts"], -e["dur"]))
    top = 0
    for rows in calls.values():
        run_end = None
        for ts, neg in sorted(rows):
            if run_end is None or ts - neg > run_end:
                top += 1
            run_end = ts - neg if run_end is None else max(run_end, ts - neg)
    t = load_file(rel)
    markers = 2 * t.steps.filter(pl.col("cpu_ts").is_not_null() & pl.col("host_idx").is_not_null()).height
    assert g.a_ts.size == top + markers > 20_000
