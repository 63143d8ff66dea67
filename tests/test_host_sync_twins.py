"""Why the launch-bound host-sync twins miss (docs/predictions.md): the twins ran in processes whose host ran at
different speeds, also in ops that never touch the GPU, and the measured saving follows that speed, not the syncs.
Replayed at any host speed, the syncs' waits are worth a small part of the measured difference; the two twins'
own traces, replayed under one profiler model, differ as much as their measurements do."""

from __future__ import annotations

import functools
import gzip
import json
import math
import statistics

import numpy as np
import pytest
from conftest import SAMPLES
from traceview.rules import BY_NAME

import traceview
from traceview.analyses import fixes, overhead
from traceview.analyses.replay import replay
from traceview.options import Options
from traceview.report import select_steps
from traceview.ruleapi import RuleContext

#: metadata ops: no kernel, no runtime call, no allocation; their time is the host's speed alone
PURE = (
    "aten::view",
    "aten::t",
    "aten::as_strided",
    "aten::detach",
    "aten::transpose",
    "aten::reshape",
    "aten::_unsafe_view",
    "aten::expand",
    "aten::permute",
    "aten::select",
    "aten::slice",
    "aten::unsqueeze",
)
#: (set, problem, fixed) of the launch-bound host-sync twins (GPU busy a quarter to two thirds of the step)
LAUNCH_BOUND = [
    ("collected3", "gpt2_sdpa_item", "gpt2_sdpa_noitem"),
    ("collected3", "train_syncs_item_b16", "train_syncs_deferred_b16"),
    ("collected2", "train_syncs_item", "train_syncs_deferred"),
]


def _measured(set_: str, problem: str) -> float:
    labels = json.loads((SAMPLES / set_ / "labels.json").read_text())
    if "twins" in labels:
        return next(t["measured_fix_saving_ms"] for t in labels["twins"] if t["problem"] == problem)
    return labels[problem]["measured_fix_saving_ms"]


@functools.cache
def _pure_durations(rel: str) -> dict[str, list[float]]:
    """Durations (µs) of the metadata ops inside the trace's ProfilerStep spans, decoded with stdlib json."""
    with gzip.open(next((SAMPLES / rel).glob("*.pt.trace.json*")), "rt") as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo, hi = min(s for s, _ in steps), max(e for _, e in steps)
    out: dict[str, list[float]] = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and e.get("name") in PURE and lo <= e["ts"] < hi:
            out.setdefault(e["name"], []).append(e["dur"])
    return out


def host_speed_ratio(problem: str, fixed: str) -> float:
    """Geometric mean over the metadata ops both traces hold 20+ times of median(problem) / median(fixed)."""
    a, b = _pure_durations(problem), _pure_durations(fixed)
    names = [n for n in PURE if len(a.get(n, ())) >= 20 and len(b.get(n, ())) >= 20]
    assert len(names) >= 6
    return math.exp(
        statistics.fmean(math.log(statistics.median(a[n]) / statistics.median(b[n])) for n in names)
    )


@functools.cache
def _ctx(rel: str) -> RuleContext:
    trace = traceview.load(str(next((SAMPLES / rel).glob("*.pt.trace.json*"))))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    return ctx


def _at(trace, share: float) -> list:
    return [overhead.share_transform(trace, share)]


@pytest.mark.parametrize(("set_", "problem", "fixed"), LAUNCH_BOUND, ids=[t[1] for t in LAUNCH_BOUND])
def test_the_measured_saving_follows_the_processes_host_speed(set_, problem, fixed):
    # gpt2 item/noitem 1.36, train_syncs b16 1.10, b32 0.62 when written: the same program at batch 32 ran its
    # metadata ops 38 % faster in the process with the syncs, and there the "fixed" twin measured 2.1 ms slower
    r = host_speed_ratio(f"{set_}/{problem}", f"{set_}/{fixed}")
    m = _measured(set_, problem)
    assert abs(r - 1) >= 0.08 and (r > 1) == (m > 0), (r, m)


@pytest.mark.parametrize(
    ("set_", "problem"), [("collected3", "gpt2_sdpa_item"), ("collected3", "train_syncs_item_b16")]
)
def test_the_syncs_waits_replayed_at_any_host_speed_are_a_small_part_of_the_measured_saving(set_, problem):
    # the .item() waits for the device work queued before it (a DtoH copy then a stream sync); the device is busy
    # 5.9 of 28 ms (gpt2) and 2.9 of 12.2 ms (train_syncs) a step unprofiled, so little is queued when the host
    # asks, however much faster the host is made (up to SHARE_MAX of every host interval taken off)
    ctx = _ctx(f"{set_}/{problem}")
    t = fixes.transforms(ctx, Options(), [BY_NAME["host-sync"]])["host-sync"]
    saved = []
    for share in np.linspace(0.0, overhead.SHARE_MAX, 8):
        base = _at(ctx.trace, float(share))
        saved.append(
            fixes.mean_saving_us(replay(ctx.trace, ctx.steps, base), replay(ctx.trace, ctx.steps, [*base, t]))
            / 1000
        )
    assert max(saved) < 0.5 * _measured(set_, problem), saved


@pytest.mark.parametrize(("set_", "problem", "fixed"), LAUNCH_BOUND, ids=[t[1] for t in LAUNCH_BOUND])
def test_both_twins_replayed_under_one_profiler_model_differ_outside_the_syncs(set_, problem, fixed):
    # each trace's fitted estimate is within the error band of its own measured step (the fixed twin's replay of
    # "no sync" checked on its own trace); the estimates differ with the measured sign, by several times what
    # the syncs' waits are worth in the problem trace: the difference is host time away from any sync
    est = {}
    for run in (problem, fixed):
        ctx = _ctx(f"{set_}/{run}")
        est[run] = float(overhead.unprofiled_steps(ctx.trace, ctx.steps).mean()) / 1e6
        measured = ctx.profiler["unprofiled_step_ns"] / 1e6
        assert abs(est[run] / measured - 1) <= overhead.ERROR_BAND, (run, est[run], measured)
    ctx = _ctx(f"{set_}/{problem}")
    base = [overhead.profiler_transform(ctx.trace)]
    t = fixes.transforms(ctx, Options(), [BY_NAME["host-sync"]])["host-sync"]
    sync = (
        fixes.mean_saving_us(replay(ctx.trace, ctx.steps, base), replay(ctx.trace, ctx.steps, [*base, t]))
        / 1000
    )
    diff = est[problem] - est[fixed]
    assert (diff > 0) == (_measured(set_, problem) > 0)
    assert abs(diff) > 5 * sync, (diff, sync)
