"""The job sections of a directory of rank files: cross-rank collective matching (`nccl`), the job-level
rule checks (`findings`, e.g. the straggler) and each rank's verdict (`classification`).

Every rank is judged on the same analysed steps as its own trace entry (`--step` included), so a rank's
shares here equal those of its trace entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from .analyses import comm
from .findings import severity_rank
from .model import Job, Trace
from .options import Options
from .ruleapi import JobContext
from .rulerunner import run_job_rules


@dataclass(frozen=True)
class RankResult:
    """One rank of a job as its trace entry saw it."""

    trace: Trace
    steps: pl.DataFrame  # the analysed steps of its entry
    entry: dict[str, Any]  # its trace entry in the report


def _raised_straggler(nccl: dict) -> int | None:
    """The straggler rank when a job rule raised it (warning or error), not the formal "last to arrive" of a
    balanced job."""
    strag = nccl.get("straggler") or {}
    return strag["rank"] if strag.get("raised") else None


def analyze_job(path: str, ranks: list[RankResult], options: Options) -> tuple[dict, list[str]]:
    """(the job entry, warnings) for the ranks of one job, sorted by rank."""
    job = Job(path=path, traces=[r.trace for r in ranks])
    steps = {k: r.steps for k, r in enumerate(ranks)}
    nccl = comm.summary(job, steps)
    findings, warns = run_job_rules(JobContext(job=job, steps=steps, comm=nccl), options)
    strag = nccl.get("straggler")
    if strag is not None:  # what the job view and the per-rank notes go by
        strag["raised"] = any((f.get("evidence") or {}).get("straggler") == strag["rank"]
                              and severity_rank(f["severity"]) >= severity_rank("warning") for f in findings)
    entry: dict[str, Any] = {"path": path, "ranks": job.ranks,
                             "classification": _rank_verdicts(ranks, nccl), "nccl": nccl, "findings": findings}
    _annotate_straggler_waits(nccl, [r.entry for r in ranks])
    return entry, warns


def _rank_verdicts(ranks: list[RankResult], nccl: dict) -> list[dict]:
    """Per rank: the classifier's dominant class and shares (from its trace entry), and — when the ranks wait
    for a straggler — the share of the rank's step spent waiting for it (its exposed collective wait; part of
    `communication`)."""
    strag = _raised_straggler(nccl)
    exposed = {r["rank"]: r.get("exposed_wait_per_step_us") for r in nccl.get("ranks") or []}
    out = []
    for k, r in enumerate(ranks):  # one per rank
        c = r.entry.get("classification") or {}
        entry = {"rank": r.trace.meta.rank, "path": r.trace.meta.path, "dominant": c.get("dominant"),
                 "shares": c.get("shares") or {}}
        rank = comm.rank_id(r.trace, k)
        wait = exposed.get(rank)
        if strag is not None and rank != strag and wait is not None and r.steps.height:
            step_us = float((r.steps["end"] - r.steps["ts"]).mean()) / 1000
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
    for t in trace_entries:
        wait = exposed.get(t.get("rank"))
        if t.get("rank") == strag or not wait:
            continue
        for f in t.get("findings") or []:
            if f["rule"] == "nccl-wait":
                f["evidence"]["straggler"] = strag
                f["evidence"]["straggler_wait_per_step_us"] = wait
                f["evidence"]["note"] = (f"{wait / 1000:,.2f} ms per step of this rank's exposed communication is "
                                         f"waiting for straggler rank {strag} (see the job's nccl-wait finding): "
                                         "look at that rank first; overlapping communication cannot hide a late rank")
