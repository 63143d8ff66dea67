"""Report: the analyses of one trace (or job) as plain, JSON-ready data — the one pipeline.

`analyze(paths, options)` is the single API that the CLI, the app and batch/CI mode call; it returns the
same document `traceview analyze --format json` prints. `SECTIONS` lists a trace entry's sections in document
order (one module each in traceview/sections/, declaring its keys, JSON part, text renderer and app page);
`_analyze_trace` computes them, in this order:

  load → metadata, summary, steps, devices, top_kernels, top_ops  (breakdowns, HTA/tb_plugin numbers)
       → RuleContext (analysed steps, roofline per kernel, classifier partition: computed once)
       → findings (rules) → classification → verdict_text
       → profiling (collector manifest) → memory ([memory] events) → projection (step time with each fix)
       → cpu (traces without GPU activity: host time, ops by self CPU time, per-layer CPU time; their rules
         and verdict come from the same host analyses)
       → layers (with the findings and the partition; last, once the replay's and the rules' whole-trace
         results are dropped, in its place in the document)
  then, for a directory holding several rank files: the job (nccl matching, job rules, per-rank verdicts).

The JSON layout is documented in docs/json-schema.md; bump SCHEMA_VERSION on any breaking change.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from .analyses import kernels, timeline
from .analyses import layers as layer_attr
from .analyses.classify import string_classes
from .analyses.replay import CACHES as REPLAY_CACHES
from .analyses.replay import fidelity as replay_fidelity
from .analyses.windows import recording_edges
from .errors import TraceError
from .frames import pick
from .ingest import heap_trim
from .ingest.loader import input_files, load_file
from .memo import drop, forget
from .model import Job, Trace
from .notes import aggregate as aggregate_warnings
from .options import Options
from .parallel import start
from .records import record
from .ruleapi import RuleContext
from .sections import cpu, findings, job_entry, layers, memory, overview, profiling, projection, verdict
from .sections.findings import run_rules
from .sections.fixrunner import apply as replayed_fixes
from .sections.layers import section as layers_section
from .sections.memory import memory_section
from .sections.overview import device_section, kernel_rows, metadata, op_rows, steps_section
from .sections.profiling import profiling_section
from .sections.projection import projection_section
from .sections.section import Section
from .sections.verdict import classification_section, verdict_text

if TYPE_CHECKING:
    from .sections.job import RankResult

#: the sections of each trace entry, in document order (docs/json-schema.md's TRACE table is generated from it)
SECTIONS: tuple[Section, ...] = (
    overview.IDENTITY, overview.METADATA, overview.WARNINGS, overview.SUMMARY, overview.STEPS, overview.DEVICES,
    overview.TOP_KERNELS, overview.TOP_OPS,
    layers.SECTION,
    verdict.CLASSIFICATION,
    findings.FINDINGS,
    verdict.VERDICT_LINE,
    profiling.SECTION,
    profiling.REPLAY,
    memory.SECTION,
    projection.SECTION,
    cpu.SECTION,
)

#: the parts of each job entry, in document order (docs/json-schema.md's JOB table is generated from them)
JOB_SECTIONS: tuple[Section, ...] = job_entry.JOB_SECTIONS

#: 2: a finding's `savings_us` is the replayed saving per step in unprofiled terms (issue 25; was over all steps)
SCHEMA_VERSION = 2


def select_steps(trace: Trace, step: int | None) -> pl.DataFrame:
    steps = trace.steps
    if step is None:
        return steps
    sel = steps.filter(pl.col("step") == step)
    if sel.height == 0:
        have = ", ".join(map(str, steps["step"].to_list()))
        raise TraceError(f"{trace.meta.path}: no step {step} in this trace (steps: {have})")
    return sel


def analyze_trace(trace: Trace, options: Options | None = None) -> dict:
    """The report entry of one trace."""
    return _analyze_trace(trace, options or Options())[0]


def rule_context(trace: Trace, steps: pl.DataFrame,
                 unprofiled_ms: float | None = None) -> tuple[RuleContext, list[str], dict | None]:
    """The context the rules, fixes and projection of one trace run in: (context, warnings on the steps left
    out, the CPU step split of a trace without GPU activity, else None). A GPU trace's context holds the replay
    graph and the classification; a CPU-only trace's the host-only replay (the rules with `CPU = True`)."""
    if trace.has_gpu:
        ctx, warns = RuleContext.prepare(trace, steps, unprofiled_ms)
        return ctx, warns, None
    host = cpu.prepare(trace, steps)
    return RuleContext.for_host(trace, steps, host, unprofiled_ms), [], host


