"""TV501 nccl-wait: exposed NCCL communication and ranks waiting for a straggler.

## What it detects
NCCL/RCCL kernels (`ncclKernel_*`, `ncclDevKernel_*`, `rccl*`). Per trace: the *exposed* communication —
time when a collective runs and no compute kernel does (the classifier's `communication` class: TraceLens's
exposed_comm = |∪comm − ∪compute|), per step. Per job (a directory with the rank files of one job):
collectives are matched across ranks (process group + sequence number, else order), each rank's wait is
the latest start across ranks minus its own start, the pure transfer time is the minimum duration across
ranks, and the straggler is the rank most often last to arrive (ties: the lowest total wait). What a rank
loses per step is its *exposed* wait: the union of its waits in the step minus the time its GPU ran other
work meanwhile — DDP's early gradient buckets and FSDP's prefetched all-gathers wait on their own stream
while the rank still computes, which costs nothing (on 2 x H200, DDP with rank 1 delayed 100 ms a step:
raw NCCL wait 118 ms per step on rank 0, exposed 92 ms, measured step-time increase 98 ms). The finding's
share and severity use the exposed wait per step of the waiting ranks. A job with no
NCCL kernel whose ranks run on the CPU with gloo is matched the same way on its host-side collectives (the
`gloo:<op>` ranges of ProcessGroupGloo's worker threads, else the `c10d::<op>` calls; JSON `nccl.source`,
`nccl.backend`), by order per collective name within each step.

## Why it is slow
A collective cannot finish until every rank has joined, so a rank that arrives late makes every other
rank's NCCL kernel look long: that extra time is synchronisation, not data transfer. And
communication that is not overlapped with computation adds directly to the step time.

## How to fix
Overlap communication with compute: DDP gradient bucketing (`bucket_cap_mb`, `gradient_as_bucket_view`),
FSDP forward/backward prefetch, issuing collectives with `async_op=True` early and waiting late; reduce the
bytes (gradient compression, bf16 reduction, larger batch or gradient accumulation). For a straggler, look
at that rank's own trace: host syncs, data loading, uneven work or a slower device/link.

## Evidence
Per trace: exposed communication time and share, total NCCL kernel time, overlapped part, kernel names,
per step. Per job: matched collectives, matching method and source (GPU kernels or host-side gloo collectives),
per-rank total/mean wait, wait and exposed wait per step, times last/first, pure transfer time, and the
straggler with the reason, and why it is late (`cause`: the class and mechanism of its extra time before the
collectives it arrived late at, compared with the other ranks': `jobs[].nccl.straggler.cause`). For a
`traceview collect` run, `profiling_overhead_ms_per_step` (profiled minus unprofiled step time from its
manifest, else the profiling section's estimate of the unprofiled step); when that is at least the others'
exposed wait per step AND the straggler runs the same work as the others (its cause is the same host ops, each
slower), the straggler is reported as `info` with the reason (`may_be_profiling_artifact`): profiling slows
every rank's host, not always equally, and in a launch-bound job any host-speed difference becomes the others'
wait (a balanced DDP job on 2 x H200 profiled at +124 % showed 12.8 ms of wait per step). A straggler whose
delay is work the others do not have (code outside any op, extra ops, input, syncs, kernels) stays loud
whatever the overhead.
Per trace, no replay model: overlapping communication with compute is not expressible on one rank's graph, so
those findings carry no saving (`savings_us` 0, at most `info`). Per job (GPU ranks), the job replay
(docs/multi-rank.md) joins the ranks' graphs by their collectives (NCCL kernels, or gloo's exchanges on its
worker threads) and prices the straggler's cause fixed on that rank alone, unprofiled (each rank's profiler cost
taken off first): `job_saving_us_per_step` is the finding's saving, and a straggler is raised only when it is above the
job's step-to-step noise (and above the profiler's cost when the straggler runs the same work, only slower).
Otherwise the job finding says there is no straggler — or, when the ranks' exposed communication is the
collectives' own transfer (not a wait for a late rank) and reaches `moderate_pct` of the step,
`Communication-bound` (at most a warning) with the bus bandwidth achieved against the link's
(`jobs[].nccl.comm_bound`).

## Options
- `moderate_pct` (3.0): exposed-communication (or wait) share at which a finding is a warning — XProf device-collectives moderate threshold.
- `high_pct` (15.0): share at which it is an error — XProf device-collectives high threshold (tb_plugin flags communication > 10 %).
- `host_noise_ms` (6.0): for host-side (gloo) collectives of a job that is not replayed (ranks without a GPU), a median wait per step below this is within OS scheduling noise and the straggler finding stays info — Linux CFS's default scheduling period (sched_latency 6 ms): on a busy CPU host a runnable rank can wait that long for a core.

## References
- TraceLens `NcclAnalyser` (wait = latest start − own start, comm latency = min duration, straggler summary) — https://github.com/AMD-AGI/TraceLens.
- tb_plugin distributed view (transfer = min duration across workers; rule 4, communication > 10 %) — https://github.com/pytorch/kineto (tb_plugin/torch_tb_profiler/profiler/overall_parser.py, communication.py).
- HTA `get_potential_stragglers`, comm/comp overlap — https://github.com/facebookresearch/HolisticTraceAnalysis.
- XProf device collectives 3 %/15 % — https://github.com/openxla/xprof (overview page recommendations).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import polars as pl

from traceview.analyses.intervals import clip, merge
from traceview.evidence import UNSET, Meta, UnsetType
from traceview.finding_model import severity_for
from traceview.ruleapi import Finding, JobContext, Option, RuleContext, xprof_severity

CODE = "TV501"
NAME = "nccl-wait"
CLASS = "communication"  # the classifier class whose time a fix of these findings removes
JUDGES_STRAGGLER = True  # its job finding names the straggler rank (the per-rank verdicts and the app read it)
SEVERITY = "warning"
TITLE = "Exposed NCCL communication"
OPTIONS = {
    **xprof_severity("device-collectives"),
    "host_noise_ms": Option(6.0, "Linux CFS default scheduling period: host (gloo) median waits per step below it are noise"),
}
FIX = ("While a collective runs with no compute kernel beside it, the step is waiting on the network (or on a "
       "rank that arrived late: a collective cannot finish until every rank has joined). Overlap communication "
       "with compute — DDP gradient bucketing (bucket_cap_mb), FSDP forward/backward prefetch, async_op=True "
       "collectives issued early — and reduce bytes (bf16 gradients, compression, gradient accumulation). If one "
       "rank is the straggler, look at its own trace: host syncs, data loading, uneven work.")
#: cause mechanisms (analyses/straggler.py) that uneven profiler overhead can produce: the straggler runs the same
#: work as the others, only its host is slower (None: no cause could be computed)
PROFILER_EXPLAINED = (None, "slower_host_ops")
STRAGGLER_FIX = ("Every other rank's collective (its NCCL kernel, or the gloo work on the host) waits for the straggler "
                 "to join: that time is synchronisation, "
                 "not transfer. Look at the straggler rank's own trace for what delays it before the collective "
                 "(host syncs such as .item(), data loading, extra work, a slower GPU or link), balance the work, "
                 "and overlap the collectives with compute so short delays are hidden.")


class NcclKernel(msgspec.Struct, kw_only=True):
    """A collective kernel by its time."""

    name: Annotated[str, Meta(description="the kernel's name")]
    count: Annotated[int, Meta(description="its launches in the analysed steps")]
    us: Annotated[float, Meta(description="their device time (µs)")]


class Evidence(msgspec.Struct, kw_only=True):
    exposed_us: Annotated[float, Meta(description="the classifier's `communication` time: collectives nothing overlaps (µs)")]
    exposed_pct: Annotated[float, Meta(description="that as % of the analysed window")]
    nccl_kernel_us: Annotated[float, Meta(description="the collective kernels' time, merged (µs)")]
    overlapped_us: Annotated[float, Meta(description="of which overlapped by compute (µs)")]
    kernels: Annotated[int, Meta(description="collective kernels in the analysed steps")]
    top_kernels: Annotated[list[NcclKernel], Meta(description="the 5 collective kernels with the most time")]
    per_step_exposed_us: Annotated[dict[str, float], Meta(description="exposed time per step (µs), by step number")]
    streams: Annotated[list[int], Meta(description="the streams the collectives ran on")]
    # set on a rank's finding by the job analysis (sections/job.py), after the rule
    straggler: Annotated[int | UnsetType, Meta(description="the job's straggler rank (set by the job analysis)")] = UNSET
    straggler_wait_per_step_us: Annotated[float | UnsetType, Meta(
        description="this rank's exposed wait for it per step (µs; set by the job analysis)")] = UNSET
    note: Annotated[str | UnsetType, Meta(description="the same in words (set by the job analysis)")] = UNSET


class StragglerCause(msgspec.Struct, kw_only=True):
    """Why the straggler is late (the job's `straggler_cause`)."""

    class_: Annotated[str, Meta(description="the classifier class that explains its delay")] = msgspec.field(
        name="class")
    mechanism: Annotated[str | None, Meta(description="the mechanism within that class")]
    excess_us_per_step: Annotated[float, Meta(description="the straggler's excess time per step over the others (µs)")]
    text: Annotated[str, Meta(description="the same in words")]


class JobEvidence(msgspec.Struct, kw_only=True):
    straggler: Annotated[int | None, Meta(description="the straggler rank (null: none raised)")]
    reason: Annotated[str, Meta(description="why that rank is the straggler")]
    matched_collectives: Annotated[int, Meta(description="collectives matched across the ranks")]
    method: Annotated[str, Meta(description="how they were matched")]
    source: Annotated[str, Meta(description="what the waits are measured on: `kernel` or the host-side calls")]
    backend: Annotated[str | None, Meta(description="the process group's backend (nccl, gloo)")]
    transfer_us: Annotated[float | None, Meta(description="the collectives' transfer time (min duration across ranks, µs)")]
    exposed_wait_per_step_us: Annotated[float, Meta(description="the other ranks' exposed wait per step, mean (µs)")]
    median_exposed_wait_per_step_us: Annotated[float, Meta(description="the same, median step (µs)")]
    ranks: Annotated[list[dict[str, Any]], Meta(
        description="each rank's waits: the job's `nccl.ranks` rows (docs/json-schema.md)")]
    wait_per_step_us: Annotated[float | UnsetType, Meta(
        description="host-side collectives: the others' wait per step (µs)")] = UNSET
    median_wait_per_step_us: Annotated[float | UnsetType, Meta(
        description="host-side collectives: the same, median step (µs)")] = UNSET
    cause: Annotated[StragglerCause | UnsetType, Meta(description="why the straggler is late, when a class explains it")] = UNSET
    job_saving_us_per_step: Annotated[float | UnsetType, Meta(
        description="the job's step saved by fixing the straggler's cause on that rank alone (job replay, µs)")] = UNSET
    noise_us_per_step: Annotated[float | None | UnsetType, Meta(
        description="the job's step-to-step noise (µs)")] = UNSET
    profiling_overhead_ms_per_step: Annotated[float | UnsetType, Meta(
        description="the profiler's cost per step (ms; measured or estimated)")] = UNSET
    last_rank: Annotated[int | UnsetType, Meta(description="no straggler: the rank that arrived last")] = UNSET
    comm_bound: Annotated[dict[str, Any] | None | UnsetType, Meta(
        description="no straggler: the job's `nccl.comm_bound` (exposed transfer no lateness explains)")] = UNSET
    may_be_profiling_artifact: Annotated[bool | UnsetType, Meta(
        description="the profiler's cost may explain the delay")] = UNSET
    note: Annotated[str | UnsetType, Meta(description="the judgement in words")] = UNSET


def check(ctx: RuleContext) -> list[Finding]:
    trace, window = ctx.trace, ctx.window_ns
    comm = trace.gpu[["i", "kind", "name", "ts", "end", "dur", "stream"]].filter(pl.col("kind") == "comm")
    if comm.height == 0 or not window:
        return []
    lo, hi = ctx.lo, ctx.hi
    cw = clip(comm.select("ts", "end"), lo, hi)
    if cw.height == 0:
        return []
    total = int((merge(cw).select(pl.col("end") - pl.col("ts")).to_series()).sum())
    part = ctx.class_time("communication")
    exposed = int((part["end"] - part["ts"]).sum()) if part.height else 0
    pct = 100.0 * exposed / window
    per = part.group_by("step").agg((pl.col("end") - pl.col("ts")).sum().alias("t")).sort("step")
    inwin = comm.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
    names = inwin.group_by("name").agg(pl.len(), pl.col("dur").sum()).sort(["dur", "name"], descending=[True, False], maintain_order=True).head(5)
    ev = Evidence(exposed_us=round(exposed / 1000, 3), exposed_pct=round(pct, 2), nccl_kernel_us=round(total / 1000, 3),
                  overlapped_us=round((total - exposed) / 1000, 3), kernels=inwin.height,
                  top_kernels=[NcclKernel(name=r["name"], count=r["len"], us=round(r["dur"] / 1000, 3))
                               for r in names.to_dicts()],
                  per_step_exposed_us={str(s): round(t / 1000, 3) for s, t in per.rows()},
                  streams=sorted(inwin["stream"].unique().drop_nulls().to_list()))
    return [ctx.finding(steps=per.filter(pl.col("t") > 0)["step"].to_list(), count=inwin.height, cost_ns=exposed,
                        evidence=ev, kernel_ids=inwin["i"])]


def check_job(ctx: JobContext) -> list[Finding]:
    """The straggler finding of a job (the cross-rank matching is the job's `nccl` section, `ctx.comm`)."""
    opts, s = ctx.options, ctx.comm
    if not s["collectives"] or s["straggler"] is None:
        return []
    window = ctx.window_ns
    ranks = s["ranks"]
    strag = s["straggler"]
    others = [r for r in ranks if r["rank"] != strag["rank"]]
    host = s["source"] not in ("kernel", "none")
    kind = f"{s['backend'] or 'host'} (host-side)" if host else "NCCL"
    # What the others lose per step: the union of their waits per step (collectives that wait at the same time
    # count once), and for NCCL kernels only the exposed part (a wait overlapped by the rank's own compute on
    # another stream costs nothing; host-side collectives: exposed = wait).
    per_step = sum(r["exposed_wait_per_step_us"] or 0 for r in others) / len(others) if others else 0.0
    median = sum(r["median_exposed_wait_per_step_us"] or 0 for r in others) / len(others) if others else 0.0
    mean_wait = per_step * max(s["steps"], 1)
    pct = 100.0 * mean_wait * 1000 / window if window else 0.0
    cost = sum((r["exposed_wait_per_step_us"] or 0) * max(s["steps"], 1) for r in ranks)
    ev = JobEvidence(straggler=strag["rank"], reason=strag["reason"], matched_collectives=s["collectives"],
                     method=s["method"], source=s["source"], backend=s["backend"], transfer_us=s["transfer_us"],
                     exposed_wait_per_step_us=round(per_step, 3), median_exposed_wait_per_step_us=round(median, 3),
                     ranks=ranks)
    severity = severity_for(pct, opts["moderate_pct"], opts["high_pct"], SEVERITY)
    saving = strag.get("job_saving_us_per_step")
    if host:
        ev.wait_per_step_us = round(per_step, 3)
        ev.median_wait_per_step_us = round(median, 3)
        # a straggler delays every step; a descheduled thread only some: judge the median step (a replayed job
        # is judged on its replayed saving against the step-to-step noise instead, below)
        if saving is None and median < opts["host_noise_ms"] * 1000:
            severity = "info"
            ev.note = (f"median wait per step {median / 1000:.2f} ms is below host_noise_ms ({opts['host_noise_ms']} "
                          "ms): within OS scheduling noise for host-side collectives, no straggler is raised")
    title = f"Ranks wait for straggler rank {strag['rank']} in {kind} collectives"
    cause = strag.get("cause") or {}
    if cause.get("class"):
        ev.cause = StragglerCause(class_=cause["class"], mechanism=cause["mechanism"],
                                  excess_us_per_step=cause["excess_us_per_step"], text=cause["text"])
    over = ctx.overhead_ms
    if saving is not None:
        # the job replay priced the straggler's cause: the job's step saved by fixing it on that rank alone
        ev.job_saving_us_per_step = saving
        ev.noise_us_per_step = strag.get("noise_us_per_step")
        if over is not None:
            ev.profiling_overhead_ms_per_step = round(over, 3)
        # a straggler saves the job more than its step-to-step noise; and, when its delay is the same host work
        # as the others', only slower (what uneven profiling overhead makes), more than the profiler's cost.
        # Work the others do not have (code outside ops, input, syncs, kernels) is not the profiler's.
        artifact = cause.get("mechanism") in PROFILER_EXPLAINED and over is not None
        bar = max(strag.get("noise_us_per_step") or 0.0, over * 1000 if artifact else 0.0)
        if saving <= bar:
            return [_not_a_straggler(ctx, s, ev, saving, over if artifact else None)]
        savings_ns = saving * max(s["steps"], 1) * 1000
        if over is not None and over * 1000 >= saving:
            ev.note = (f"the profiler added {over:.2f} ms per step, at least the {saving / 1000:.2f} ms fixing rank "
                          f"{strag['rank']} saves the job, but its delay is work the others do not have "
                          f"({cause.get('mechanism')}): a real straggler")
        pct = 100.0 * savings_ns / window if window else 0.0
        severity = severity_for(pct, opts["moderate_pct"], opts["high_pct"], SEVERITY)
    else:
        savings_ns = mean_wait * 1000
    if over is not None and saving is None:
        ev.profiling_overhead_ms_per_step = round(over, 3)
        if severity != "info" and over * 1000 >= per_step:
            # Under the profiler every rank's host is slower, not always by the same amount; in a launch-bound
            # job any host-speed difference becomes the others' wait. When the profiler added at least as much per
            # step as the others wait AND the straggler runs the same work as they do (no code, ops, syncs, input
            # or kernels of its own: only the same host ops, each slower), the straggler may not exist without
            # the profiler: info, with the reason. Work the others do not have stays loud whatever the overhead.
            mech = cause.get("mechanism")
            if mech in PROFILER_EXPLAINED:
                ev.may_be_profiling_artifact = True
                ev.note = (f"the profiler added {over:.2f} ms per step ({ctx.overhead_source}), at least the "
                              f"{per_step / 1000:.2f} ms the other ranks wait"
                              + (f", and rank {strag['rank']} runs the same work as they do (the same host ops, each "
                                 "slower)" if mech else "")
                              + ": the straggler may be an artifact of uneven profiling overhead, not raised; check "
                              "the unprofiled step times or re-record with fewer profiler options")
                title += " (may be a profiling artifact)"
                severity = "info"
            else:
                ev.note = (f"the profiler added {over:.2f} ms per step, at least the {per_step / 1000:.2f} ms the "
                              f"other ranks wait, but rank {strag['rank']}'s delay is work the others do not have "
                              f"({mech}): a real straggler")
    elif over is not None:
        ev.profiling_overhead_ms_per_step = round(over, 3)
    return [ctx.finding(severity=severity, title=title, count=s["collectives"], cost_ns=cost * 1000,
                        savings_ns=savings_ns, evidence=ev, fix=STRAGGLER_FIX)]


def _not_a_straggler(ctx: JobContext, s: dict, ev: JobEvidence, saving: float, over: float | None) -> Finding:
    # `over`: the profiler's cost when it may explain the delay (the straggler's same work, slower), else None
    """The job finding when fixing the last rank's cause would not save the job more than its step-to-step noise
    or the profiler's cost: no straggler. When the ranks' exposed communication is the transfer's own (no rank's
    lateness explains it), the job is communication-bound: said with the bus bandwidth achieved against the
    link's, at most a warning (overlap or fewer bytes is the fix, not a rank)."""
    cb = s.get("comm_bound") or {}
    ev.straggler = None
    ev.last_rank = s["straggler"]["rank"]
    ev.comm_bound = cb or None
    last = s["straggler"]["rank"]
    why = f"fixing rank {last}'s cause saves the job {saving / 1000:,.2f} ms per step in the job replay, "
    noise = ev.noise_us_per_step or 0.0
    wait = ev.exposed_wait_per_step_us or 0.0
    # within the noise between steps and nothing waited for in the recording: nothing to explain; a saving above
    # the noise, or a recorded wait above it that the unprofiled replay does not keep, within what the profiler
    # added (the same work, slower): the profiler may explain it
    if over is not None and max(saving, wait) > noise and saving <= over * 1000:
        ev.profiling_overhead_ms_per_step = round(over, 3)
        ev.may_be_profiling_artifact = True
        note = (s["straggler"].get("cause") or {}).get("mechanism_note")
        same = (f"its ops run slower than the others' (its trace also has {note})" if note else
                "runs the same work as the others (the same host ops, each slower)")
        if saving <= noise:
            why += (f"within the step-to-step noise ({noise / 1000:,.2f} ms) with each rank's profiler cost taken "
                    f"off, though the others wait {wait / 1000:,.2f} ms per step for it in the recording; ")
        why += (f"and the profiler added {over:.2f} ms per step ({ctx.overhead_source}), at least that; rank {last} "
                f"{same}: the delay may be an artifact of "
                "uneven profiling overhead; no straggler (check the unprofiled step times or re-record with fewer "
                "profiler options)")
    else:
        why += f"within the step-to-step noise ({noise / 1000:,.2f} ms): no straggler"
    pct = cb.get("unexplained_pct") or 0.0
    opts = ctx.options
    if pct >= opts["moderate_pct"]:
        bw, ln = cb.get("bandwidth") or {}, cb.get("link") or {}
        rate = (f" at {bw['bus_gbps']:,.0f} GB/s bus bandwidth ({cb['link_utilisation_pct']:g} % of "
                f"{ln.get('link')} {ln.get('peak_gbps'):,.0f} GB/s)") if bw else ""
        ev.note = ("the exposed communication is the collectives' own transfer time, not a wait for a late rank: "
                      "overlap it with compute or move fewer bytes; " + why)
        sev = "warning"
        title = (f"Communication-bound: {cb['unexplained_per_step_us'] / 1000:,.1f} ms per step of exposed "
                 f"collectives no rank's lateness explains{rate}")
        return ctx.finding(severity=sev, title=title, count=s["collectives"],
                           cost_ns=cb["unexplained_per_step_us"] * 1000 * max(s["steps"], 1), savings_ns=0,
                           evidence=ev, fix=FIX)
    ev.note = why
    who = "the last to arrive" if s["straggler"].get("last_to_arrive", last) == last else "its change saves the job most"
    title = (f"No straggler: fixing rank {last} ({who}) saves the job {saving / 1000:,.2f} ms per step, "
             + ("within the profiler's cost (may be a profiling artifact)" if ev.may_be_profiling_artifact is True
                else "within the step-to-step noise"))
    return ctx.finding(severity="info", title=title, count=s["collectives"], cost_ns=0, savings_ns=0,
                       evidence=ev, fix=STRAGGLER_FIX)
