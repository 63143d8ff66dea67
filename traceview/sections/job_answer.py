"""The job's answer from the job replay (analyses/job_replay.py): how well the joint replay reproduces each
rank, what fixing the straggler's cause gives the job (`jobs[].nccl.straggler.job_saving_us_per_step`), whether
the exposed communication is the transfer's own (`jobs[].nccl.comm_bound`), and the job's step after the
straggler's fix and after every rank's top fix (`jobs[].projection`). Times in µs per step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceview.rules import BY_NAME

from ..analyses import busbw, comm, job_replay
from ..analyses.classify import CLASSES
from ..analyses.comm import rank_id
from ..analyses.fixes import pricing_transform, transforms
from ..analyses.overhead import profiler_transform
from ..analyses.replay import Transform
from ..ingest.reduced import full
from ..model import Job, Trace
from ..registry import straggler_rules
from ..ruleapi import RuleContext
from . import rank_changes, straggler
from .profiling import with_job_estimate
from .straggler_fix import fix_transform

#: jobs of up to this many ranks are replayed whole (every rank's graph; every rank's top fix, a rule context per
#: rank); a larger job is replayed on its latest ranks (`rank_changes.candidates`' sub-job: the other ranks'
#: arrivals frozen into the collectives' transfer, as they only wait), and its ranks are reduced as they are read
#: (`report.REDUCE_ABOVE_RANKS`): only the replayed ranks are loaded whole again (`ingest.reduced.full`)
MAX_FIX_RANKS = 16
#: rows of `replay.changes` kept (best first)
MAX_CHANGE_ROWS = 12


def _us(ns: float) -> float | None:
    return round(float(ns) / 1000, 3) if np.isfinite(ns) else None


def _pricing(t: Trace, st: pl.DataFrame) -> Transform:
    """The rank's profiler-cost transform, as its own fixes are priced (`fixes.pricing_transform`)."""
    if not t.has_gpu or st.height == 0:
        return profiler_transform(t)
    ctx, _ = RuleContext.prepare(t, st)
    return pricing_transform(ctx)


def _top_fixes(traces: list[Trace], steps: list[pl.DataFrame], entries: list[dict], options) -> dict[int, Any]:
    """rank position -> (rule, Transform) of its top finding with a replayable fix."""
    out: dict[int, Any] = {}
    for k, (t, st, e) in enumerate(zip(traces, steps, entries, strict=True)):
        fs = sorted((f for f in e.get("findings") or [] if f.get("savings_us", 0) > 0 and f["rule"] in BY_NAME),
                    key=lambda f: -f["savings_us"])
        if not fs or not t.has_gpu:
            continue
        ctx, _ = RuleContext.prepare(t, st)
        for f in fs:
            tf = transforms(ctx, options, [BY_NAME[f["rule"]]])
            if tf:
                out[k] = (f["rule"], tf[f["rule"]])
                break
    return out


def comm_bound(traces: list[Trace], parts: list[pl.DataFrame | None], nsteps: int, m: pl.DataFrame,
               nccl: dict, period_us: float | None) -> dict | None:
    """Exposed communication no rank's lateness explains: per rank its exposed communication per step (the
    classifier's `communication`) minus its exposed wait for later ranks; with the bus bandwidth achieved and
    the link's. None without GPU ranks."""
    waits = {r["rank"]: r.get("exposed_wait_per_step_us") or 0.0 for r in nccl.get("ranks") or []}
    rows = []
    for k, (t, p) in enumerate(zip(traces, parts, strict=True)):
        if p is None or p.height == 0 or not nsteps:
            continue
        c = p.filter(pl.col("cls") == "communication")
        exposed = float((c["end"] - c["ts"]).sum()) / 1000 / nsteps if c.height else 0.0
        r = rank_id(t, k)
        rows.append({"rank": r, "exposed_comm_per_step_us": round(exposed, 3),
                     "exposed_wait_per_step_us": round(waits.get(r, 0.0), 3),
                     "unexplained_per_step_us": round(max(exposed - waits.get(r, 0.0), 0.0), 3)})
    if not rows:
        return None
    un = float(np.median([r["unexplained_per_step_us"] for r in rows]))
    first = next(k for k, t in enumerate(traces) if t.has_gpu)
    bw = busbw.bus_bandwidth(traces[first], m, rank_id(traces[first], first)) if m.height else None
    ln = busbw.link(traces[first])
    out = {"unexplained_per_step_us": round(un, 3),
           "unexplained_pct": round(100 * un / period_us, 2) if period_us else None,
           "ranks": rows, "link": ln, "bandwidth": bw,
           "link_utilisation_pct": round(100 * bw["bus_gbps"] / ln["peak_gbps"], 1) if bw else None}
    return out