def _analyze_trace(trace: Trace, options: Options) -> tuple[dict, pl.DataFrame, pl.DataFrame | None]:
    """(the trace's entry, its analysed steps, the classifier's partition of them: `cls` an Enum, as the rules
    read it; `string_classes` for other readers)."""
    heap_trim.map_large(trace.gpu.height + trace.host.height)  # (a large trace's arrays: mapped, not in the heap)
    steps = select_steps(trace, options.step)
    # the overview (HTA/tb_plugin's numbers) reads none of the rules' context: built beside it (parallel)
    over = start(functools.partial(_overview, trace, steps, options))
    warnings = list(trace.meta.warnings)
    entry: dict[str, Any] = {
        "path": trace.meta.path, "rank": trace.meta.rank, "world_size": trace.meta.world_size,
        "metadata": metadata(trace), "warnings": warnings,
    }
    ctx: RuleContext | None = None
    findings: list[dict] = []
    fixinfo: dict | None = None
    analysed = steps
    host: dict | None = None
    hctx: RuleContext | None = None  # a CPU-only trace's context (its profiler estimate)
    if trace.has_gpu:
        ctx, warns, _ = rule_context(trace, steps, options.unprofiled_ms)
        # the replay graph's build leaves numpy's freed temporaries as holes in the C heap between the graph's
        # arrays; the rules' frames are polars' (another allocator), which cannot reuse them: given back first
        heap_trim.release(trace.gpu.height + trace.host.height)
        warnings.extend(warns)  # steps left out of the rules and the classification
        analysed = ctx.steps
        findings, warns = run_rules(ctx, options)
        warnings.extend(warns)  # rules that failed
        findings, fixinfo = replayed_fixes(ctx, options, findings)  # every saving a replay (issue 25)
        warnings.extend(fixinfo["errors"])  # fixes that could not be built
    else:
        warnings.append("no GPU activity in this trace (CPU-only): the report analyzes host (CPU) time (JSON `cpu`)")
        hctx, _, host = rule_context(trace, steps, options.unprofiled_ms)
        findings, warns = run_rules(hctx, options)  # the rules with CPU = True
        warnings.extend(warns)
        # no device, but a host to replay: each fix a transform of the CPU step's graph, as on a GPU trace
        findings, fixinfo = replayed_fixes(hctx, options, findings)
        warnings.extend(fixinfo["errors"])
    entry.update(over.result())
    entry["layers"] = None  # (its place in the document; computed last, below)
    deep = layer_attr.attribution(trace).shortened
    if deep:
        warnings.append(f"{deep:,} layers (nn.Module, module:: or annotation) nested {layer_attr.PATH_LEVELS} levels "
                        "deep or deeper: their paths are shortened to '<first two levels>/…N levels…/"
                        "<parent>/<name>' (each keeps its own depth and times)")
    entry["classification"] = classification = classification_section(
        ctx, findings, fixinfo.get("base_step_us") if fixinfo else None)
    entry["findings"] = findings
    entry["verdict_text"] = (verdict_text(classification, analysed.height, findings) if ctx
                             else cpu.verdict(trace, steps, host, findings) if host else None)
    entry["profiling"] = profiling_section(trace, analysed, classification.get("dominant"), ctx or hctx,
                                           classification.get("primary"))
    entry["replay"] = replay_fidelity(trace, analysed)
    if entry["replay"].get("confidence") == "low":
        entry["profiling"]["confidence"] = "low"
    entry["memory"] = memory_section(trace, analysed) if trace.has_gpu else None
    entry["projection"] = projection_section(ctx or hctx, findings, entry["profiling"], options, fixinfo)
    warnings.extend(_unreached(options, entry["projection"], entry["profiling"]))
    entry["cpu"] = cpu.section(trace, steps, host) if host else None
    # the layer table last, the analysis's largest step: the whole-trace results only the rules, the fixes and
    # the projection read (the replay graph, the rules' own) go first, so its temporaries do not stack on them
    if ctx is not None:
        ctx.memo.clear()
    drop(trace, *REPLAY_CACHES)
    heap_trim.release(trace.gpu.height + trace.host.height)
    part = _part(trace, steps, ctx)
    # (after the partition: its search's numpy temporaries, freed into the C heap, cannot hold the layer table's
    # polars frames, which come from another allocator)
    heap_trim.release(trace.gpu.height + trace.host.height)
    entry["layers"] = layers_section(trace, steps, findings=findings, kb=ctx.kb if ctx else None,
                                     part=part, depth=options.layers_depth)
    entry["warnings"] = aggregate_warnings(entry["warnings"])  # one line per kind, not one per step
    return entry, analysed, ctx.part if ctx else None


