"""Runs the classifier and the rules on a trace (or job) and registers the report sections.

Per trace: `classification` (verdict per trace and step), `findings` (ranked by savings), `verdict_text`.
Per job: `classification` (per rank), `nccl` (cross-rank matching) and `findings` (the straggler).
Steps cut off by the end of the recording are left out (tb_plugin's rule) and the report says so in
`warnings`. One failing rule becomes a warning; the other rules still run.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from . import classify
from .analyses.comm import rank_id
from .analyses.specs import trace_spec
from .analyses.windows import complete_steps
from .findings import ranked
from .model import Job, Trace

VERDICT_TEXT = {
    "gpu_compute": "compute-bound: the GPU is busy in compute-bound kernels (GEMM/conv/attention); speed-ups come "
                   "from better kernels, lower precision or less work, not from the host",
    "gpu_memory": "memory-bound: the GPU is busy in kernels limited by memory bandwidth; fuse elementwise ops and "
                  "avoid round trips through HBM",
    "communication": "communication-bound: exposed NCCL collectives with no compute to hide them",
    "input": "input-bound: the GPU idles while the host loads data",
    "host_sync": "sync-bound: the GPU idles after the host blocks on it (.item(), .cpu(), nonzero, synchronize)",
    "cpu_launch": "CPU/launch-bound: the GPU idles because the CPU launches kernels too slowly",
    "other_idle": "idle for other reasons (launch latency, cross-stream waits)",
}


def _selected(ctx: dict) -> list[str]:
    from traceview.rules import RULES

    return ctx.get("codes") or sorted(RULES)


def _options(ctx: dict, name: str) -> dict:
    from traceview.rules import BY_NAME

    opts = (ctx.get("config") or {}).get("options", {}).get(name)
    return opts if opts is not None else {k: o.default for k, o in BY_NAME[name].OPTIONS.items()}


def prepare(trace: Trace, steps: pl.DataFrame, ctx: dict) -> dict:
    """The shared analyses of one trace, computed once and cached in the (per-trace) ctx."""
    cache = ctx.get("_prep")
    if cache is not None and cache["trace"] is trace:
        return cache
    kept, warns = complete_steps(trace, steps)
    ctx.setdefault("_warnings", []).extend(warns)
    kb = classify.kernel_bound(trace)
    part = classify.partition(trace, kept, kb)
    window = int((kept["end"] - kept["ts"]).sum()) if kept.height else 0
    cache = {"trace": trace, "steps": kept, "kb": kb, "part": part, "window_ns": window, "spec": trace_spec(trace.meta)}
    ctx["_prep"] = cache
    return cache


def classification_section(trace: Trace, steps: pl.DataFrame, ctx: dict) -> dict:
    if not trace.has_gpu:
        return {"dominant": None, "shares": {}, "steps": [], "note": "no GPU activity: nothing to classify"}
    p = prepare(trace, steps, ctx)
    out = classify.classification(trace, p["steps"], p["part"], p["kb"])
    out["analyzed_steps"] = p["steps"]["step"].to_list()
    return out


def run_rules(trace: Trace, steps: pl.DataFrame, ctx: dict) -> list[dict]:
    from traceview.rules import RULES

    if not trace.has_gpu:  # the host-side rules (cpu_view)
        from .cpu_view import prepare as cpu_prepare
        from .cpu_view import run_rules as cpu_rules

        cp = cpu_prepare(trace, steps, ctx)
        if cp.get("findings") is None:
            cp["findings"] = cpu_rules(trace, steps, ctx, _selected(ctx), _options)
        return cp["findings"]
    p = prepare(trace, steps, ctx)
    if p["steps"].height == 0:
        return []
    if p.get("findings") is not None:  # the findings and layers sections both ask
        return p["findings"]
    out: list[dict] = []
    for code in _selected(ctx):
        mod = RULES[code]
        rctx = {**p, "options": _options(ctx, mod.NAME)}
        try:
            found = mod.check(trace, p["steps"], rctx)
        except Exception as e:  # noqa: BLE001 - one broken rule must not end the run
            ctx.setdefault("_warnings", []).append(f"internal error in rule {code} {mod.NAME}: {type(e).__name__}: {e}")
            continue
        out.extend(f.to_dict() for f in found)
    p["findings"] = ranked(out)
    return p["findings"]


def verdict_text(trace: Trace, steps: pl.DataFrame, ctx: dict) -> str | None:
    if not trace.has_gpu:
        from .cpu_view import verdict

        return verdict(trace, steps, ctx)
    p = prepare(trace, steps, ctx)
    c = classify.classification(trace, p["steps"], p["part"], p["kb"])
    if not c["dominant"]:
        return None
    top = sorted(((v, k) for k, v in c["shares"].items() if v > 0), reverse=True)[:3]
    parts = ", ".join(f"{k} {v:.1f} %" for v, k in top)
    return (f"Verdict: {VERDICT_TEXT[c['dominant']]} ({parts} of {c['window_us'] / 1000:,.2f} ms over "
            f"{p['steps'].height} step(s))")


# ---- jobs (several ranks) -------------------------------------------------------------------------------
_JOB_CACHE: dict[int, tuple[Job, Any]] = {}


def _job_steps(job: Job) -> dict[int, pl.DataFrame]:
    return {k: complete_steps(t, t.steps)[0] for k, t in enumerate(job.traces)}


def _job_nccl(job: Job, ctx: dict):
    hit = _JOB_CACHE.get(id(job))
    if hit is None or hit[0] is not job:
        from traceview.rules import nccl_wait

        _JOB_CACHE.clear()
        hit = _JOB_CACHE[id(job)] = (job, nccl_wait.check_job(job, _job_steps(job), {"options": _options(ctx, "nccl-wait")}))
    return hit[1]


def job_nccl_section(job: Job, ctx: dict) -> dict:
    return _job_nccl(job, ctx)[0]


def job_findings_section(job: Job, ctx: dict) -> list[dict]:
    if "TV501" not in _selected(ctx):
        return []
    return ranked([f.to_dict() for f in _job_nccl(job, ctx)[1]])


def _raised_straggler(nccl: dict) -> int | None:
    """The straggler rank when nccl-wait raised it (warning or error), not the formal "last to arrive" of a
    balanced job."""
    strag = nccl.get("straggler") or {}
    return strag["rank"] if strag.get("raised") else None


def job_classification_section(job: Job, ctx: dict) -> list[dict]:
    """Per rank: the classifier's dominant class and shares, and — when the ranks wait for a straggler — the
    share of the rank's step spent waiting for it (its exposed collective wait; part of `communication`)."""
    nccl = _job_nccl(job, ctx)[0]
    strag = _raised_straggler(nccl)
    exposed = {r["rank"]: r.get("exposed_wait_per_step_us") for r in nccl.get("ranks") or []}
    steps = _job_steps(job)
    out = []
    for k, t in enumerate(job.traces):  # one per rank
        if t.has_gpu:
            c = classification_section(t, t.steps, {})
            entry = {"rank": t.meta.rank, "path": t.meta.path, "dominant": c["dominant"], "shares": c["shares"]}
        else:
            entry = {"rank": t.meta.rank, "path": t.meta.path, "dominant": None, "shares": {}}
        rank = rank_id(t, k)
        st, wait = steps.get(k), exposed.get(rank)
        if strag is not None and rank != strag and wait is not None and st is not None and st.height:
            step_us = float((st["end"] - st["ts"]).mean()) / 1000
            entry["straggler"] = strag
            entry["straggler_wait_pct"] = round(100.0 * wait / step_us, 1) if step_us else None
        out.append(entry)
    return out


