"""Report: the analyses of one trace (or job) as plain, JSON-ready data — the one pipeline.

`analyze(paths, options)` is the single API that the CLI, the app and batch/CI mode call; it returns the
same document `traceview analyze --format json` prints. Data flows one way and every section is listed in
`analyze_trace` / `analyze`, in the order it appears in the document:

  load → metadata, summary, steps, devices, top_kernels, top_ops  (breakdowns, HTA/tb_plugin numbers)
       → RuleContext (analysed steps, roofline per kernel, classifier partition: computed once)
       → findings (rules) → layers (with the findings and the partition) → classification → verdict_text
       → profiling (collector manifest) → memory ([memory] events) → projection (step time with each fix)
       → cpu (traces without GPU activity: host time, ops by self CPU time, per-layer CPU time; their rules
         and verdict come from the same host analyses)
  then, for a directory holding several rank files: the job (nccl matching, job rules, per-rank verdicts).

The JSON layout is documented in docs/json-schema.md; bump SCHEMA_VERSION on any breaking change.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from .analyses import breakdown, kernels, timeline
from .analyses.intervals import clip
from .analyses.replay import fidelity as replay_fidelity
from .analyses.windows import recording_edges
from .errors import TraceError
from .fixrunner import apply as replayed_fixes
from .ingest import heap_trim as heap
from .ingest.loader import input_files, load_file
from .model import Job, Trace
from .notes import aggregate as aggregate_warnings
from .options import Options
from .ruleapi import RuleContext
from .rulerunner import run_rules
from .sections.layers import section as layers_section
from .sections.memory import memory_section
from .sections.profiling import profiling_section
from .sections.projection import projection_section
from .sections.verdict import classification_section, verdict_text
from .units import pct, us

if TYPE_CHECKING:
    from .sections.job import RankResult

SCHEMA_VERSION = 1


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
    # the columns the breakdowns read (their fallback for null devices or streams too): a clip copies every column
    gpu = clip(trace.gpu.select("i", "name", "op", "kind", "device", "stream", "ts", "end", "launch_ts"), lo, hi)
    total = int((steps["end"] - steps["ts"]).sum())
    tb = timeline.temporal_breakdown(timeline.gpu_work(gpu))
    idle = timeline.idle_breakdown(gpu)
    busy_by: dict[int, int] = {}
    for dev, b in busy.select("device", "busy").iter_rows():  # devices x steps: small
        busy_by[dev] = busy_by.get(dev, 0) + b
    idle_by: dict[int, list[dict]] = {}
    for r in idle.iter_rows(named=True):  # one row per stream, by device and stream
        idle_by.setdefault(r["device"], []).append(r)
    out = []
    for row in tb.iter_rows(named=True):  # one row per device: a handful
        dev = row["device"]
        b = busy_by.get(dev, 0)
        streams = [
            {"stream": r["stream"], "host_wait_us": us(r["host_wait"]), "kernel_wait_us": us(r["kernel_wait"]),
             "other_us": us(r["other"]), "idle_us": us(r["idle"]), "host_wait_pct": pct(r["host_wait"], r["idle"])}
            for r in idle_by.get(dev, [])
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
    """Per step: its period [start, end) (periods partition time) with the GPU busy time in it, and the
    tb_plugin-style breakdown over the plugin's own window (tb_*), kept for comparison with the plugin."""
    roles = [*breakdown.ROLES, "other"]
    rows = []
    steps_rows = _step_rows(trace, steps, busy)
    for r in steps_rows:
        rows.append({
            "step": r["step"], "start_us": us(r["ts"]), "end_us": us(r["end"]), "dur_us": us(r["dur"]),
            "gpu_busy_us": us(r["busy"]), "gpu_busy_pct": pct(r["busy"], r["dur"]),
            "tb_start_us": us(r["tb_ts"]), "tb_end_us": us(r["tb_end"]), "tb_dur_us": us(r["tb_dur"]),
            "breakdown_us": {k: us(r[k]) for k in roles},
            "breakdown_pct": {k: pct(r[k], r["tb_dur"]) for k in roles},
        })
    tot = {c: sum(r[c] for r in steps_rows) for c in ("dur", "tb_dur", "busy", *roles)}  # ints: exact
    n = len(steps_rows)
    summary = {
        "steps": n, "step_numbers": [r["step"] for r in steps_rows], "window_us": us(tot["dur"]),
        "avg_step_us": us(tot["dur"] / n) if n else None,
        "gpu_busy_pct": pct(tot["busy"], tot["dur"]),
        "tb_window_us": us(tot["tb_dur"]), "tb_avg_step_us": us(tot["tb_dur"] / n) if n else None,
        "breakdown_pct": {k: pct(tot[k], tot["tb_dur"]) for k in roles},
    }
    return rows, summary


