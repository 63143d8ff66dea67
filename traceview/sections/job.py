"""The job sections of a directory of rank files: cross-rank collective matching (`nccl`), the job-level
rule checks (`findings`, e.g. the straggler) and each rank's verdict (`classification`).

Every rank is judged on the same analysed steps as its own trace entry (`--step` included), so a rank's
shares here equal those of its trace entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from ..analyses import comm
from ..analyses.period import rank_period_ns
from ..finding_model import severity_rank
from ..model import Job, Trace
from ..options import Options
from ..registry import straggler_rules
from ..ruleapi import JobContext
from . import job_answer, straggler
from .findings import run_job_rules


@dataclass(frozen=True)
class RankResult:
    """One rank of a job as its trace entry saw it."""

    trace: Trace
    steps: pl.DataFrame  # the analysed steps of its entry
    entry: dict[str, Any]  # its trace entry in the report
    part: pl.DataFrame | None = None  # the classifier's partition of its analysed steps (None: no GPU)


def _raised_straggler(nccl: dict) -> int | None:
    """The straggler rank when a job rule raised it (warning or error), not the formal "last to arrive" of a
    balanced job."""
    strag = nccl.get("straggler") or {}
    return strag["rank"] if strag.get("raised") else None


def analyze_job(path: str, ranks: list[RankResult], options: Options) -> tuple[dict, list[str]]:
    """(the job entry, warnings) for the ranks of one job, sorted by rank."""
    job = Job(path=path, traces=[r.trace for r in ranks])
    steps = {k: r.steps for k, r in enumerate(ranks)}
    matched = comm.match(job, steps)
    nccl = comm.summary(job, steps, matched)
    strag = nccl.get("straggler")
    cause_warns: list[str] = []
    parts = {k: r.part for k, r in enumerate(ranks)}
    try:  # the job replay: the straggler named by its change's job saving, its cause, comm-bound, the projection
        replay_sec, proj = job_answer.answer(job.traces, steps, matched[0], nccl, [r.entry for r in ranks], options,
                                             parts)
        period_us = _step_period(ranks, nccl).get("period_us")
        nccl["comm_bound"] = job_answer.comm_bound(job.traces, [r.part for r in ranks],
                                                   int(nccl.get("steps") or 0), matched[0], nccl, period_us)
    except Exception as e:  # noqa: BLE001 - the rest of the job section stands without it
        replay_sec, proj = None, None
        nccl["comm_bound"] = None
        cause_warns.append(f"internal error in the job replay: {type(e).__name__}: {e}")
    if strag is not None and "cause" not in strag:  # not replayed: why the last rank is late, before the rules
        try:
            strag["cause"] = straggler.cause(job.traces, steps, parts, matched[0], strag["rank"])
        except Exception as e:  # noqa: BLE001 - the rest of the job section stands without it
            strag["cause"] = None
            cause_warns.append(f"internal error in the straggler's cause: {type(e).__name__}: {e}")
    findings, warns = run_job_rules(JobContext(job=job, steps=steps, comm=nccl, entries=tuple(r.entry for r in ranks)),
                                    options)
    if strag is not None:  # what the job view and the per-rank notes go by
        sev = [f["severity"] for f in findings if (f.get("evidence") or {}).get("straggler") == strag["rank"]]
        strag["raised"] = any(severity_rank(s) >= severity_rank("warning") for s in sev)
        if strag["cause"] is not None:
            strag["cause"]["severity"] = max(sev, key=severity_rank) if sev else "info"
    period = _step_period(ranks, nccl)
    entry: dict[str, Any] = {"path": path, "ranks": job.ranks, "classification": _rank_verdicts(ranks, nccl, period),
                             "nccl": nccl, "findings": findings, "step_period": period, "replay": replay_sec,
                             "projection": proj}
    _annotate_straggler_waits(nccl, [r.entry for r in ranks])
    return entry, cause_warns + warns


def _step_period(ranks: list[RankResult], nccl: dict) -> dict:
    """One step period for the job (the median of the ranks' periods: `analyses.period`) and each rank's period
    and share of it spent waiting in collectives (wait, and exposed wait: what the rank lost)."""
    waits = {r["rank"]: r for r in nccl.get("ranks") or []}
    rows, methods = [], set()
    for k, r in enumerate(ranks):
        ns, how = rank_period_ns(r.trace, r.steps)
        methods.add(how)
        rank = comm.rank_id(r.trace, k)
        w = waits.get(rank) or {}
        rows.append({"rank": rank, "period_us": round(ns / 1000, 3) if ns is not None else None,
                     "wait_per_step_us": w.get("wait_per_step_us"),
                     "exposed_wait_per_step_us": w.get("exposed_wait_per_step_us")})
    got = sorted(r["period_us"] for r in rows if r["period_us"] is not None)
    period = None
    if got:
        n = len(got)
        period = got[n // 2] if n % 2 else (got[n // 2 - 1] + got[n // 2]) / 2
    for r in rows:
        for key, share in (("wait_per_step_us", "wait_pct"), ("exposed_wait_per_step_us", "exposed_wait_pct")):
            v = r[key]
            r[share] = round(100.0 * v / period, 1) if period and v is not None else None
    return {"period_us": round(period, 3) if period is not None else None, "method": ", ".join(sorted(methods)),
            "ranks": rows}


def _rank_verdicts(ranks: list[RankResult], nccl: dict, period: dict) -> list[dict]:
    """Per rank: the classifier's dominant class and shares (from its trace entry), and — when the ranks wait
    for a straggler — the share of the job's step period spent waiting for it (its exposed collective wait; part
    of `communication`). The period, not the mean of the rank's step windows: those of a waiting rank can
    overlap and count one wait twice."""
    strag = _raised_straggler(nccl)
    exposed = {r["rank"]: r.get("exposed_wait_per_step_us") for r in nccl.get("ranks") or []}
    out = []
    for k, r in enumerate(ranks):  # one per rank
        c = r.entry.get("classification") or {}
        entry = {"rank": r.trace.meta.rank, "path": r.trace.meta.path, "dominant": c.get("dominant"),
                 "primary": c.get("primary"), "shares": c.get("shares") or {}}
        rank = comm.rank_id(r.trace, k)
        wait = exposed.get(rank)
        if strag is not None and rank != strag and wait is not None and r.steps.height:
            step_us = period.get("period_us") or float((r.steps["end"] - r.steps["ts"]).mean()) / 1000
            entry["straggler"] = strag
            entry["straggler_wait_pct"] = round(100.0 * wait / step_us, 1) if step_us else None
        out.append(entry)
    return out


def _annotate_straggler_waits(nccl: dict, trace_entries: list[dict]) -> None:
    """When a straggler is raised, each waiting rank's own exposed-communication finding says how much of it is
    that wait: its fix (overlap communication with compute) is not the first thing to do then."""
    strag = _raised_straggler(nccl)
    if strag is None:
        return
    exposed = {r["rank"]: r.get("exposed_wait_per_step_us") for r in nccl.get("ranks") or []}
    judges = straggler_rules()
    for t in trace_entries:
        wait = exposed.get(t.get("rank"))
        if t.get("rank") == strag or not wait:
            continue
        for f in t.get("findings") or []:
            if f["rule"] in judges:
                f["evidence"]["straggler"] = strag
                f["evidence"]["straggler_wait_per_step_us"] = wait
                f["evidence"]["note"] = (f"{wait / 1000:,.2f} ms per step of this rank's exposed communication is "
                                         f"waiting for straggler rank {strag} (see the job's {f['rule']} finding): "
                                         "look at that rank first; overlapping communication cannot hide a late rank")