def annotate_straggler_waits(job_entry: dict, trace_entries: list[dict]) -> None:
    """When the job's nccl-wait raises a straggler, each waiting rank's own exposed-communication finding says how
    much of it is that wait: its fix (overlap communication with compute) is not the first thing to do then."""
    nccl = job_entry.get("nccl") or {}
    strag = _raised_straggler(nccl)
    if strag is None:
        return
    exposed = {r["rank"]: r.get("exposed_wait_per_step_us") for r in nccl.get("ranks") or []}
    for t in trace_entries:
        wait = exposed.get(t.get("rank"))
        if t.get("rank") == strag or not wait:
            continue
        for f in t.get("findings") or []:
            if f["rule"] == "nccl-wait":
                f["evidence"]["straggler"] = strag
                f["evidence"]["straggler_wait_per_step_us"] = wait
                f["evidence"]["note"] = (f"{wait / 1000:,.2f} ms per step of this rank's exposed communication is waiting "
                                         f"for straggler rank {strag} (see the job's nccl-wait finding): look at "
                                         "that rank first; overlapping communication cannot hide a late rank")


def register() -> None:
    """Add the sections and renderers (idempotent)."""
    from . import report
    from .formatters import findings_text, text

    report.SECTIONS.setdefault("classification", classification_section)
    report.SECTIONS.setdefault("findings", run_rules)
    report.SECTIONS.setdefault("verdict_text", verdict_text)
    from .manifest import profiling_section

    report.SECTIONS.setdefault("profiling", profiling_section)
    from .cpu_view import section as cpu_section

    report.SECTIONS.setdefault("cpu", cpu_section)
    report.JOB_SECTIONS.setdefault("classification", job_classification_section)
    report.JOB_SECTIONS.setdefault("nccl", job_nccl_section)
    report.JOB_SECTIONS.setdefault("findings", job_findings_section)
    if annotate_straggler_waits not in report.JOB_ANNOTATORS:
        report.JOB_ANNOTATORS.append(annotate_straggler_waits)
    if findings_text.render_trace not in text.EXTRA:
        text.EXTRA.append(findings_text.render_trace)
    if findings_text.render_job not in text.JOB_EXTRA:
        text.JOB_EXTRA.append(findings_text.render_job)
