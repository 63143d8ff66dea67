"""The host's own pace in the replay (docs/replay.md, "queue slot" and "The host's own pace"): the launches a
device-bound FP32 trace makes into the queue of work launched before its window are queue waits, not host time,
and a fix that makes the device faster than the host replays no faster than the host alone."""

from __future__ import annotations

import json
import sys

import numpy as np
import polars as pl
import pytest
from conftest import ROOT, SAMPLES

import traceview
from traceview.analyses import fixes
from traceview.analyses import replay as R
from traceview.analyses.replay_graph import QUEUE_CALL_RE, build
from traceview.options import Options
from traceview.report import rule_context, select_steps

sys.path.insert(0, str(ROOT))


def _trace(problem: str):
    return traceview.load(str(next((SAMPLES / "ab_traced" / problem).glob("*.pt.trace.json*"))))


def test_launches_blocked_on_the_work_queued_before_the_window_are_queue_waits():
    # ViT-B/16 FP32 at batch 64 (H200): the window opens with 752 activities that no call in it launched, the
    # device's first 135 ms; the host, a full queue ahead, blocks on each launch and copy until one of them ends.
    # Counted from the window's own launches alone the queue read as filling from empty, and only 3 of those calls
    # (1.3 ms) were read as waits: the rest, 53 ms, replayed as the host's own time in every fix's step
    g = build(_trace("vit_fp32"))
    pre = g.d_launch < 0
    assert int(pre.sum()) == 752
    opening = int(g.d_end[pre].max())
    assert (opening - int(g.a_ts.min())) / 1e6 == pytest.approx(134.94, abs=0.01)
    names = g.a_name.cast(pl.Utf8)
    queue = names.str.contains(QUEUE_CALL_RE).fill_null(False).to_numpy()
    waited = queue & (g.a_wait >= 0) & (g.a_ts < opening)
    assert int(waited.sum()) == 78
    # 8 of them asynchronous copies (cudaMemcpyAsync takes a slot as a kernel launch does: 300-760 µs each here)
    assert int((waited & (names == "cudaMemcpyAsync").to_numpy()).sum()) == 8
    recorded = (g.a_end - g.a_ts)[waited].astype(np.int64)
    assert recorded.sum() / 1e6 == pytest.approx(54.44, abs=0.01)
    # each keeps its floor (the shortest call of its name): the rest is the wait for the slot
    assert g.a_own[waited].astype(np.int64).sum() / 1e6 == pytest.approx(0.335, abs=0.001)
    # the unmodified replay still reproduces the traced steps (the waits bind where the trace waited)
    steps = _trace("vit_fp32").steps
    traced = (steps["end"] - steps["ts"]).to_numpy().astype(np.float64)
    assert np.abs(R.replay(_trace("vit_fp32"), steps) / traced - 1).max() < 0.01


def _autocast(problem: str):
    from traceview.rules import BY_NAME

    trace = _trace(problem)
    ctx, _, _ = rule_context(trace, select_steps(trace, None), None)
    names = ["fp32-gemm", "fp32-conv"]
    tf = fixes.transforms(ctx, Options(), [BY_NAME[n] for n in names])
    for n in names:
        m = BY_NAME[n]
        got = m.fix_variants(ctx.for_rule(m, Options().options_for(m))) if hasattr(m, "fix_variants") else {}
        if "autocast" in got:
            tf[n] = got["autocast"]
    return ctx, [fixes.pricing_transform(ctx), *tf.values()]


def test_a_fix_that_outruns_the_host_replays_at_the_hosts_pace():
    # ViT-B/16 FP32 -> BF16 autocast at batch 32 on the H100. The FP32 trace opens with the host 57 ms ahead of the
    # device (590 activities launched before the window); the BF16 kernels are faster than the host, so the replayed
    # device ran through that lead: 23.1, 23.1 and 29.1 ms a step, where the host alone — no call waiting for the
    # device, the fix's casts added — takes 39.2 ms a step. The fixed loop has no lead: its step is the host's pace
    # (the BF16 program measured 36.3 ms in the rounds; its own trace replays its host at 33.0)
    ctx, tf = _autocast("vit_fp32_b32_h100")
    assert int((build(ctx.trace).d_launch < 0).sum()) == 590
    got = R.replay(ctx.trace, ctx.steps, tf)
    g = build(ctx.trace)
    sk = R._steps_key(ctx.steps)
    plan = R._plan(g, sk)
    # the host alone, replayed here from the graph with every wait edge dropped (not through `host_paced`)
    a_s = R.simulate(g, [*tf, R.Transform("no wait", no_wait=np.unique(g.a_i[g.a_wait >= 0]).astype(np.int64))])[0]
    first, last = int(plan["c"][int(plan["order"][0])]), int(plan["ce"])
    host = float(a_s[last] - a_s[first]) / ctx.steps.height
    assert host / 1e6 == pytest.approx(39.17, abs=0.05)
    assert float(got.mean()) == pytest.approx(host, rel=1e-9)
    # the device's own replay, which the pace raises: its first two steps ran through the lead
    s, e = R._apply_plan(plan, R.simulate(g, tf))
    assert (e - s) / 1e6 == pytest.approx([23.07, 23.09, 29.12], abs=0.01)
    fixed = json.loads((SAMPLES / "ab_traced" / "vit_fp32_b32_h100" / "ab_result.json").read_text())["fixed_step_ms"]
    assert fixed == pytest.approx(36.33, abs=0.01)
    assert abs(float(got.mean()) / 1e6 / fixed - 1) < 0.10  # (25.1 before: -31 %)


