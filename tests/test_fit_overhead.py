"""tools/fit_overhead.py: the committed profiler model (analyses.overhead.HOST_SHARE, LAUNCH_SLOPE, COST_US and
LONG_OP_FLOORS) is the fit's optimum on the calibration runs of tools/overhead_split.json — no single grid step of one
parameter lowers the fitting loss — the split keeps calibration and held-out runs apart, only a run whose trace is
not the steps the collector timed, or whose only unprofiled step is the first, is set aside, and only a run whose
manifest says its reference is not a steady state is left out of the scores for that."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import ROOT, SAMPLES

from traceview.analyses import overhead

spec = importlib.util.spec_from_file_location("fit_overhead", ROOT / "tools/fit_overhead.py")
fit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fit)


@pytest.fixture(scope="module")
def every_run() -> list[dict]:
    return fit.runs()


@pytest.fixture(scope="module")
def cal(every_run) -> list[dict]:
    return [r for r in every_run if r["group"] == "calibration"]


def test_only_a_trace_of_other_steps_or_no_steady_step_is_set_aside(every_run):
    """collected4/cnn_input_nw3's captured steps waited on input (traced 54 ms) where the steps the collector timed
    under the profiler took 19.6 ms (manifest.json): no profiler-cost model bridges that. gloo_straggler's ranks
    recorded one unprofiled step each, the first, which still warms up (steady_unprofiled_ms leaves it out
    wherever there are more): no steady measurement to score against. ab_traced/train_syncs_item_b16_h100's capture
    holds a stalled step (58.6 ms profiled, the others ~21). Those are listed, not scored; every other
    run's traced step is within the host-speed noise of its profiled CUDA-event step and has a step after the
    first."""
    aside = {(r["run"], r["rank"]): r["set_aside"] for r in every_run if r["set_aside"]}
    one_step = {
        (f"gloo_straggler/{p.parent.name}", json.loads(p.read_text())["rank"])
        for p in SAMPLES.glob("*/*/rank*.collect.json")
        if p.parent.parent.name == "gloo_straggler" and len(json.loads(p.read_text())["unprofiled_step_ms"]) == 1
    }
    assert len(one_step) == 6
    # the H100 recording of the synthetic host-sync loop: one of its three profiled steps stalled (58.6 ms, the
    # others 19.8 and 22.4), so its traced mean is not the steps the collector's median timed
    # ... and the ten-step captures of user_programs2_h100 that hold per-shape setups (TV106: one step of 150.7 ms
    # among ~28; four of 3-5 s among ~40): their traced mean is not their profiled steps' median either
    setups = {("user_programs2_h100/bert_dynpad_a10", 0), ("user_programs2_h100/resnet_varsize_a10", 0)}
    # ... and user_programs3_h100/loader_pil_w4, whose four workers deliver in bursts: its captured steps (12.6, 80.3,
    # 21.0 ms) hold one of every four steps' long wait, so their mean is not their median (21.0)
    loader = {("user_programs3_h100/loader_pil_w4", 0)}
    assert set(aside) == ({("collected4/cnn_input_nw3", 0), ("ab_traced/train_syncs_item_b16_h100", 0)} | one_step
                          | setups | loader)
    assert all("one unprofiled step" in aside[k] for k in one_step)
    man = json.loads((SAMPLES / "collected4/cnn_input_nw3/manifest.json").read_text())
    (r,) = [r for r in every_run if (r["run"], r["rank"]) == ("collected4/cnn_input_nw3", 0)]
    assert man["step_time"]["profiled_ms_median"] == pytest.approx(r["prof_ns"] / 1e6)
    assert r["traced_ns"] > 2 * r["prof_ns"]
    assert all(
        abs(r["traced_ns"] / r["prof_ns"] - 1) <= fit.TRACE_TOL for r in every_run if not r["set_aside"]
    )


def test_unsteady_references_are_the_manifests_word(every_run):
    """A run is left out of the scores for an unsteady reference only where the collector's own record says so,
    recomputed here from its rank file (`rank<R>.collect.json`, stdlib): --settle gave up; the steps the reference
    is the median of (after the first; whole periods of a loader-fed loop) vary more than the collector's spread
    warning (2x); or the first settle window of the same process's steps after the capture ran more than the
    settle tolerance (5 %) faster than the reference. Never by the estimate's error: collected5/epilogue_bert_eager
    (−32 % against wait steps of 2.23–3.71 ms that its twin's rounds ran at 1.77) stays scored, its manifest saying
    none of this (two post-capture steps, both slower)."""
    import statistics

    def expect(run: str, rank: int | None, unprof_ms: float) -> bool:
        d = SAMPLES / run
        meta = {json.loads(p.read_text()).get("rank", 0): json.loads(p.read_text()) for p in d.glob("rank*.collect.json")}
        e = meta[rank or 0]
        if (e.get("settle") or {}).get("settled") is False:
            return True
        k = (e.get("settle") or {}).get("loader_period") or 1
        xs = [x for x in e.get("unprofiled_step_ms") or [] if x > 0]
        xs = [sum(xs[i:i + k]) / k for i in range(0, len(xs) - k + 1, k)] if k > 1 else (xs[1:] if len(xs) >= 3 else xs)
        if len(xs) >= 2 and max(xs) > 2 * min(xs):
            return True
        wait = json.loads((d / "manifest.json").read_text())["schedule"]["wait"]
        h = -(-max(3, -(-wait // 2)) // k) * k
        post = [x for x in e.get("post_capture_step_ms") or [] if x > 0][:h]
        pace = (sum(post) / len(post) if k > 1 else statistics.median(post)) if len(post) >= h else None
        return pace is not None and pace < 0.95 * unprof_ms

    got = {(r["run"], r["rank"]) for r in every_run if r["unsteady"]}
    want = {(r["run"], r["rank"]) for r in every_run if not r["set_aside"] and expect(r["run"], r["rank"], r["unprof_ns"] / 1e6)}
    assert got == want
    for key in (("ab_traced/epilogue_bert_eager_h100", 0), ("user_programs3_h100/moe_naive", 0),  # still faster
                ("collected4/input_workers_nw2", 0),  # a draining prefetch buffer: 7.3 to 25.7 ms
                ("user_programs2_h100/compile_varlen", 0)):  # --settle gave up
        assert key in got, key
    assert ("collected5/epilogue_bert_eager", 0) not in got
    # calibration runs keep their place in the fit (its committed optimum), out of the scores only
    assert not any(r["set_aside"] for r in every_run if r["group"] == "calibration")


def test_split_is_disjoint_and_complete(cal):
    assert {r["run"] for r in cal} == set(
        fit.SPLIT["calibration"]
    )  # every calibration run has a manifest and steps
    assert not any(r["run"].startswith(fit.SPLIT["held_out"] + "/") for r in cal)


def test_committed_costs_are_the_fit(cal):
    committed = {
        **overhead.COST_US,
        "host_share": overhead.HOST_SHARE,
        "launch_slope": overhead.LAUNCH_SLOPE,
        "long_op": overhead.LONG_OP_FLOORS,
    }
    assert committed == fit.COMMITTED
    best = fit.loss(cal, committed)
    for k, grid in fit.GRID.items():
        step = float(grid[1] - grid[0])
        for v in (committed[k] - step, committed[k] + step):
            if grid.min() - 1e-9 <= v <= grid.max() + 1e-9:
                assert fit.loss(cal, {**committed, k: v}) >= best - 1e-9, (k, v)
    # the fitted model beats doing nothing (the traced step as the guess) on the calibration runs
    t = fit.table(cal, committed)["calibration"]
    assert t["median"] < 0.1 < t["baseline_median"]


def test_docs_tables_are_the_committed_model_on_every_run(every_run):
    """docs/replay.md and docs/profiling-overhead.md hold the tables `python tools/fit_overhead.py --check
    --write-docs` writes from the committed model over every bundled run: a run added to sample_traces (the
    evaluation row's count and errors) makes them stale (the evaluation row read 98 runs with 137 bundled)."""
    md = fit.markdown(every_run, dict(fit.COMMITTED))
    for p in fit.DOCS:
        text = p.read_text()
        assert text[text.index(fit.BEGIN) + len(fit.BEGIN):text.index(fit.END)] == "\n" + md, p.name
