"""The host-side principles behind the predictions (docs/replay.md, docs/predictions.md): a thread waiting for
another thread's long op joins it (gloo), the DataLoader workers' measured pace as a floor, a bounded fix keeps
its bound among the others, and one finding owns a saving that two rules price."""

from __future__ import annotations

import functools
import json
import statistics

import numpy as np
import polars as pl
from conftest import SAMPLES
from traceview.rules import BY_NAME

import traceview
from traceview.analyses import fixes
from traceview.analyses.replay import replay
from traceview.analyses.replay_graph import build
from traceview.options import Options
from traceview.report import analyze, select_steps
from traceview.ruleapi import RuleContext

C4 = SAMPLES / "collected4"


@functools.cache
def _ctx(rel: str) -> RuleContext:
    trace = traceview.load(str(sorted((SAMPLES / rel).glob("rank0.*.pt.trace.json*"))[0]))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    return ctx


def test_the_reducer_waiting_for_a_gloo_all_reduce_is_a_join_edge():
    # rank 0 of the 2-rank gloo job: gloo's worker threads record each all-reduce as one `gloo:all_reduce` span
    # (10-30 ms, no call inside) while the autograd thread sits idle in DDP's reducer until it ends
    ctx = _ctx("collected4/ddp_accum4_gloo2")
    t = ctx.trace
    g = build(t)
    gloo = t.host.filter(pl.col("name") == "gloo:all_reduce")
    gloo_tids = set(gloo["tid"].unique().to_list())
    assert len(gloo_tids) == 2 and gloo.height == 36  # 4 micro-batches x 3 buckets x 3 steps
    lo, hi = int(ctx.steps["ts"].min()), int(ctx.steps["end"].max())
    joined = np.flatnonzero((g.a_join >= 0) & (g.a_ts >= lo) & (g.a_ts < hi))
    onto_gloo = [
        j for j in joined if int(g.a_tid[g.a_join[j]]) in gloo_tids and int(g.a_tid[j]) not in gloo_tids
    ]
    idle = [int(g.a_ts[j] - g.a_end[g.a_prev[j]]) for j in onto_gloo]
    # every such wait (the autograd thread idle for milliseconds) is the join edge's: the gloo thread was inside
    # its all-reduce span when the autograd thread went idle, so nothing of the wait stays on its own gap
    assert len(onto_gloo) >= 18 and min(idle) >= 100_000 and sum(idle) / 3 > 100e6  # > 100 ms of waits a step
    assert sum(int(g.a_gap[j]) for j in onto_gloo) < 0.01 * sum(idle)
    # so the fix (no_sync on 3 of 4 micro-batches) takes the waits off: the collector measured 98.1 ms a step
    tf = fixes.transforms(ctx, Options(), [BY_NAME["accumulation-sync"]])
    got = fixes.rule_savings(ctx, tf)["accumulation-sync"]["unprofiled_us"] / 1000
    assert abs(got / 98.061 - 1) <= 0.20, got


def test_the_workers_pace_is_the_measured_steady_mean_where_it_exceeds_the_loop():
    labels = json.loads((C4 / "labels.json").read_text())["runs"]
    m = json.loads((C4 / "input_workers_nw2/manifest.json").read_text())["ranks"][0]["unprofiled_step_ms"]
    # the collector's labels: the mean of wait steps 12-23, after the prefetch buffer (2 x 2 batches) drained
    assert labels["input_workers_nw2"]["unprofiled_how"] == "mean of wait steps 12-23"
    nw2 = _ctx("collected4/input_workers_nw2")
    pace = fixes.input_floor_ns(nw2) / 1e6
    assert (
        pace == statistics.mean(m[len(m) // 2 :])
        and abs(pace - labels["input_workers_nw2"]["unprofiled_step_ms"]) < 0.01
    )
    # the loop's own steps, while the buffer lasted, ran ~7.4 ms: the workers (2 x 16 x 2 ms of CPU a batch / 2) set it
    assert max(m[:4]) < 8.0 < 16.0 < pace
    # with 10 workers the steady steps stay within the loop's own pace: no floor
    assert fixes.input_floor_ns(_ctx("collected4/input_workers_nw10")) is None
    # the priced base replays the floor; the loader fix, batches ready, lifts it
    base = fixes.pricing_transform(nw2)
    assert base.floor_ns == pace * 1e6
    assert float(replay(nw2.trace, nw2.steps, [base]).mean()) == base.floor_ns
    t = fixes.transforms(nw2, Options(), [BY_NAME["loader-workers"]])["loader-workers"]
    assert t.input_ready and float(replay(nw2.trace, nw2.steps, [base, t]).mean()) < 0.6 * base.floor_ns


def test_the_profiled_loop_at_the_workers_pace_is_found():
    # the trace records no wait (the profiler slowed the loop to the workers' pace); the manifest shows it
    rep = analyze([C4 / "input_workers_nw2"]).traces[0]
    (f,) = [x for x in rep["findings"] if x["rule"] == "loader-workers"]
    assert f["severity"] in ("warning", "error") and f["evidence"]["dataloader_pct"] < 5
    assert f["evidence"]["unprofiled"]["measured_step_us"] == rep["projection"]["replayed_unprofiled_step_us"]


def test_a_bounded_fix_keeps_its_bound_among_all_fixes():
    # rank 0 of the DDP job whose rank 1 is slowed: removing its syncs lets the host run ahead of a peer it waits
    # for; alone the host-sync saving is held to its bound, and so it is in the all-fixes projection
    rel = "nccl_h200x2/ddp_rank1_slowed"
    ctx = _ctx(rel)
    tf = fixes.transforms(ctx, Options(), [BY_NAME[r] for r in ("host-sync", "launch-bound")])
    assert tf["host-sync"].bound_us is not None and tf["launch-bound"].bound_us is None
    base = [fixes.pricing_transform(ctx)]
    both = fixes.per_step_us(ctx.trace, ctx.steps, [tf["host-sync"], tf["launch-bound"]], base)
    free = fixes.per_step_us(ctx.trace, ctx.steps, [tf["launch-bound"]], base)
    unbounded = fixes.mean_saving_us(
        replay(ctx.trace, ctx.steps, base),
        replay(ctx.trace, ctx.steps, [*base, tf["host-sync"], tf["launch-bound"]]),
    )
    assert both <= free + tf["host-sync"].bound_us + 1e-6
    assert both < unbounded  # the ceiling binds here


def test_one_finding_owns_a_saving_two_rules_price():
    # decode loop, batch 1: the static cache replayed as a CUDA graph (TV105) and launch-bound's CUDA graph (TV101)
    # remove the same launch gaps; the collector measured 130.2 ms a step for the static-cache twin
    rep = analyze([C4 / "decode_dynamic"]).traces[0]
    by = {f["rule"]: f for f in rep["findings"]}
    owner, other = by["decode-loop"], by["launch-bound"]
    assert owner["severity"] == "error" and abs(owner["savings_us"] / 130192.5 - 1) <= 0.20
    lb = other["evidence"]["after_larger_fixes"]
    assert other["severity"] == "info" and lb["fixes"] == ["decode-loop"]
    assert other["savings_us"] == lb["savings_us"] < 0.01 * owner["savings_us"] < lb["alone_savings_us"]
    proj = {f["rule"]: f for f in rep["projection"]["fixes"]}
    assert proj["launch-bound"]["savings_us"] == other["savings_us"]
    assert proj["launch-bound"]["alone_savings_us"] == lb["alone_savings_us"]