def test_the_hosts_pace_is_one_replay_for_every_fix_of_device_work_alone():
    # the host's replay reads only the transforms' host parts: two fixes that change device work alone (here the
    # TF32 variant and a kernel made shorter) share the pricing transform's one
    trace = _trace("vit_fp32_b32_h100")
    ctx, _, _ = rule_context(trace, select_steps(trace, None), None)
    base = fixes.pricing_transform(ctx)
    g = build(ctx.trace)
    k = int(np.argmax(g.d_end - g.d_ts))
    a = R.Transform("a", gpu_dur={int(g.d_i[k]): 1000})
    b = R.Transform("b", gpu_gap={int(g.d_i[k]): 0}, gpu_dur={int(g.d_i[k + 1]): 1000})
    store = R._replays(ctx.trace)
    before = sum(1 for key in store if key[0] == "host alone")
    R.replay(ctx.trace, ctx.steps, [base, a])
    R.replay(ctx.trace, ctx.steps, [base, b])
    assert sum(1 for key in store if key[0] == "host alone") - before <= 1


def test_a_call_that_always_waited_is_only_its_wake_up_on_the_host_alone():
    # nccl_h200x2/ddp_balanced rank 0 waits once a step in cudaStreamSynchronize for its all-reduce: every such call
    # waited, so the name's shortest call is 14.04 ms of waiting. Kept as the host's own time, the host alone took
    # 40.36 ms a step, more than the traced step (39.48) it runs inside, and every fix of device work on this rank was
    # held above its own replay; with each waited call at its wake-up (17-27 µs) the host alone takes 26.34 ms a step,
    # and the fixes replay as before (the balanced job names no straggler). The graph itself now keeps a call whose
    # every instance waited at its wake-up (session 68: a serving loop's `.cpu()` copy held every fix of its step)
    trace = traceview.load(str(next((SAMPLES / "nccl_h200x2" / "ddp_balanced").glob("rank0*.pt.trace.json*"))))
    g, steps = build(trace), trace.steps
    syncs = np.flatnonzero((g.a_name.cast(pl.Utf8) == "cudaStreamSynchronize").to_numpy())
    assert syncs.size == 3 and (g.a_wait[syncs] >= 0).all()
    assert (g.a_end[syncs] - g.a_ts[syncs]).min() / 1e6 == pytest.approx(14.043, abs=0.001)
    assert g.a_wake[syncs] / 1e3 == pytest.approx([16.84, 26.76, 25.78], abs=0.01)
    assert (g.a_own[syncs] == g.a_wake[syncs]).all()
    plan = R._plan(g, R._steps_key(steps))
    first, last = int(plan["c"][int(plan["order"][0])]), int(plan["ce"])
    alone = R.simulate(g, [R._host_alone(g)], own_cap=R._waited_own(g))[0]
    assert (alone[last] - alone[first]) / steps.height / 1e6 == pytest.approx(26.34, abs=0.01)
    assert float((steps["end"] - steps["ts"]).mean()) / 1e6 == pytest.approx(39.48, abs=0.01)
    # a fix of device work alone, in the trace's own terms, replays as without the host's pace
    k = int(np.argmax(g.d_end - g.d_ts))
    fix = R.Transform("shorter", gpu_dur={int(g.d_i[k]): int(g.d_end[k] - g.d_ts[k]) // 2})
    s, e = R._apply_plan(plan, R.simulate(g, [fix]))
    assert R.replay(trace, steps, [fix]) == pytest.approx(e - s)
