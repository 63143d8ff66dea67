"""The DataLoader's worker processes in the replay: where the training thread blocked in a worker iterator's
`__next__`, the batch arrived when the call returned, a time no change to the training process moves
(`replay_graph._arrivals`, `Graph.a_arrive`; docs/replay.md). The profiler slows the loop, not the workers, so
without it the loop waits longer there instead of running ahead; a call that took a ready batch pins nothing.

The calls and their durations are read from the raw JSON (stdlib json), the measured unprofiled steps from the
collector's manifests (the steady rule of tools/fit_overhead.py and the labels)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLES, load, raw_events

from traceview.analyses.overhead import profiler_transform, unprofiled_steps
from traceview.analyses.replay import Transform, replay
from traceview.analyses.replay_graph import LOADER_WAIT_FACTOR, NEG_TIME, build
from traceview.analyses.windows import complete_steps
from traceview.ingest.manifest import steady_unprofiled_ms

NEXT = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
#: the runs whose DataLoader runs workers (the fixed twins of the input_workers loop: 10 workers, batches ready)
RUNS = {
    "collected4/input_workers_nw2": 1,
    "collected2/cnn_input_nw8": 1,
    "collected4/cnn_input_nw12": 2,
    "collected4/input_workers_nw10": 0,
    "collected5/input_workers_nw10": 0,
}


def _trace_file(run: str) -> str:
    (f,) = (SAMPLES / run).glob("*.pt.trace.json.gz")
    return f"{run}/{f.name}"


def _steps(run: str):
    t = load(_trace_file(run))
    st, _ = complete_steps(t, t.steps)
    return t, st


def _measured_ms(run: str, t) -> float:
    man = json.loads((SAMPLES / run / "manifest.json").read_text())
    return steady_unprofiled_ms(man, _trace_file(run).rsplit("/", 1)[1], t.meta.rank)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_blocked_next_pins_its_batch_arrival(run):
    """Each `__next__` at least LOADER_WAIT_FACTOR times the trace's fastest one (raw JSON durations: input_workers_nw2
    57, 619, 55 µs; cnn_input_nw8 36, 26, 2929 µs; cnn_input_nw12 1060, 6097, 30 µs; the 10-worker runs 39-67 µs)
    pins the training thread's first anchor after its end to that end; the others pin nothing."""
    ev = [e for e in raw_events(_trace_file(run)) if e.get("ph") == "X" and e.get("name") == NEXT]
    dur = np.array([float(e["dur"]) for e in ev])
    blocked = dur >= LOADER_WAIT_FACTOR * dur.min()
    assert int(blocked.sum()) == RUNS[run]
    t = load(_trace_file(run))
    g = build(t)
    if not RUNS[run]:
        assert g.a_arrive is None
        return
    pins = np.flatnonzero(g.a_arrive != NEG_TIME)
    assert pins.size == RUNS[run]
    # the pinned times are the blocked calls' ends (the loader's clock: the host rows of those calls)
    rows = t.host.filter(t.host["name"] == NEXT)
    ends = sorted(int(e) for e, d in zip(rows["end"], (rows["end"] - rows["ts"]) / 1000, strict=True)
                  if d >= LOADER_WAIT_FACTOR * float(dur.min()) - 1e-3)
    assert sorted(g.a_arrive[pins].tolist()) == ends
    for j in pins:  # the anchor pinned is the thread's first at or after the arrival
        same = np.flatnonzero((g.a_tid == g.a_tid[j]) & (g.a_ts >= g.a_arrive[j]))
        assert int(same[np.argmin(g.a_ts[same])]) == j


def test_unprofiled_loop_waits_longer_for_the_workers():
    """input_workers_nw2 (2 workers, 32 ms of CPU a batch: a batch every ~16 ms): the profiled loop ran at about the
    workers' pace (15.3-16.1 ms steps) and waited 0.6 ms for one batch. With the profiler's cost taken off, the
    loop's own step is ~8.5 ms, and the step that waited now waits longer: its replayed period exceeds its traced
    one, where the loop alone (arrivals dropped) replays it at ~8.5 ms."""
    t, st = _steps("collected4/input_workers_nw2")
    traced = (st["end"] - st["ts"]).to_numpy()
    p = profiler_transform(t)
    got = replay(t, st, [p])
    alone = replay(t, st, [p, Transform("batches ready", input_ready=True)])
    assert got[1] > traced[1] and alone[1] < 0.6 * traced[1]
    assert np.allclose(got[[0, 2]], alone[[0, 2]])  # (steps whose batch was ready: unchanged)


def test_estimates_of_the_runs_with_workers():
    """The estimate against the collector's steady unprofiled step (independent of the trace): input_workers_nw2
    8.48 -> 11.06 ms (measured 15.61: -46 % -> -29 %; the window's last step runs free after the last arrival it
    shows: the workers' next batch, 32 ms after the one waited for, falls after the window), cnn_input_nw8
    (calibration) 14.07 -> 17.80 (17.27: -18.5 % -> +3 %), cnn_input_nw12 18.07 -> 20.31 (17.16: +5 % -> +18 %: its
    profiled loop, 22.7 ms a step of its own, still waited 7.2 ms in three steps for 12 workers that keep a 17.2 ms
    step unprofiled: they delivered later under the profiler); the 10-worker runs, which never waited, are
    unchanged (8.35 vs 10.68, 8.00 vs 10.04)."""
    # the calibration run and the 12-worker twin within 5 % and 20 %; nw2 below (a known miss of issue 25's 30 %)
    bound = {"collected2/cnn_input_nw8": 0.05, "collected4/cnn_input_nw12": 0.20}
    for run, b in bound.items():
        t, st = _steps(run)
        err = float(unprofiled_steps(t, st).mean()) / 1e6 / _measured_ms(run, t) - 1
        assert abs(err) <= b, (run, err)
    # nw2: the arrival it waited for holds the estimate well above the loop's own host time (8.48 ms before)
    t, st = _steps("collected4/input_workers_nw2")
    assert float(unprofiled_steps(t, st).mean()) / 1e6 > 0.65 * _measured_ms("collected4/input_workers_nw2", t)


@pytest.mark.xfail(strict=True, reason="issue 25's 30 %: input_workers_nw2 -30.1 % (10.91 ms estimated, 15.61 "
                   "measured): its three captured steps show one batch arrival, the workers' next batch falls after "
                   "the window, so its last step replays at the loop's own pace")
def test_input_workers_nw2_within_the_issue_bound():
    t, st = _steps("collected4/input_workers_nw2")
    err = float(unprofiled_steps(t, st).mean()) / 1e6 / _measured_ms("collected4/input_workers_nw2", t) - 1
    assert abs(err) <= 0.30