#: how far the replay may stay from a step the user measured (`--unprofiled-ms`) before the report says so
UNREACHED_TOL = 0.05


def _unreached(options: Options, proj: dict | None, prof: dict) -> list[str]:
    """A warning where the replay cannot reproduce the unprofiled step the user measured (`--unprofiled-ms`): below
    the time the trace's GPU work alone takes a step, or above the traced step (the profiler does not make a step
    faster), the measurement is not of the traced steps' program, and the savings are priced at the nearest step
    the replay reaches."""
    if not options.unprofiled_ms or not proj or prof.get("method") != "user":
        return []
    got = float(proj["replayed_unprofiled_step_us"]) / 1000
    if abs(got / options.unprofiled_ms - 1) <= UNREACHED_TOL:
        return []
    why = ("more than the traced step takes (the profiler does not make a step faster)"
           if options.unprofiled_ms > got else "less than the trace's device work and launches take without it")
    return [f"--unprofiled-ms {options.unprofiled_ms:g}: {why}; the replay reaches {got:.3f} ms at the nearest, and "
            "prices the savings there: is the measurement of the same program, steps and batch as the trace?"]


def _overview(trace: Trace, steps: pl.DataFrame, options: Options) -> dict[str, Any]:
    """The entry's summary, steps, devices, top_kernels and top_ops."""
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    busy = timeline.step_busy(trace, steps)
    step_rows, summary = steps_section(trace, steps, busy)
    edges, edge_notes = recording_edges(trace, steps)
    # what the periods leave out at the recording's edges is expected, not a problem with the input: a note
    # beside the amount (summary.excluded.notes), not a warning
    edges["excluded"]["notes"] = edge_notes
    summary.update(edges)
    devices = device_section(trace, steps, busy) if trace.has_gpu else []
    # the columns the top tables read (a filter copies every column: 40 on the GPU frame), held only while they
    # are built (a copy of a whole-trace frame would otherwise sit under every later step's peak)
    top_k, top_o = (kernels.top_tables(trace, options.top, pick(trace.gpu, "name", "kind", "op", "dur", "ts", "end")
                                       .filter((pl.col("end") > lo) & (pl.col("ts") < hi)))
                    if trace.has_gpu else (None, None))
    return {"summary": summary, "steps": step_rows, "devices": devices,
            "top_kernels": kernel_rows(top_k) if top_k is not None else [],
            "top_ops": op_rows(top_o) if top_o is not None else []}


def _part(trace: Trace, steps: pl.DataFrame, ctx: RuleContext | None) -> pl.DataFrame | None:
    """The classifier's segments of every selected step (the layer view also covers a cut-off last step)."""
    if ctx is None:
        return None
    if ctx.steps.height == steps.height:
        return ctx.part
    from .analyses.classify import partition

    # a step's segments do not depend on the other steps: the steps the rules left out (a step cut off by the
    # recording's end or start) are partitioned alone and put beside the rules' partition in time order, not
    # every step a second time (at 10 M tiny events a second partition is 159 MiB under the layer table's peak).
    # Steps left out between the rules' own: all of them again
    first, last = ctx.steps["ts"].min(), ctx.steps["ts"].max()
    rest = steps.filter(~pl.col("step").is_in(ctx.steps["step"].implode()))
    before, after = rest.filter(pl.col("ts") < first), rest.filter(pl.col("ts") > last)
    if before.height + after.height != rest.height or rest.height + ctx.steps.height != steps.height:
        return partition(trace, steps, ctx.kb, keep=False, enum=True)  # (only the layer view reads it)
    parts = [partition(trace, before, ctx.kb, keep=False, enum=True) if before.height else None, ctx.part,
             partition(trace, after, ctx.kb, keep=False, enum=True) if after.height else None]
    return pl.concat([p for p in parts if p is not None], rechunk=False)  # (ctx.part's chunks, not a copy)


@record()
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
        ranks.append(RankResult(trace=t, steps=analysed, entry=entry, part=string_classes(part)))
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
#: a directory of more rank files than this is a large job: each rank is reduced to what the job's analysis reads
#: as soon as its own entry is built (`ingest.reduced`), and the job is replayed on its latest ranks
#: (`job_answer.MAX_FULL_RANKS`, the same number: smaller jobs keep every rank whole for the whole-job replay)
REDUCE_ABOVE_RANKS = 16
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