def _named(nccl: dict, best: Any, ns: float, traces: list[Trace], steps: dict[int, pl.DataFrame],
           parts: dict[int, pl.DataFrame | None], m: pl.DataFrame, entries: list[dict]) -> None:
    """The straggler becomes the rank whose change saves the job most: its rank, waits, reason, and its cause —
    the change's class with that class's concrete evidence in its lead-up windows (`straggler.cause`)."""
    strag = nccl["straggler"]
    last, last_n = strag["rank"], strag["times_last"]
    row = next((r for r in nccl.get("ranks") or [] if r["rank"] == best.rank), {})
    if best.rank != last:
        strag.update(rank=best.rank, times_last=row.get("times_last", 0), total_wait_us=row.get("total_wait_us"))
    strag["last_to_arrive"] = last
    what = (f"its {best.rule} finding's fix" if best.source == "finding"
            else f"its {best.cls} brought to the other ranks' median")
    strag["reason"] = (f"rank {best.rank}: {what} saves the job {ns / 1e6:,.1f} ms per step in the job replay, the "
                       "most of any rank's change; " + (f"rank {last} arrived last most often ({last_n} of "
                                                        f"{strag['of']} matched collectives)" if best.rank != last
                                                        else f"it arrived last at {last_n} of {strag['of']} "
                                                        "matched collectives"))
    c = straggler.cause(traces, steps, parts, m, best.rank, best.cls if best.cls in CLASSES else None)
    if c is not None:
        k = _pos(traces, best.rank)
        own = [f for f in entries[k].get("findings") or [] if f["rule"] not in straggler_rules()]
        # its findings most other ranks do not have: what "the same work as the others" would contradict
        others = [{f["rule"] for f in e.get("findings") or []} for j, e in enumerate(entries) if j != k]
        extra = sorted({f["rule"] for f in own if 2 * sum(f["rule"] in o for o in others) < len(others)})
        c["change"] = {"source": best.source, "name": best.name, "rule": best.rule, "class": best.cls,
                       "class_excess_us_per_step": best.excess_us}
        if best.source == "finding":
            f = next((f for f in own if f["rule"] == best.rule), None)
            if f is not None:
                c["evidence"]["finding"] = {"rule": f["rule"], "title": f["title"], "severity": f["severity"]}
        c["class_excess_us_per_step"] = c.get("excess_us_per_step")
        c["excess_us_per_step"] = _us(ns)
        if (c["class_excess_us_per_step"] or 0) <= 0:  # not late for this class's time: say what the change is
            c["text"] = (f"rank {best.rank} is not late at the collectives for its {best.cls} time "
                         f"({c['lateness_us_per_step'] / 1000:,.1f} ms/step late, {best.cls} "
                         f"{(c['class_excess_us_per_step'] or 0) / 1000:+,.1f} ms/step against the others); its "
                         f"change ({best.name}) is the one that saves the job most")
        if c.get("mechanism") in SAME_WORK and extra:  # its own trace says what else it does: never "the same work"
            c["mechanism_note"] = "findings the other ranks do not have: " + ", ".join(extra)
            c["text"] = c["text"].replace(straggler.MECHANISM_TEXT[c["mechanism"]],
                                          "its host takes longer for its ops than the others, and its trace has "
                                          + c["mechanism_note"])
        if best.source == "finding" and c.get("text"):
            c["text"] += f"; its {best.rule} finding's fix is the change that saves the job most"
    strag["cause"] = c


#: mechanisms whose text says the straggler runs the same work as the others
SAME_WORK = ("slower_host_ops",)


