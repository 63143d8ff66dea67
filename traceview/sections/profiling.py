"""The `profiling` section: what the profiler itself cost, for every trace.

Profiling inflates host time (above all with stacks), which pushes verdicts toward CPU-bound. For every trace
the cost is estimated from the trace itself (analyses.overhead: a share of the host's dispatch time and a cost
per recorded Python event taken off the host time of the replay graph and replayed, calibrated on the project's collected runs) and `estimated_unprofiled_step_us` says what the step would take without the
profiler. For a `traceview collect` run the collector also timed the unprofiled `wait` steps with CUDA events
(manifest.json, read by the loader): those measured numbers are set beside the estimate, and a launch-bound
verdict is flagged when profiling overhead alone could explain it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..analyses.overhead import COST_US, LONG_OP_FLOORS, estimate, host_share, launch_floor_us, row_floor_us
from ..ingest.manifest import rank_step_times, unsettled_reference
from ..model import Trace
from ..ruleapi import RuleContext
from .section import Section

SECTION = Section(
    keys=('profiling',), computes='what the profiler itself cost, estimated or measured by the collector',
    json_type='object', text='header', app_page='overview',
    json_doc='for every trace: `estimated_unprofiled_step_us` (the replay with the profiler\'s cost removed, docs/replay.md), `estimated_unprofiled_step_band_us` [low, high], `estimated_overhead_per_step_us`, `events_per_step` {`op`, `runtime`, `python`}, `gpu_busy_per_step_us` (a rank of a replayed job: its collective kernels counted only for their transfer after the last rank joined, not their wait), `model` (`host_share`: the share of this trace\'s host dispatch time taken off, the fitted share moved by its `launch_floor_us`, the floor of its recorded kernel launches (`cudaLaunchKernel`, `cuLaunchKernel`, `cuLaunchKernelEx`), null without enough; `row_floor_us`: the floor of the host gaps around its recorded ops, null without enough, and `long_op_floors`: the cost of a recorded op more than 1 ms into a host interval the share does not scale (a CPU-only step), in those floors; `cost_us_per_event`, `method`: `replay`, or `job_replay` for a rank estimated in its job\'s replay), `confidence` (`low` when `replay.confidence` is), `traced_step_ms` (mean step period); for traces written by `traceview collect` (a `manifest.json` beside them) also `run`, `command`, `options`, `method` (`cuda_event`/`wall`; `user` where `--unprofiled-ms` gave the step measured without the profiler, which then fills `unprofiled_step_ms` and `overhead_pct` against the traced step), `unprofiled_step_ms`, `profiled_step_ms` (medians measured by the collector), `overhead_pct` (else null); `launch_bound_may_be_artifact` (the verdict is `cpu_launch` and the measured overhead is > 20 %, or without a manifest the estimate moved the primary off `cpu_launch`), `reference_unsettled` (the collector\'s `--settle` gave up waiting for the step time to settle: its unprofiled steps may not be the steady state; the note says so), `note`',
)

REPLAY = Section(
    keys=('replay',), computes="the replay model's fidelity: the unmodified dependency graph replayed against the traced steps",
    json_type='object', text=None, app_page=None,
    json_doc='`fidelity` {`mean_error_pct`, `max_error_pct`, `steps` [{`step`, `traced_us`, `replayed_us`, `error_pct`}]} (null without steps), `confidence` (`high` within 3 % mean / 8 % max, else `low`: every prediction from the replay is then low confidence, `profiling.confidence` too), `note`, `graph` {`host_anchors`, `device_activities`, `unexplained_device_starts`, `launch_latency_us`, `device_gap_us`}, `doc` (docs/replay.md)',
)

# above this overhead a cpu_launch verdict may be the profiler's own doing
ARTIFACT_OVERHEAD_PCT = 20.0


def profiling_section(trace: Trace, steps: pl.DataFrame, dominant: str | None,
                      ctx: RuleContext | None = None, primary: str | None = None,
                      est: dict | None = None) -> dict[str, Any]:
    """The section from the trace's own estimate (`ctx.profiler`), or `est` where another replay made it (a
    rank's in its job's replay: `with_job_estimate`)."""
    if est is None:
        est = (ctx.profiler.get("estimate") if ctx is not None else None) or {}
    out: dict[str, Any] = {
        "estimated_unprofiled_step_us": est.get("estimated_unprofiled_step_us"),
        "estimated_unprofiled_step_band_us": est.get("error_band_us"),
        "estimated_overhead_per_step_us": est.get("overhead_per_step_us"),
        "events_per_step": est.get("events_per_step"),
        "gpu_busy_per_step_us": est.get("gpu_busy_per_step_us"),
        "model": {"host_share": round(host_share(trace), 4), "launch_floor_us": launch_floor_us(trace),
                  "row_floor_us": row_floor_us(trace), "long_op_floors": LONG_OP_FLOORS,
                  "cost_us_per_event": dict(COST_US), "method": est.get("method") or "replay",
                  "doc": "docs/replay.md"},
        "confidence": "high",
        "run": None, "command": None, "options": None, "method": None, "unprofiled_step_ms": None,
        "profiled_step_ms": None, "traced_step_ms": None, "overhead_pct": None,
        "launch_bound_may_be_artifact": False, "reference_unsettled": False, "note": None,
    }
    traced = float((steps["end"] - steps["ts"]).mean()) / 1e6 if steps.height else None
    out["traced_step_ms"] = round(traced, 3) if traced is not None else None
    est_unprof = est.get("estimated_unprofiled_step_us")
    launch_bound = "cpu_launch" in (dominant, primary)
    doc = trace.meta.manifest
    user = (ctx.profiler if ctx is not None else {}).get("source") == "user"
    if user and traced:  # the step the user measured without the profiler (--unprofiled-ms) wins over the rest
        unprof = float(ctx.profiler["unprofiled_step_ns"]) / 1e6
        over = round(100.0 * (traced - unprof) / unprof, 1)
        out.update(method="user", unprofiled_step_ms=round(unprof, 6), overhead_pct=over)
        if doc is not None:  # (the collector's run stays named; its own measurement gives way to the user's)
            out.update(run=doc.get("run"), command=doc.get("command"), options=doc.get("options"))
        out["note"] = (f"traced steps {traced:.2f} ms vs {unprof:.2f} ms unprofiled as you measured it "
                       f"(--unprofiled-ms; {over:+.0f} %): every saving is priced against your measurement")
        if over > ARTIFACT_OVERHEAD_PCT and launch_bound:
            out["launch_bound_may_be_artifact"] = True
            out["note"] += "; the launch-bound verdict may be partly an artifact of profiling"
        return out
    if doc is None:
        if launch_bound and est_unprof and traced and primary != "cpu_launch":
            out["launch_bound_may_be_artifact"] = True
            out["note"] = (f"the traced step ({traced:.2f} ms) looks launch-bound, but the profiler's own cost is "
                           f"estimated at {est['overhead_per_step_us'] / 1000:.2f} ms per step: without it the step "
                           f"would take about {est_unprof / 1000:.2f} ms and be limited by the GPU")
        return out
    unprof, prof, method = rank_step_times(doc, Path(trace.meta.path).name, trace.meta.rank)
    over = round(100.0 * (prof - unprof) / unprof, 1) if unprof and prof else None
    out.update(run=doc.get("run"), command=doc.get("command"), options=doc.get("options"), method=method,
               unprofiled_step_ms=unprof, profiled_step_ms=prof, overhead_pct=over)
    if over is not None and over > ARTIFACT_OVERHEAD_PCT and launch_bound:
        out["launch_bound_may_be_artifact"] = True
        out["note"] = (f"the profiled steps took {prof:.2f} ms against {unprof:.2f} ms unprofiled (+{over:.0f} %): "
                       "profiling slows the host, so the launch-bound verdict may be partly an artifact of "
                       "profiling; re-record without --stack/--modules or compare the unprofiled step time")
    elif over is not None and over >= 0:
        out["note"] = f"profiled steps {prof:.2f} ms vs {unprof:.2f} ms unprofiled (+{over:.0f} % profiler overhead)"
    elif over is not None:  # faster while profiled: the overhead is below the run-to-run noise
        out["note"] = (f"profiled steps {prof:.2f} ms vs {unprof:.2f} ms unprofiled ({over:.0f} %: no measurable "
                       "profiler overhead; the difference is run-to-run noise)")
    moving = unsettled_reference(doc, Path(trace.meta.path).name, trace.meta.rank) if unprof else None
    if moving is not None:
        how = "" if moving == 1.0 else (" (its last wait steps ran at "
                                        f"{moving:.2f}x the ones before)")
        out["reference_unsettled"] = True
        out["note"] = ((out["note"] + "; ") if out["note"] else "") + (
            f"the collector recorded before the step time settled (--settle-max-s){how}: the {unprof:.2f} ms "
            "unprofiled reference every saving is priced against may not be the job's steady state (a warm-up, "
            "or a prefetch buffer draining); measure the step yourself (--unprofiled-ms) or record a longer run")
    return out


def with_job_estimate(entry: dict[str, Any], trace: Trace, steps: pl.DataFrame, unprofiled: np.ndarray,
                      busy: np.ndarray | None = None) -> None:
    """A rank's entry (its `profiling` section, and its projection's `unprofiled_step_us` where that is the
    estimate) from the estimated unprofiled steps of its job's replay (`job_replay.unprofiled_estimates`: the
    ranks joined at their collectives, so a rank's wait for a peer shrinks or grows with the peer's profiler
    cost), `model.method` `job_replay`; `busy`: the GPU busy time per step that bounded it (its collective
    kernels held to their transfer after the last rank joined: `job_replay.busy_per_step`)."""
    old = entry.get("profiling") or {}
    cls = entry.get("classification") or {}
    prof = profiling_section(trace, steps, cls.get("dominant"), primary=cls.get("primary"),
                             est=estimate(trace, steps, unprofiled, method="job_replay", busy=busy))
    prof["confidence"] = old.get("confidence", prof["confidence"])
    if old.get("method") == "user":  # the step the user measured (--unprofiled-ms) stays what the section reports
        prof.update({k: old.get(k) for k in ("method", "unprofiled_step_ms", "profiled_step_ms", "overhead_pct",
                                              "launch_bound_may_be_artifact", "note")})
    entry["profiling"] = prof
    proj = entry.get("projection")
    if proj and proj.get("unprofiled_source") == "estimate":
        proj["unprofiled_step_us"] = prof["estimated_unprofiled_step_us"]
