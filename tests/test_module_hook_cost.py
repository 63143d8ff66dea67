"""The module hooks' profiler cost (analyses.overhead.module_hook_cuts): the collector's `module::` ranges are opened
by Python hooks only while the profiler records, so the host time around each range, up to the floor of that time
over the trace's ranges, is the profiler's. Checked against a stdlib-json recomputation of the gaps around every
range and against the collector's measured unprofiled step (CUDA events, manifest.json)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLES, load, raw_events

from traceview.analyses import overhead
from traceview.analyses.replay import Transform, replay
from traceview.analyses.windows import complete_steps
from traceview.ingest.manifest import rank_step_times

HOST_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"}


def _rel(run: str) -> str:
    (f,) = (SAMPLES / run).glob("*.pt.trace.json.gz")
    return str(f.relative_to(SAMPLES))


def _independent_gaps(rel: str) -> np.ndarray:
    """Host gap (µs) before each module range's start and after its end, to the nearest recorded host row
    boundary of its thread, from the raw JSON."""
    ev = [e for e in raw_events(rel) if e.get("ph") == "X" and e.get("cat") in HOST_CATS]
    out = []
    for tid in {e["tid"] for e in ev if str(e["name"]).startswith("module::")}:
        th = [e for e in ev if e["tid"] == tid]
        b = np.sort([t for e in th for t in (e["ts"], e["ts"] + e["dur"])])
        for e in th:
            if not str(e["name"]).startswith("module::"):
                continue
            s, t = e["ts"], e["ts"] + e["dur"]
            before, after = b[b < s - 1e-4], b[b > t + 1e-4]
            out.append((s - before[-1] if before.size else 0.0) + (after[0] - t if after.size else 0.0))
    return np.asarray(out)


def test_cuts_match_the_raw_gaps():
    rel = _rel("collected3/tinygpt_b16_modules")
    cuts = overhead.module_hook_cuts(load(rel))
    gaps = _independent_gaps(rel)
    assert gaps.size == 120  # 40 module calls per step, 3 steps
    floor_us = float(np.quantile(gaps, overhead.MODULE_FLOOR_Q))
    assert 15 < floor_us < 40  # two hook calls and two dispatched record_function ops per range
    want = np.sort(np.minimum(gaps, floor_us))
    got = np.sort(np.asarray(list(cuts.values()), np.float64)) / 1000
    assert got.size == (want > 0).sum()
    np.testing.assert_allclose(got, want[want > 0], atol=0.01)


def test_no_module_ranges_no_cut():
    assert overhead.module_hook_cuts(load(_rel("collected3/tinygpt_b16"))) == {}


@pytest.mark.parametrize("run", ["collected3/tinygpt_b16_modules", "cpu_collected/tinygpt_train"])
def test_module_cost_moves_the_estimate_toward_the_measurement(run):
    """The estimate with the hooks' cost taken off is nearer the collector's unprofiled step than the same model
    without it, and stays within [GPU busy time, traced step]."""
    rel = _rel(run)
    t = load(rel)
    st, _ = complete_steps(t, t.steps)
    man = json.loads((SAMPLES / run / "manifest.json").read_text())
    unprof_ns = rank_step_times(man, rel.rsplit("/", 1)[1], t.meta.rank)[0] * 1e6
    traced = (st["end"] - st["ts"]).to_numpy().astype(np.float64)
    with_cut = overhead.unprofiled_steps(t, st)
    full = overhead.profiler_transform(t)
    without = Transform("profiler cost", cost_us=full.cost_us, host_share=full.host_share)
    r0 = replay(t, st)
    est_without = traced - np.maximum(r0 - replay(t, st, [without]), 0)
    assert abs(with_cut.mean() / unprof_ns - 1) < abs(est_without.mean() / unprof_ns - 1) - 0.02
    assert (with_cut <= traced + 1).all()
    assert (with_cut >= np.minimum(overhead.gpu_busy_per_step(t, st), traced) - 1).all()