def _step_rows(trace: Trace, steps: pl.DataFrame, busy: pl.DataFrame) -> list[dict]:
    """One dict per step, by step: [step, ts, end, dur] of its period, the breakdown over the plugin's window
    (tb_ts, tb_end, tb_dur, roles) and its busiest device's busy ns. Joined in Python (steps are few; five
    polars calls cost more than the rows on a small trace), by frames when step numbers repeat or are null."""
    bd = breakdown.step_breakdown(trace, steps).rename({"ts": "tb_ts", "end": "tb_end", "dur": "tb_dur"})
    if steps["step"].is_duplicated().any() or any(steps[c].null_count() for c in ("step", "ts", "end")):
        busy = busy.group_by("step").agg(pl.col("busy").max())
        return list(steps.select("step", "ts", "end", (pl.col("end") - pl.col("ts")).alias("dur"))
                    .join(bd, on="step").join(busy, on="step", how="left")
                    .with_columns(pl.col("busy").fill_null(0)).sort("step").iter_rows(named=True))
    most: dict[int, int] = {}
    for s, b in busy.select("step", "busy").iter_rows():  # devices x steps
        if b is not None and (s not in most or b > most[s]):
            most[s] = b
    tb = {r["step"]: r for r in bd.iter_rows(named=True)}
    out = [{"step": s, "ts": a, "end": e, "dur": e - a, **{k: v for k, v in tb[s].items() if k != "step"},
            "busy": most.get(s, 0)} for s, a, e in steps.select("step", "ts", "end").iter_rows() if s in tb]
    return sorted(out, key=lambda r: r["step"])


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


def analyze_trace(trace: Trace, options: Options | None = None) -> dict:
    """The report entry of one trace."""
    return _analyze_trace(trace, options or Options())[0]