def _pos(traces: list[Trace], rank: int) -> int:
    return next(k for k, t in enumerate(traces) if rank_id(t, k) == rank)


def replayed(m: pl.DataFrame, ranks: list[int], last: int | None) -> list[int]:
    """Positions of the ranks the job replay holds: every rank of a job of up to `MAX_FIX_RANKS`, else the
    sub-job of its latest-arriving ranks (`rank_changes.candidates`), which holds every rank whose change is
    priced and the last to arrive."""
    if len(ranks) <= MAX_FIX_RANKS:
        return list(range(len(ranks)))
    return rank_changes.candidates(m, ranks, last)[1]


def _replays(source: str | None, m: pl.DataFrame, traces: list[Trace]) -> bool:
    """Whether the job is replayed: collectives matched on kernels, or on gloo ranges of ranks that all have a
    GPU (a CPU tensor's range holds no call to join at)."""
    host = source == "gloo_annotation"
    return (source == "kernel" or host) and m.height > 0 and (not host or all(t.has_gpu for t in traces))


def unprofiled_estimates(traces: list[Trace], steps: list[pl.DataFrame],
                         cost_us: dict[str, float] | None = None) -> list[np.ndarray] | None:
    """Each rank's estimated unprofiled step durations (ns, over `steps[k]`) from its job's replay as `answer`
    makes them for the ranks' profiling sections (`job_replay.unprofiled_estimates`, `cost_us` as
    `overhead.profiler_transform` takes it); None where the job is not replayed whole (no matched collectives
    to join at, a gloo rank without a GPU, more than MAX_FIX_RANKS ranks, a cycle)."""
    job = Job(path="", traces=list(traces))
    sd = dict(enumerate(steps))
    m, _ = comm.match(job, sd)
    source = comm.job_source(job) if m.height else "none"
    if len(traces) > MAX_FIX_RANKS or not _replays(source, m, list(traces)):
        return None
    jg = job_replay.build_job(traces, [rank_id(t, k) for k, t in enumerate(traces)], m,
                              host=source == "gloo_annotation")
    if jg is None:
        return None
    try:
        return job_replay.unprofiled_estimates(jg, traces, steps, cost_us=cost_us)
    except ValueError:  # a cycle: collectives matched in different orders on different ranks
        return None


