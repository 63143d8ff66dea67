"""The `traceview collect` run manifest next to a trace: profiled vs unprofiled step time.

Profiling inflates host time (above all with stacks), which pushes verdicts toward CPU-bound. The
collector times the unprofiled `wait` steps with CUDA events; here that is set against the profiled
steps, and a launch-bound verdict is flagged when profiling overhead alone could explain it.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from .model import Trace

# above this overhead a cpu_launch verdict may be the profiler's own doing
ARTIFACT_OVERHEAD_PCT = 20.0


def read_manifest(trace_path: str | Path) -> dict | None:
    """manifest.json of the run folder holding this trace, if it is a collector run."""
    p = Path(trace_path).parent / "manifest.json"
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "manifest_version" in doc else None


def step_overhead_ms(trace_path: str | Path) -> float | None:
    """Profiled minus unprofiled median step time (ms, >= 0) of the collector run holding this trace (the
    manifest's job-level `step_time`), or None outside a collector run."""
    st = ((read_manifest(trace_path) or {}).get("step_time")) or {}
    prof, unprof = st.get("profiled_ms_median"), st.get("unprofiled_ms_median")
    if isinstance(prof, (int, float)) and isinstance(unprof, (int, float)):
        return max(float(prof) - float(unprof), 0.0)
    return None


def _rank_entry(doc: dict, trace: Trace) -> dict | None:
    name = Path(trace.meta.path).name
    for r in doc.get("ranks") or []:
        if any(isinstance(t, dict) and t.get("file") == name for t in r.get("traces") or []):
            return r
    for r in doc.get("ranks") or []:
        if r.get("rank") == (trace.meta.rank or 0):
            return r
    return None


def _median(xs: list) -> float | None:
    v = sorted(float(x) for x in xs if isinstance(x, (int, float)))
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def profiling_section(trace: Trace, steps: pl.DataFrame, ctx: dict) -> dict | None:
    doc = read_manifest(trace.meta.path)
    if doc is None:
        return None
    r = _rank_entry(doc, trace) or {}
    unprof = r.get("unprofiled_step_ms_median") or _median(r.get("unprofiled_step_ms") or [])
    prof = r.get("profiled_step_ms_median") or _median(r.get("profiled_step_ms") or [])
    traced = float((steps["end"] - steps["ts"]).mean()) / 1e6 if steps.height else None
    over = round(100.0 * (prof - unprof) / unprof, 1) if unprof and prof else None
    out = {
        "run": doc.get("run"), "command": doc.get("command"), "options": doc.get("options"),
        "method": r.get("step_time_method"), "unprofiled_step_ms": unprof, "profiled_step_ms": prof,
        "traced_step_ms": round(traced, 3) if traced is not None else None, "overhead_pct": over,
        "launch_bound_may_be_artifact": False, "note": None,
    }
    dominant = None
    if trace.has_gpu:
        from .engine import classification_section

        dominant = classification_section(trace, steps, ctx).get("dominant")
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