def _analyze_trace(trace: Trace, options: Options) -> tuple[dict, pl.DataFrame, pl.DataFrame | None]:
    """(the trace's entry, its analysed steps, the classifier's partition of them)."""
    steps = select_steps(trace, options.step)
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    # the columns the top tables read: a filter copies every column (40 on the GPU frame)
    gpu_win = trace.gpu.select("name", "kind", "op", "dur", "ts", "end").filter((pl.col("end") > lo) & (pl.col("ts") < hi))
    busy = timeline.step_busy(trace, steps)
    step_rows, summary = _steps_section(trace, steps, busy)
    edges, edge_warns = recording_edges(trace, steps)
    summary.update(edges)
    warnings = [*trace.meta.warnings, *edge_warns]
    devices = _device_section(trace, steps, busy) if trace.has_gpu else []
    top_k, top_o = kernels.top_tables(trace, options.top, gpu_win) if trace.has_gpu else (None, None)
    entry: dict[str, Any] = {
        "path": trace.meta.path, "rank": trace.meta.rank, "world_size": trace.meta.world_size,
        "metadata": metadata(trace), "warnings": warnings, "summary": summary, "steps": step_rows,
        "devices": devices, "top_kernels": _kernel_rows(top_k) if top_k is not None else [],
        "top_ops": _op_rows(top_o) if top_o is not None else [],
    }
    ctx: RuleContext | None = None
    findings: list[dict] = []
    fixinfo: dict | None = None
    analysed = steps
    host: dict | None = None
    if trace.has_gpu:
        ctx, warns = RuleContext.prepare(trace, steps)
        warnings.extend(warns)  # steps left out of the rules and the classification
        analysed = ctx.steps
        findings, warns = run_rules(ctx, options)
        warnings.extend(warns)  # rules that failed
        findings, fixinfo = replayed_fixes(ctx, options, findings)  # every saving a replay (issue 25)
    else:
        from .sections import cpu as cpu_view  # (traces without GPU activity only; `host` is set only here)

        warnings.append("no GPU activity in this trace (CPU-only): the report analyzes host (CPU) time (JSON `cpu`)")
        host = cpu_view.prepare(trace, steps)
        findings, warns = run_rules(RuleContext.for_host(trace, steps, host), options)  # the rules with CPU = True
        warnings.extend(warns)
        # no device to replay: the rules' own estimate over the steps, per step like every saving
        findings = [{**f, "savings_us": round(f["savings_us"] / max(steps.height, 1), 3)} for f in findings]
    # before the layer table, the analysis's largest step: what loading and the sections so far freed
    heap.release(trace.gpu.height + trace.host.height)
    entry["layers"] = layers_section(trace, steps, findings=findings, kb=ctx.kb if ctx else None,
                                     part=_part(trace, steps, ctx), depth=options.layers_depth)
    entry["classification"] = classification = classification_section(ctx, findings)
    entry["findings"] = findings
    entry["verdict_text"] = (verdict_text(classification, analysed.height, findings) if ctx
                             else cpu_view.verdict(trace, steps, host, findings) if host else None)
    entry["profiling"] = profiling_section(trace, analysed, classification.get("dominant"), ctx,
                                           classification.get("primary"))
    entry["replay"] = replay_fidelity(trace, analysed)
    if entry["replay"].get("confidence") == "low":
        entry["profiling"]["confidence"] = "low"
    entry["memory"] = memory_section(trace, analysed) if trace.has_gpu else None
    entry["projection"] = projection_section(ctx, findings, entry["profiling"], options, fixinfo)
    entry["cpu"] = cpu_view.section(trace, steps, host) if host else None
    entry["warnings"] = aggregate_warnings(entry["warnings"])  # one line per kind, not one per step
    return entry, analysed, ctx.part if ctx else None


def _part(trace: Trace, steps: pl.DataFrame, ctx: RuleContext | None) -> pl.DataFrame | None:
    """The classifier's segments of every selected step (the layer view also covers a cut-off last step)."""
    if ctx is None:
        return None
    if ctx.steps.height == steps.height:
        return ctx.part
    from .analyses.classify import partition

    return partition(trace, steps, ctx.kb, keep=False, enum=True)  # (only the layer view reads it: freed after it)


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


def analyze_job_traces(job: Job, options: Options | None = None) -> tuple[dict, list[dict]]:
    """(the job entry, the trace entries) of rank traces already loaded — as `analyze` on their directory."""
    from .sections.job import RankResult, analyze_job

    options = options or Options()
    ranks = []
    for t in job.traces:
        entry, analysed, part = _analyze_trace(t, options)
        ranks.append(RankResult(trace=t, steps=analysed, entry=entry, part=part))
    entry, warns = analyze_job(job.path, ranks, options)
    if warns:
        entry["warnings"] = warns
    return entry, [r.entry for r in ranks]


def _error(path: Path | str, e: BaseException) -> dict:
    """One error row: a TraceError's own line, else the exception named with the file it happened on."""
    msg = str(e) if isinstance(e, TraceError) else f"{path}: internal error ({type(e).__name__}: {e})"
    return {"path": str(path), "error": msg}


#: from this many files in one directory the ranks are analysed in worker processes (`Options.jobs` None)
PARALLEL_MIN_FILES = 8
PARALLEL_MIN_CORES = 4


def _workers(n_files: int, options: Options, custom_load: bool) -> int:
    """Worker processes for the files of one input: 1 (serial, in this process) for a single file, a caller's
    own loader or `jobs=1`."""
    if n_files < 2 or custom_load:
        return 1
    if options.jobs is not None:
        return max(1, min(options.jobs, n_files))
    cores = os.cpu_count() or 1
    # a worker costs a process start and imports (~1 s); on 2-3 cores polars' own threads already use them
    return min(cores, n_files) if n_files >= PARALLEL_MIN_FILES and cores >= PARALLEL_MIN_CORES else 1