def _analyze_file(path: Path, options: Options, reduce: bool = False) -> tuple[dict, RankResult | None]:
    """(its trace entry or error row, the rank) of one file: what a worker process sends back; `reduce`: the
    rank of a large job, reduced to what the job reads (`ingest.reduced`)."""
    from .sections.job import RankResult

    if reduce:
        from .ingest.reduced import reduce as reduce_rank
    try:
        t = _default_load(path, options)
        entry, analysed, part = _analyze_trace(t, options)
    except Exception as e:  # noqa: BLE001 - isolate every input
        return _error(path, e), None
    return entry, RankResult(trace=reduce_rank(t, options.max_bytes) if reduce else t, steps=analysed, entry=entry,
                             part=string_classes(part))


def _analyze_files(files: list[Path], options: Options, workers: int, on_trace: Callable[[str], None] | None,
                   reduce: bool = False) -> list[tuple[dict, RankResult | None]]:
    """`_analyze_file` over the files, in worker processes, results in file order (identical to the serial path:
    each file is analysed alone; spawned workers, as polars' thread pool does not survive fork)."""
    from . import procpool

    # each worker gets its share of the cores: polars would start a thread per core in every worker otherwise
    # (the variable is read when a spawned worker imports polars; the workers start during the submits), and the
    # C scanner's threads likewise (each worker's glibc with one arena where they are several: heap_trim.one_arena)
    threads = max(1, (os.cpu_count() or 1) // workers)
    pool, futures = procpool.start(_analyze_file, [(f, options, reduce) for f in files], workers,
                                   env={"POLARS_MAX_THREADS": str(threads), "TRACEVIEW_THREADS": str(threads),
                                        **heap_trim.worker_env(threads)})
    with pool:
        out = []
        for f, fut in zip(files, futures, strict=True):
            if on_trace:
                on_trace(str(f))
            try:
                out.append(fut.result())
            except Exception:  # noqa: BLE001 - the pool itself failed (a worker killed, no importable __main__
                out.append(_analyze_file(f, options, reduce))  # to spawn from): this file here, same result
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
        # a large job's ranks are reduced as they are read: its memory grows by a summary per rank, not a trace
        reduce = job_dir and not custom_load and len(files) > REDUCE_ABOVE_RANKS
        if workers > 1:
            for entry, rank in _analyze_files(files, options, workers, on_trace, reduce):
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
                forget(t)  # a rank kept for the job: only its frames, not every analysis's (memory per rank)
                n_rows = t.gpu.height + t.host.height
                if reduce:  # (imported only for a large job's ranks, not for one file: issue 32, start-up)
                    from .ingest.reduced import reduce as reduce_rank

                    t = reduce_rank(t, options.max_bytes)
                heap_trim.release(n_rows)
                ranks.append(RankResult(trace=t, steps=analysed, entry=entry, part=string_classes(part)))
        if job_dir and len(ranks) > 1 and _one_after_another(ranks):
            for r in ranks:  # successive captures (a schedule's cycles), not the ranks of a job
                r.entry["warnings"].append(f"{p}: one of {len(ranks)} traces recorded one after the other, no ranks "
                                           "named (the ranks of a job record at the same time): each is analyzed on "
                                           "its own, with no cross-rank analysis")
            continue
        if job_dir and len(ranks) > 1:
            ranks.sort(key=lambda r: (r.trace.meta.rank is None, r.trace.meta.rank or 0, r.trace.meta.path))
            try:
                job, warns = analyze_job(str(p), ranks, options)
            except Exception as e:  # noqa: BLE001 - the traces' own entries stand
                rep.errors.append(_error(p, e))
                continue
            if all(r.trace.meta.rank is None for r in ranks):  # ranks by file order: say so (layouts.py)
                from .ingest.layouts import unknown_ranks_warning

                warns = [*warns, unknown_ranks_warning(str(p), [r.trace.meta.path for r in ranks], job=True)]
            if warns:
                job["warnings"] = warns
            rep.jobs.append(job)
    return rep


def _one_after_another(ranks: list) -> bool:
    """True when the traces of a folder name no rank and were recorded one after the other (no two recording windows
    overlap: one process's captures of successive schedule cycles, `repeat=N`, or runs of one script in sequence):
    the ranks of a job record at the same time, so these are not one."""
    if any(r.trace.meta.rank is not None or r.trace.host.height == 0 for r in ranks):
        return False
    spans = sorted((r.trace.meta.epoch_offset_ns + int(r.trace.host["ts"].min()),
                    r.trace.meta.epoch_offset_ns + int(r.trace.host["end"].max())) for r in ranks)
    return all(b[0] >= a[1] for a, b in zip(spans, spans[1:], strict=False))


def analyze_trace_parts(trace: Trace, options: Options) -> tuple[dict, pl.DataFrame, pl.DataFrame | None]:
    """One loaded trace's document entry, with the classifier's partition (for views that draw it)."""
    entry, analysed, part = _analyze_trace(trace, options)
    return entry, analysed, string_classes(part)