def answer(traces: list[Trace], steps: dict[int, pl.DataFrame], m: pl.DataFrame, nccl: dict,
           entries: list[dict], options, parts: dict[int, pl.DataFrame | None] | None = None
           ) -> tuple[dict | None, dict | None]:
    """(the job's `replay` section, its `projection`) — None, None when the job is not replayed (no matched
    collective kernels or gloo ranges, or a rank without a GPU). Savings are priced unprofiled: each rank's
    profiler cost is taken off (`job_replay.with_unprofiled`) before any change. Names the straggler (the rank
    whose change saves the job most: `rank_changes.py`) and sets its cause; `nccl.straggler.cause` is left to
    the caller when the job is not replayed."""
    host = nccl.get("source") == "gloo_annotation"
    if not _replays(nccl.get("source"), m, traces):
        return None, None
    parts = parts or {}
    st = [steps.get(k, pl.DataFrame()) for k in range(len(traces))]
    ranks = [rank_id(t, k) for k, t in enumerate(traces)]
    strag = nccl.get("straggler")
    keep = replayed(m, ranks, strag["rank"] if strag else None)
    whole = {k: full(traces[k]) for k in keep}  # a reduced rank loaded again: its graph needs every column
    traces = [whole.get(k, t) for k, t in enumerate(traces)]
    kept = [ranks[k] for k in keep]
    jg = job_replay.build_job([traces[k] for k in keep], kept,
                              m if len(keep) == len(ranks) else m.filter(pl.col("rank").is_in(kept)), host=host)
    if jg is None:
        return None, None
    sst = [st[k] for k in keep]
    try:
        recorded = job_replay.job_periods(jg, sst, profiled=True)
    except ValueError as e:  # a cycle: collectives matched in different orders on different ranks
        return {"note": f"the job is not replayed: {e}"}, None
    if len(keep) == len(ranks):  # each rank's profiling estimate from the job's replay (the whole job only)
        for k, u in enumerate(job_replay.unprofiled_estimates(jg, traces, st, recorded)):
            if st[k].height and k < len(entries):
                with_job_estimate(entries[k], traces[k], st[k], u,
                                  job_replay.busy_per_step(traces[k], st[k], jg.comm_dur[k]))
    # every saving is priced unprofiled against unprofiled: each rank's profiler cost taken off (solved to its
    # measured unprofiled step where the collector measured one), as a single trace's fixes are priced
    jg = job_replay.with_unprofiled(jg, {kept[j]: [_pricing(traces[k], st[k])] for j, k in enumerate(keep)})
    base = job_replay.job_periods(jg, sst)
    traced = job_replay.traced_periods(st)
    fid = job_replay.fidelity(jg, sst, recorded)
    noise = job_replay.noise_ns(traced)
    rep = {"fidelity": fid, "job_step_us": _us(job_replay.job_step(recorded)),
           "unprofiled_job_step_us": _us(job_replay.job_step(base)),
           "traced_job_step_us": _us(job_replay.job_step(traced)), "noise_us": _us(noise),
           "collectives": jg.collectives, "doc": "docs/multi-rank.md"}
    if len(keep) < len(ranks):
        rep["replayed_ranks"] = kept
        rep["replayed_note"] = (f"a job of {len(ranks)} ranks is replayed on its {len(kept)} latest-arriving ranks "
                                "(the others' arrivals frozen into the collectives' transfer: they only wait)")
    proj: dict[str, Any] = {"job_step_us": rep["unprofiled_job_step_us"]}
    rows, best, ns = rank_changes.price(jg, traces, st, m, [parts.get(k) for k in range(len(traces))], entries,
                                        options, strag["rank"] if strag else None)
    rep["changes"] = rows[:MAX_CHANGE_ROWS]
    tr = None
    if strag is not None:
        strag["last_to_arrive"] = strag["rank"]
        # a change that saves the job no more than its noise explains nothing: the last rank stays the one judged
        # (a lateness no change of its own expresses, `other_idle`, is judged on the others' waits)
        if best is not None and ns > noise:
            _named(nccl, best, ns, traces, steps, parts, m, entries)
            tr = best.transform
            saving = ns
        else:  # no change of its own to replay: the last rank's cause, as the rules judge it without a replay
            strag["cause"] = straggler.cause(traces, steps, parts, m, strag["rank"])
            tr = fix_transform(traces, steps, m, strag["rank"], strag.get("cause"))
            saving = max(rank_changes.saving_ns(base, job_replay.job_periods(jg, sst, {strag["rank"]: [tr]})), 0.0) \
                if tr is not None else None
        if tr is not None and saving is not None:
            strag["job_saving_us_per_step"] = _us(saving)
            c = strag.get("cause") or {}
            if c.get("text"):
                c["text"] += (f"; fixing it on rank {strag['rank']} alone saves the job {saving / 1e6:,.1f} ms per "
                              "step (job replay)")
            strag["fix"] = tr.name
            proj["straggler_fixed"] = {"rank": strag["rank"], "change": tr.name,
                                       "job_step_us": _us(job_replay.job_step(base) - saving),
                                       "saving_us": _us(saving)}
        strag["noise_us_per_step"] = _us(noise)
    if len(traces) <= MAX_FIX_RANKS:
        tops = _top_fixes(traces, st, entries, options)
        if tops:
            changes = {ranks[k]: [tf] for k, (_, tf) in tops.items()}
            if tr is not None:  # the straggler's cause fixed too
                changes[strag["rank"]] = [tr, *changes.get(strag["rank"], [])]
            fixed = job_replay.job_periods(jg, st, changes)
            saving = max(rank_changes.saving_ns(base, fixed), 0.0)
            proj["all_top_fixes"] = {"fixes": [{"rank": ranks[k], "rule": r} for k, (r, _) in sorted(tops.items())],
                                     "job_step_us": _us(job_replay.job_step(base) - saving), "saving_us": _us(saving)}
    else:
        proj["note"] = f"every rank's top fix is replayed for jobs of up to {MAX_FIX_RANKS} ranks"
    return rep, proj