def _default_load(path: Path, options: Options) -> Trace:
    return load_file(path) if options.max_bytes is None else load_file(path, max_bytes=options.max_bytes)


def _analyze_file(path: Path, options: Options) -> tuple[dict, RankResult | None]:
    """(its trace entry or error row, the rank) of one file: what a worker process sends back."""
    from .sections.job import RankResult

    try:
        t = _default_load(path, options)
        entry, analysed, part = _analyze_trace(t, options)
    except Exception as e:  # noqa: BLE001 - isolate every input
        return _error(path, e), None
    return entry, RankResult(trace=t, steps=analysed, entry=entry, part=part)


def _analyze_files(files: list[Path], options: Options, workers: int,
                   on_trace: Callable[[str], None] | None) -> list[tuple[dict, RankResult | None]]:
    """`_analyze_file` over the files, in worker processes, results in file order (identical to the serial path:
    each file is analysed alone; spawned workers, as polars' thread pool does not survive fork)."""
    from . import procpool

    # each worker gets its share of the cores: polars would start a thread per core in every worker otherwise
    # (the variable is read when a spawned worker imports polars; the workers start during the submits)
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    pool, futures = procpool.start(_analyze_file, [(f, options) for f in files], workers,
                                   env={"POLARS_MAX_THREADS": threads})
    with pool:
        out = []
        for f, fut in zip(files, futures, strict=True):
            if on_trace:
                on_trace(str(f))
            try:
                out.append(fut.result())
            except Exception:  # noqa: BLE001 - the pool itself failed (a worker killed, no importable __main__
                out.append(_analyze_file(f, options))  # to spawn from): this file in this process, same result
        return out


def analyze(paths: list[str | Path], options: Options | None = None, *,
            on_trace: Callable[[str], None] | None = None, load: Callable[[Path], Trace] | None = None) -> Report:
    """Analyze files and directories. A directory of several rank files is also one job. Every input is
    isolated: one that fails (any error) becomes a row of `errors` naming it, and the others go on. `load`
    (default `load_file`) lets a caller reuse traces it already holds, e.g. the app when only the step
    changes."""
    options = options or Options()
    custom_load = load is not None
    load = load or functools.partial(_default_load, options=options)
    rep = Report()
    for p in map(Path, paths):
        try:
            files = input_files(p)
        except Exception as e:  # noqa: BLE001 - isolate every input
            rep.errors.append(_error(p, e))
            continue
        ranks: list[RankResult] = []
        job_dir = p.is_dir()  # only the rank files of a directory form a job
        if job_dir:
            from .sections.job import RankResult, analyze_job
        workers = _workers(len(files), options, custom_load)
        if workers > 1:
            for entry, rank in _analyze_files(files, options, workers, on_trace):
                if rank is None:
                    rep.errors.append(entry)
                else:
                    rep.traces.append(entry)
                    ranks.append(rank)
        for f in files if workers == 1 else []:
            if on_trace:
                on_trace(str(f))
            try:
                t = load(f)
                entry, analysed, part = _analyze_trace(t, options)
            except Exception as e:  # noqa: BLE001 - isolate every input
                rep.errors.append(_error(f, e))
                continue
            rep.traces.append(entry)
            if job_dir:
                ranks.append(RankResult(trace=t, steps=analysed, entry=entry, part=part))
        if job_dir and len(ranks) > 1:
            ranks.sort(key=lambda r: (r.trace.meta.rank is None, r.trace.meta.rank or 0, r.trace.meta.path))
            try:
                job, warns = analyze_job(str(p), ranks, options)
            except Exception as e:  # noqa: BLE001 - the traces' own entries stand
                rep.errors.append(_error(p, e))
                continue
            if warns:
                job["warnings"] = warns
            rep.jobs.append(job)
    return rep
