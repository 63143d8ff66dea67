"""The `traceview collect` run manifest next to a trace: profiled vs unprofiled step time.

Profiling inflates host time (above all with stacks), which pushes verdicts toward CPU-bound. The
collector times the unprofiled `wait` steps with CUDA events; here that is set against the profiled
steps, and a launch-bound verdict is flagged when profiling overhead alone could explain it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl

from .model import Trace

# above this overhead a cpu_launch verdict may be the profiler's own doing
ARTIFACT_OVERHEAD_PCT = 20.0


def read_manifest(trace_path: str | Path, problems: list[str] | None = None) -> dict | None:
    """manifest.json of the run folder holding this trace, if it is a collector run: only the keys used
    here, each of the expected type (a value of another type is left out and named in `problems`)."""
    if str(trace_path) == "-":
        return None
    p = Path(trace_path).parent / "manifest.json"
    try:
        if not p.is_file() or p.stat().st_size > _MAX_MANIFEST:
            return None
        doc = json.loads(p.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or "manifest_version" not in doc:
        return None
    bad: list[str] = []
    clean = {"run": _str(doc.get("run"), "run", bad), "command": _str(doc.get("command"), "command", bad),
             "options": doc.get("options") if isinstance(doc.get("options"), dict) else None,
             "step_time": _numbers(doc.get("step_time"), _STEP_TIME_KEYS, "step_time", bad),
             "ranks": []}
    ranks = doc.get("ranks")
    if ranks is not None and not isinstance(ranks, list):
        bad.append("ranks")
        ranks = []
    for k, r in enumerate(ranks or []):
        if not isinstance(r, dict):
            bad.append(f"ranks[{k}]")
            continue
        rank = r.get("rank")
        entry = _numbers(r, _RANK_KEYS, f"ranks[{k}]", bad)
        entry["rank"] = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        if rank is not None and entry["rank"] is None:
            bad.append(f"ranks[{k}].rank")
        entry["step_time_method"] = _str(r.get("step_time_method"), f"ranks[{k}].step_time_method", bad)
        for key, test in (("unprofiled_step_ms", _is_num), ("profiled_step_ms", _is_num),
                          ("traces", lambda t: isinstance(t, dict))):
            v = r.get(key)
            entry[key] = [x for x in v if test(x)] if isinstance(v, list) else []
            if v is not None and (not isinstance(v, list) or len(entry[key]) < len(v)):
                bad.append(f"ranks[{k}].{key}")
        clean["ranks"].append(entry)
    if problems is not None and bad:
        problems.append(f"{p.name} beside the trace has values of an unexpected type ({', '.join(bad[:5])}"
                        f"{' ...' if len(bad) > 5 else ''}): those were ignored")
    return clean


_MAX_MANIFEST = 64 * 2**20  # a collector manifest is a few KiB; more is not one
_STEP_TIME_KEYS = ("profiled_ms_median", "unprofiled_ms_median")
_RANK_KEYS = ("unprofiled_step_ms_median", "profiled_step_ms_median")


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _str(v: object, key: str, bad: list[str]) -> str | None:
    if v is None or isinstance(v, str):
        return v
    bad.append(key)
    return None


def _numbers(d: object, keys: tuple[str, ...], where: str, bad: list[str]) -> dict:
    """{key: finite positive number or None} for `keys` of the dict `d`."""
    if d is None:
        return dict.fromkeys(keys)
    if not isinstance(d, dict):
        bad.append(where)
        return dict.fromkeys(keys)
    out: dict = {}
    for k in keys:
        v = d.get(k)
        if v is None or (_is_num(v) and v > 0):
            out[k] = v
        else:
            bad.append(f"{where}.{k}")
            out[k] = None
    return out


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
        if any(t.get("file") == name for t in r.get("traces") or []):
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
    problems: list[str] = []
    doc = read_manifest(trace.meta.path, problems)
    ctx.setdefault("_warnings", []).extend(problems)
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
    elif over is not None:
        out["note"] = f"profiled steps {prof:.2f} ms vs {unprof:.2f} ms unprofiled (+{over:.0f} % profiler overhead)"
    return out
