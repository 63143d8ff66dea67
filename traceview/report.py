"""Report: the analyses of one trace (or job) as plain, JSON-ready data.

This is the single API that the CLI, the app and batch/CI mode call. The JSON layout is
documented in docs/json-schema.md; bump SCHEMA_VERSION on any breaking change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .analyses import breakdown, kernels, timeline
from .analyses.intervals import clip
from .errors import TraceError
from .loader import input_files, load_file
from .model import Job, Trace
from .units import pct, us

SCHEMA_VERSION = 1

# Extra sections contributed by later stages (rules, classifier, layers): name -> fn(trace, steps, ctx)
SECTIONS: dict[str, Callable[[Trace, pl.DataFrame, dict], Any]] = {}
# Job-level sections (several ranks): name -> fn(job, ctx)
JOB_SECTIONS: dict[str, Callable[[Job, dict], Any]] = {}
# After a job's sections: fn(job entry, the entries of its traces) may add job context to the trace entries
JOB_ANNOTATORS: list[Callable[[dict, list[dict]], None]] = []


def select_steps(trace: Trace, step: int | None) -> pl.DataFrame:
    steps = trace.steps
    if step is None:
        return steps
    sel = steps.filter(pl.col("step") == step)
    if sel.height == 0:
        have = ", ".join(map(str, steps["step"].to_list()))
        raise TraceError(f"{trace.meta.path}: no step {step} in this trace (steps: {have})")
    return sel


def _device_section(trace: Trace, steps: pl.DataFrame, busy: pl.DataFrame) -> list[dict]:
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    gpu = clip(trace.gpu, lo, hi)
    total = int((steps["end"] - steps["ts"]).sum())
    tb = timeline.temporal_breakdown(timeline.gpu_work(gpu))
    idle = timeline.idle_breakdown(gpu)
    out = []
    for row in tb.iter_rows(named=True):  # one row per device: a handful
        dev = row["device"]
        b = int(busy.filter(pl.col("device") == dev)["busy"].sum())
        streams = [
            {"stream": r["stream"], "host_wait_us": us(r["host_wait"]), "kernel_wait_us": us(r["kernel_wait"]),
             "other_us": us(r["other"]), "idle_us": us(r["idle"]), "host_wait_pct": pct(r["host_wait"], r["idle"])}
            for r in idle.filter(pl.col("device") == dev).iter_rows(named=True)
        ]
        out.append({
            "device": dev, "name": trace.meta.device_name(dev), "busy_us": us(b), "busy_pct": pct(b, total),
            "temporal": {"span_us": us(row["span"]), "idle_us": us(row["idle"]), "compute_us": us(row["compute"]),
                         "non_compute_us": us(row["non_compute"]), "idle_pct": pct(row["idle"], row["span"]),
                         "compute_pct": pct(row["compute"], row["span"]),
                         "non_compute_pct": pct(row["non_compute"], row["span"])},
            "idle_by_stream": streams,
        })
    return out


def _steps_section(trace: Trace, steps: pl.DataFrame, busy: pl.DataFrame) -> tuple[list[dict], dict]:
    bd = breakdown.step_breakdown(trace, steps)
    busy = busy.group_by("step").agg(pl.col("busy").max())
    bd = bd.join(busy, on="step", how="left").with_columns(pl.col("busy").fill_null(0))
    roles = [*breakdown.ROLES, "other"]
    rows = []
    for r in bd.iter_rows(named=True):  # one row per step
        rows.append({
            "step": r["step"], "start_us": us(r["ts"]), "end_us": us(r["end"]), "dur_us": us(r["dur"]),
            "gpu_busy_us": us(r["busy"]), "gpu_busy_pct": pct(r["busy"], r["dur"]),
            "breakdown_us": {k: us(r[k]) for k in roles},
            "breakdown_pct": {k: pct(r[k], r["dur"]) for k in roles},
        })
    tot = bd.select(pl.col(["dur", "busy", *roles]).sum()).row(0, named=True)
    n = bd.height
    summary = {
        "steps": n, "step_numbers": bd["step"].to_list(), "window_us": us(tot["dur"]),
        "avg_step_us": us(tot["dur"] / n) if n else None,
        "gpu_busy_pct": pct(tot["busy"], tot["dur"]),
        "breakdown_pct": {k: pct(tot[k], tot["dur"]) for k in roles},
    }
    return rows, summary


def _kernel_rows(df: pl.DataFrame) -> list[dict]:
    return [{"name": r["name"], "kind": r["kind"], "count": r["count"], "total_us": us(r["total"]),
             "mean_us": us(r["mean"]), "min_us": us(r["min"]), "max_us": us(r["max"]),
             "share_pct": round(100 * r["share"], 2), "op": r["op_name"]} for r in df.iter_rows(named=True)]


def _op_rows(df: pl.DataFrame) -> list[dict]:
    return [{"op": r["op_name"], "calls": r["calls"], "kernels": r["kernels"], "gpu_us": us(r["gpu_total"]),
             "cpu_us": us(r["cpu_total"]), "share_pct": round(100 * r["share"], 2)} for r in df.iter_rows(named=True)]


def metadata(trace: Trace) -> dict:
    m = trace.meta
    return {
        "format": m.format, "backend": m.backend, "trace_name": m.trace_name, "base_time_ns": m.base_time_ns,
        "device": m.device_name(), "devices": m.device_properties, "distributed": m.distributed,
        "versions": m.versions, "options": m.options, "has_profiler_steps": m.has_steps,
        "event_counts": m.event_counts,
    }


def analyze_trace(trace: Trace, step: int | None = None, ctx: dict | None = None, top: int = 10) -> dict:
    ctx = dict(ctx or {})
    steps = select_steps(trace, step)
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    gpu_win = trace.gpu.filter((pl.col("end") > lo) & (pl.col("ts") < hi))
    busy = timeline.busy_per_window(trace.gpu, steps)
    step_rows, summary = _steps_section(trace, steps, busy)
    entry: dict[str, Any] = {
        "path": trace.meta.path, "rank": trace.meta.rank, "world_size": trace.meta.world_size,
        "metadata": metadata(trace), "warnings": list(trace.meta.warnings),
        "summary": summary, "steps": step_rows,
        "devices": _device_section(trace, steps, busy) if trace.has_gpu else [],
        "top_kernels": _kernel_rows(kernels.top_kernels(trace, top, gpu_win)) if trace.has_gpu else [],
        "top_ops": _op_rows(kernels.top_ops(trace, top, gpu_win)) if trace.has_gpu else [],
    }
    if not trace.has_gpu:
        entry["warnings"].append("no GPU activity in this trace (CPU-only): the report analyzes host (CPU) time (JSON `cpu`)")
    for name, fn in SECTIONS.items():
        entry[name] = fn(trace, steps, ctx)
    entry["warnings"].extend(ctx.pop("_warnings", []))  # sections report left-out steps, failed rules
    return entry


@dataclass
class Report:
    """Plain data: one entry per trace, job-level sections, and the inputs that failed."""

    traces: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        from . import __version__

        return {"schema_version": SCHEMA_VERSION, "tool": {"name": "traceview", "version": __version__},
                "traces": self.traces, "jobs": self.jobs, "errors": self.errors}


def analyze(paths: list[str | Path], step: int | None = None, ctx: dict | None = None,
            on_trace: Callable[[str], None] | None = None,
            load: Callable[[Path], Trace] | None = None) -> Report:
    """Analyze files and directories. A directory of rank files is one job; a failing input
    becomes an entry in `errors` and the others go on. `load` (default `load_file`) lets a caller reuse
    traces it already holds, e.g. the app when only the selected step changes."""
    load = load or load_file
    rep = Report()
    for p in paths:
        p = Path(p)
        try:
            files = input_files(p)
        except TraceError as e:
            rep.errors.append({"path": str(p), "error": str(e)})
            continue
        loaded: list[Trace] = []
        for f in files:
            if on_trace:
                on_trace(str(f))
            try:
                t = load(f)
                rep.traces.append(analyze_trace(t, step, ctx))
                loaded.append(t)
            except TraceError as e:
                rep.errors.append({"path": str(f), "error": str(e)})
        if p.is_dir() and len(loaded) > 1 and JOB_SECTIONS:
            loaded.sort(key=lambda t: (t.meta.rank is None, t.meta.rank or 0, t.meta.path))
            job = Job(path=str(p), traces=loaded)
            entry: dict[str, Any] = {"path": job.path, "ranks": job.ranks}
            for name, fn in JOB_SECTIONS.items():
                entry[name] = fn(job, dict(ctx or {}))
            paths = {t.meta.path for t in loaded}
            for annotate in JOB_ANNOTATORS:
                annotate(entry, [e for e in rep.traces if e["path"] in paths])
            rep.jobs.append(entry)
    return rep


def _layers_section(trace: Trace, steps: pl.DataFrame, ctx: dict) -> Any:
    from .layers_view import section  # imported on use: layers_view needs this module's helpers

    return section(trace, steps, ctx)


SECTIONS["layers"] = _layers_section
