"""The `profiling` section: profiled vs unprofiled step time, for traces of a `traceview collect` run.

Profiling inflates host time (above all with stacks), which pushes verdicts toward CPU-bound. The
collector times the unprofiled `wait` steps with CUDA events (manifest.json, read by the loader); here that
is set against the profiled steps, and a launch-bound verdict is flagged when profiling overhead alone
could explain it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from .manifest import rank_step_times
from .model import Trace

# above this overhead a cpu_launch verdict may be the profiler's own doing
ARTIFACT_OVERHEAD_PCT = 20.0


def profiling_section(trace: Trace, steps: pl.DataFrame, dominant: str | None) -> dict | None:
    doc = trace.meta.manifest
    if doc is None:
        return None
    unprof, prof, method = rank_step_times(doc, Path(trace.meta.path).name, trace.meta.rank)
    traced = float((steps["end"] - steps["ts"]).mean()) / 1e6 if steps.height else None
    over = round(100.0 * (prof - unprof) / unprof, 1) if unprof and prof else None
    out = {
        "run": doc.get("run"), "command": doc.get("command"), "options": doc.get("options"),
        "method": method, "unprofiled_step_ms": unprof, "profiled_step_ms": prof,
        "traced_step_ms": round(traced, 3) if traced is not None else None, "overhead_pct": over,
        "launch_bound_may_be_artifact": False, "note": None,
    }
    if over is not None and over > ARTIFACT_OVERHEAD_PCT and dominant == "cpu_launch":
        out["launch_bound_may_be_artifact"] = True
        out["note"] = (f"the profiled steps took {prof:.2f} ms against {unprof:.2f} ms unprofiled (+{over:.0f} %): "
                       "profiling slows the host, so the launch-bound verdict may be partly an artifact of "
                       "profiling; re-record without --stack/--modules or compare the unprofiled step time")
    elif over is not None and over >= 0:
        out["note"] = f"profiled steps {prof:.2f} ms vs {unprof:.2f} ms unprofiled (+{over:.0f} % profiler overhead)"
    elif over is not None:  # faster while profiled: the overhead is below the run-to-run noise
        out["note"] = (f"profiled steps {prof:.2f} ms vs {unprof:.2f} ms unprofiled ({over:.0f} %: no measurable "
                       "profiler overhead; the difference is run-to-run noise)")
    return out
