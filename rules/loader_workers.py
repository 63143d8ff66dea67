"""TV402 loader-workers: the DataLoader has worker processes, but too few for its per-batch CPU time.

## What it detects
A DataLoader that already runs worker processes (`_MultiProcessingDataLoaderIter.__next__` spans) while the
steps still wait in `__next__` for at least `moderate_pct` of the step (the DataLoader role of tb_plugin's step
breakdown, as TV401 measures it; TV401 input-bound judges only loaders without workers, so one of the two
fires). From the trace it derives what the workers need: while the loop waits for every batch it runs at the
workers' pace, so N workers deliver one batch per step period T, and each batch costs a worker about N x T of
CPU; the loop itself needs c per step (the replayed unprofiled step with the waits taken off the host path).
The workers needed are N x T / c. Waits in a minority of the analysed steps below `high_pct` are `info`: they
fit a loader that keeps pace on average (its prefetch buffer absorbing one late batch) as well as too few
workers. Kineto records no worker count (no trace metadata, no event of the worker processes); `traceview
collect` counts them while it waits for the step time to settle (the manifest's `settle.loader_period`: the most
workers of a live multi-process iterator), and that count is used where present. Otherwise N workers
that stay in phase deliver in bursts of N: the loop waits long once every N steps and takes the other batches at
once. N is that period, read from the trace's own steps when it has enough (at least 7, three long waits), else
from the collector's unprofiled steps (its manifest beside the trace). Out of phase every step waits alike and N
does not show: the finding says so, and the advice is a factor of the current count unless
`--set loader-workers.num_workers=N` gives it.

## Why it is slow
Each worker builds whole batches (decode, augment, collate) one at a time; N workers produce N batches per
per-batch time P. When P / N exceeds what the GPU needs per step, the prefetch buffer (`prefetch_factor` x N
batches) drains and `__next__` blocks every step while the GPU idles; more prefetching only delays that.

## How to fix
Enough workers for the measured per-batch CPU time: `DataLoader(num_workers=N, persistent_workers=True,
pin_memory=True, prefetch_factor=2)` with N from the finding (at most the free CPU cores), or a cheaper
per-sample transform: decode once and cache, smaller source images, augmentation on the GPU (torchvision
`transforms.v2` on CUDA tensors, NVIDIA DALI). `pin_memory=True` is named only when the trace shows pageable
host-to-device copies. The workers share the host's cores with the training process: where the collector recorded
them (`cpu_affinity` / `cpu_count` in its manifest), at most F = CPUs − the loop's threads (those that run ops in
the steps) workers run at once, so the advice is at most F and the fix is priced at no less than the per-batch CPU
time over F (with F at or below the current count: more workers do not help, only a cheaper transform); where
they were not recorded, the fix text says how many free cores the saving assumes.

## Evidence
The DataLoader wait per step and its share, the steps that waited, the mean step period T, the replayed step
without the waits c (unprofiled), the ratio T / c, the worker count N and where it comes from (the option, or the
long waits' period and their steps), the per-batch worker CPU time N x T and the workers needed when N is known,
whether copies are pageable, the host's CPUs (null: not recorded), the loop's threads and the cores the fix
needs. Savings (per step, unprofiled) are replayed: `fix_transform` takes the `__next__` spans off the training
thread's path (batches ready when asked), at no less than the free cores' pace where the CPUs are recorded. The
problem's own replay holds the batches the traced loop blocked for at the times they arrived (docs/replay.md, the
batch-arrival edge: the workers are other processes, which the profiler does not slow, so the unprofiled loop
waits longer for them); the fix no longer waits for them. N' workers deliver at the current pace x N / N' (each
batch's CPU time is a worker's): the advised N' is the count whose pace the loop's own step keeps up with, so the
fixed step is the loop's, unless the free cores cap N' (their pace then holds it, `cores_floor_ns`).
The loop without waits is priced at the speed the traced process ran it (the fitted profiler model on its own
steps): with batches always ready nothing of the loader stays on its path (`__next__` takes 0.04–0.07 ms a step in
a fixed run's trace), but a fix measured in another process runs the loop at that process's host speed, which
runs of one program spread over (the input_workers loop: 7.2 to 11.4 ms unprofiled; docs/predictions.md).

## Options
- `moderate_pct` (5.0): DataLoader share at which a finding is reported (warning) — tb_plugin rule 1 (5 %), XProf "moderately input-bound" (5 %).
- `high_pct` (20.0): share at which it is an error — XProf "highly input-bound" (20 %).
- `num_workers` (0): the DataLoader's `num_workers` when known (0: read it from the wait pattern, else the advice is a factor).

## References
- PyTorch docs, `torch.utils.data.DataLoader` (num_workers, prefetch_factor, persistent_workers, pin_memory) — https://pytorch.org/docs/stable/data.html.
- tb_plugin `profiler/data.py: analyze()` recommendation 1 — https://github.com/pytorch/kineto.
- XProf input-pipeline analysis (5 %/20 %) — https://github.com/openxla/xprof.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np
import polars as pl

from traceview.analyses.classify import dataloader_spans
from traceview.analyses.fixes import input_floor_ns
from traceview.analyses.overhead import profiler_transform
from traceview.analyses.replay import Transform, replay, spans
from traceview.evidence import UNSET, Meta, UnsetType
from traceview.ingest.manifest import loader_period, rank_cpus, rank_step_samples
from traceview.ruleapi import Finding, Option, RuleContext

from . import input_bound

CODE = "TV402"
NAME = "loader-workers"
CLASS = "input"  # the classifier class whose time a fix of these findings removes
FIX_REMOVES_CLASS = True  # the GPU idles for this reason only: a fix removes every instant of CLASS
SEVERITY = "warning"
TITLE = "DataLoader workers too few for the per-batch CPU time; the GPU idles meanwhile"
OPTIONS = {
    "moderate_pct": Option(5.0, "tb_plugin rule 1 / XProf moderately input-bound (% of step time)"),
    "high_pct": Option(20.0, "XProf highly input-bound (% of step time)"),
    "num_workers": Option(0, "the DataLoader's num_workers when known (0: from the wait pattern, else not known)"),
}
FIX = (
    "The DataLoader already runs worker processes, but they build batches slower than the step consumes them. "
    "Raise num_workers to what the per-batch CPU time needs (DataLoader(num_workers=N, persistent_workers=True, "
    "pin_memory=True, prefetch_factor=2)), or make the per-sample transform cheaper (decode once, augment on the GPU)."
)
PAGEABLE_RE = r"Pageable"


def _steps(xs: list[int]) -> str:
    """Step numbers in words: the first few, then how many more."""
    head = ", ".join(str(x) for x in xs[:6])
    return f"steps {head}" + (f" and {len(xs) - 6} more" if len(xs) > 6 else "")


def _dur(ns: float) -> str:
    """A duration in words: seconds from one second, else milliseconds."""
    return f"{ns / 1e9:.2f} s" if ns >= 1e9 else f"{ns / 1e6:.0f} ms" if ns >= 1e8 else f"{ns / 1e6:.1f} ms"


def burst_period(xs: Sequence[float]) -> tuple[int, list[int]] | None:
    """(N, the positions of the long steps) from a series of step periods, or None.

    N workers that stay in phase deliver their batches in bursts of N: the loop waits long for the first batch of
    a burst and takes the other N - 1 at once, so a long step recurs every N steps. The long steps are those
    above the midpoint between the short level (the lower quartile) and the longest; a burst wait is at least
    the loop's own step (the longest at least twice the short level), seen at least three times, and N is the
    spacing most (two thirds) of them share. None: too few steps to see it, or workers out of phase (each
    batch then arrives about P / N after the last, every step waits alike, and N does not show)."""
    x = np.asarray(xs, dtype=float)
    if x.size < 7:
        return None
    short, top = float(np.quantile(x, 0.25)), float(x.max())
    if not short > 0 or top < 2 * short:
        return None
    long = np.flatnonzero(x > (short + top) / 2)
    if long.size < 3:
        return None
    gaps, counts = np.unique(np.diff(long), return_counts=True)
    n = int(gaps[counts.argmax()])
    if n < 2 or 3 * int(counts.max()) < 2 * (long.size - 1):
        return None
    return n, long.tolist()


def current_workers(ctx: RuleContext) -> tuple[int, str, list[int]] | None:
    """(num_workers, where it comes from, the long steps) — Kineto records no worker count (no trace metadata,
    no event of the worker processes), so it is the `num_workers` option, else the period of the long waits
    (`burst_period`): in the trace's own steps when it has enough, else in the collector's unprofiled steps
    (its manifest, when present). None: not known."""
    nw = int(ctx.options["num_workers"] or 0)
    if nw:
        return nw, "option", []
    doc = ctx.trace.meta.manifest
    if doc is not None and (k := loader_period(doc, Path(ctx.trace.meta.path or "").name, ctx.trace.meta.rank)) > 1:
        return k, "counted", []
    periods = (ctx.steps["end"] - ctx.steps["ts"]).to_list()
    got = burst_period(periods)
    if got is not None:
        return got[0], "trace", [int(ctx.steps["step"][i]) for i in got[1]]
    if doc is None:
        return None
    got = burst_period(rank_step_samples(doc, Path(ctx.trace.meta.path or "").name, ctx.trace.meta.rank))
    return (got[0], "collector", [i + 1 for i in got[1]]) if got is not None else None


def loop_threads(ctx: RuleContext) -> int:
    """The training process's threads that run ops in the steps (the main thread, autograd's): each takes a core
    the worker processes cannot use while the loop runs without waiting."""
    h = ctx.trace.host
    if ctx.steps.height == 0 or "cat" not in h.columns:
        return 1
    ops = h.filter(
        (pl.col("cat") == "cpu_op") & (pl.col("ts") >= ctx.steps["ts"].min()) & (pl.col("ts") < ctx.steps["end"].max())
    )
    return max(1, ops["tid"].n_unique())


def host_cpus(ctx: RuleContext) -> int | None:
    """The CPUs the training process may run on, which its worker processes inherit (the collector's manifest:
    `cpu_affinity`, else `cpu_count`); None: not recorded (Kineto records no core count)."""
    doc = ctx.trace.meta.manifest
    return rank_cpus(doc, Path(ctx.trace.meta.path or "").name, ctx.trace.meta.rank) if doc is not None else None


def cores_floor_ns(ctx: RuleContext, per_batch_ns: float, pace_ns: float) -> float | None:
    """The fastest step the worker processes can feed when the host's free cores bound them (ns), else None.

    N workers needing P of CPU per batch run at once on at most F = cpus - (the loop's threads) cores, so however
    many there are they deliver at most F batches per P: the step is at least P / F. At most the current pace
    (the workers ran at it). None when the core count is not recorded or leaves the workers P / F below the pace
    they ran at with more than enough cores."""
    cpus = host_cpus(ctx)
    if cpus is None or per_batch_ns <= 0:
        return None
    free = max(cpus - loop_threads(ctx), 1)
    return min(per_batch_ns / free, pace_ns)


def applies(ctx: RuleContext) -> bool:
    """Whether the trace's DataLoader runs worker processes on a GPU trace (TV401 judges the others)."""
    return ctx.cpu is None and bool(ctx.features.dataloader_workers)


def _need(ctx: RuleContext) -> float:
    """c: the mean replayed unprofiled step with the DataLoader waits off the host path (ns)."""

    def run() -> float:
        t = fix_transform(ctx)  # the loop's own step: without the pace of the workers the fix gives
        t = dataclasses.replace(t, floor_ns=None) if t else None
        r = replay(ctx.trace, ctx.steps, [profiler_transform(ctx.trace), *([t] if t else [])])
        return float(np.mean(r)) if r.size else 0.0

    return ctx.once("loader-need", run)


class Unprofiled(msgspec.Struct, kw_only=True):
    """The wait the profiler hid: the loop ran at the workers' pace while recorded, so the trace shows none."""

    measured_step_us: Annotated[float, Meta(description="the collector's steady unprofiled step (µs)")]
    wait_pct: Annotated[float, Meta(description="the share of it the loop waits for the workers (%)")]
    note: Annotated[str, Meta(description="the same in words")]


class Evidence(input_bound.Evidence, kw_only=True):
    steps_waited: Annotated[int, Meta(description="steps whose wait reached `moderate_pct`")]
    steps: Annotated[int, Meta(description="analysed steps")]
    step_period_us: Annotated[float, Meta(description="the mean step: the pace the workers deliver at (µs)")]
    step_without_wait_us: Annotated[float, Meta(description="the step without the DataLoader wait (µs)")]
    period_over_need: Annotated[
        float | None, Meta(description="their ratio: how many times too slow the workers are")
    ]
    pageable_copies: Annotated[bool, Meta(description="the host-to-device copies are from pageable memory")]
    num_workers: Annotated[int | None, Meta(
        description="the DataLoader's workers: the `num_workers` option, else the period of its long waits (null: "
                    "not known)")]
    num_workers_from: Annotated[str | None, Meta(
        description="where `num_workers` comes from: `option`, `counted` (the collector counted the job's "
                    "DataLoader workers), `trace` (its steps' long waits recur every N steps), `collector` (the "
                    "same in the collector's unprofiled steps); null: not known")] = None
    long_wait_steps: Annotated[list[int], Meta(
        description="the long steps that give that period (step numbers, or positions 1.. in the collector's "
                    "unprofiled steps)")] = msgspec.field(default_factory=list)
    unprofiled: Annotated[
        Unprofiled | UnsetType, Meta(description="set when the profiler hid the wait (a collector manifest)")
    ] = UNSET
    per_batch_cpu_us: Annotated[
        float | UnsetType, Meta(description="CPU time per batch in a worker (µs; with `num_workers`)")
    ] = UNSET
    workers_needed: Annotated[
        int | UnsetType, Meta(description="workers that keep up (with `num_workers`)")
    ] = UNSET
    workers_factor: Annotated[
        float | UnsetType, Meta(description="the factor to raise `num_workers` by (without `num_workers`)")
    ] = UNSET
    note: Annotated[
        str | UnsetType, Meta(description="set when the loop waited in only some of the steps")
    ] = UNSET
    host_cpus: Annotated[int | None, Meta(
        description="the CPUs the training process may run on (the collector's manifest; null: not recorded, "
                    "and the saving assumes enough free cores)")] = None
    loop_threads: Annotated[int, Meta(
        description="the training process's threads that run ops in the steps (each needs a core)")] = 1
    cores_needed: Annotated[float | UnsetType, Meta(
        description="cores the fix needs: the workers' CPU per batch over the step without waiting, plus "
                    "`loop_threads` (with `num_workers`)")] = UNSET


def check(ctx: RuleContext) -> list[Finding]:
    if not applies(ctx):
        return []
    m = input_bound.measure(ctx)
    if m is None:
        return []
    n_steps = ctx.steps.height
    period = ctx.window_ns / n_steps  # T: the loop's pace, the workers' while it waits for every batch
    need = _need(ctx)
    # the profiler slows the loop, not the workers (other processes): a profiled loop as slow as the workers
    # waits for nothing, while the collector's unprofiled steps wait for them (fixes.input_floor_ns)
    pace = input_floor_ns(ctx)
    hidden = m["pct"] < ctx.options["moderate_pct"] and pace is not None and need > 0
    hidden_pct = 100.0 * (pace - need) / pace if hidden else 0.0
    if m["pct"] < ctx.options["moderate_pct"] and hidden_pct < ctx.options["moderate_pct"]:
        return []
    if hidden:
        period = pace
    ratio = period / need if need else None
    # steps that waited a real share of the step: in the others the prefetch buffer still held batches
    waited = [r.step for r in m["evidence"].per_step if (r.pct or 0) >= ctx.options["moderate_pct"]]
    if hidden:  # every steady unprofiled step waits: the measured mean is the workers' pace
        waited = [r.step for r in m["evidence"].per_step]
    pageable = (
        bool(
            ctx.trace.gpu.filter(
                (pl.col("kind") == "memcpy") & pl.col("name").str.contains(PAGEABLE_RE)
            ).height
        )
        if "kind" in ctx.trace.gpu.columns
        else False
    )
    known = current_workers(ctx)
    nw, nw_from, long_steps = known if known is not None else (0, None, [])
    ev = Evidence(
        **msgspec.structs.asdict(m["evidence"]),
        steps_waited=len(waited),
        steps=n_steps,
        step_period_us=round(period / 1000, 3),
        step_without_wait_us=round(need / 1000, 3),
        period_over_need=round(ratio, 2) if ratio else None,
        pageable_copies=pageable,
        num_workers=nw or None,
        num_workers_from=nw_from,
        long_wait_steps=long_steps,
        host_cpus=host_cpus(ctx),
        loop_threads=loop_threads(ctx),
    )
    if hidden:
        ev.unprofiled = Unprofiled(
            measured_step_us=round(pace / 1000, 3),
            wait_pct=round(hidden_pct, 2),
            note=(f"the trace shows no wait ({m['pct']:.1f} % of the step): the profiler slowed the loop to the "
                  f"workers' pace; unprofiled the loop needs {need / 1e6:.1f} ms a step and the collector measured "
                  f"{pace / 1e6:.1f} ms (the workers' pace, the mean of its steady steps)"),
        )
    pin = "pin_memory=True, " if pageable else ""
    cheaper = (
        "decode once and cache, smaller source images, augmentation on the GPU (torchvision transforms.v2 on CUDA "
        "tensors, NVIDIA DALI)"
        + (", and pin memory with non_blocking=True copies (the copies are pageable)." if pageable else ".")
    )
    tail = "; if the host has fewer free cores, make the per-sample transform cheaper instead: " + cheaper
    if ratio is None:
        fix = FIX
    elif nw:
        per_batch = nw * period
        want = max(nw + 1, math.ceil(nw * ratio))
        ev.per_batch_cpu_us, ev.workers_needed = round(per_batch / 1000, 3), want
        ev.cores_needed = round(per_batch / need + ev.loop_threads, 1)
        free = None if ev.host_cpus is None else max(ev.host_cpus - ev.loop_threads, 1)
        if free is not None and want > free:  # the host cannot run that many at once: at most its free cores
            want = ev.workers_needed = max(free, nw)
        now = {"option": f"now {nw}",
               "counted": f"now {nw}, counted by the collector",
               "trace": f"now {nw}: the trace's steps wait long every {nw} steps, {_steps(long_steps)}",
               "collector": f"now {nw}: the collector's unprofiled steps wait long every {nw} steps, its "
                            f"{_steps(long_steps)}"}[nw_from]
        more = (
            f"About {want} DataLoader workers ({now})"
            if want > nw
            else f"More DataLoader workers do not help ({now}: they already use the free cores)"
        )
        fix = (
            f"{more}: each batch costs about {_dur(per_batch)} of CPU in a "
            f"worker ({nw} workers deliver one every {period / 1e6:.1f} ms), and the step needs {need / 1e6:.1f} ms "
            f"without waiting."
            + (
                f" DataLoader(num_workers={want}, persistent_workers=True, {pin}prefetch_factor=2)" + tail
                if want > nw
                else " Make the per-sample transform cheaper: " + cheaper
            )
            + _cores_text(ev, per_batch, need, free)
        )
    else:
        ev.workers_factor = round(ratio, 2)
        seen = f"its {n_steps} steps" + (" and the collector's unprofiled steps" if ctx.trace.meta.manifest else "")
        fix = (
            f"The workers deliver one batch every {period / 1e6:.1f} ms while the step needs {need / 1e6:.1f} ms "
            f"without waiting: about {ratio:.1f}x the current num_workers (each batch costs a worker about "
            f"num_workers x {period / 1e6:.1f} ms of CPU). DataLoader(num_workers=N, persistent_workers=True, "
            f"{pin}prefetch_factor=2) with N = ceil({ratio:.1f} x current)"
            + tail
            + f" The trace does not say how many workers there are: Kineto records no num_workers, and {seen} "
            "show no long wait recurring every N steps (N workers in phase deliver in bursts of N; out of phase "
            "every step waits alike). Give it with --set loader-workers.num_workers=N for the number."
        )
    severity = None
    if len(waited) < n_steps:
        ev.note = (
            f"the loop waited in {len(waited)} of {n_steps} analysed steps: N workers deliver their batches in bursts, "
            "so the mean step period is their pace only over whole delivery cycles (N steps); over fewer steps the "
            "per-batch time and the worker count are rough estimates, either way"
        )
        # a wait in a minority of the steps and below the high threshold is as consistent with a loader that
        # keeps pace on average (its prefetch buffer absorbing a late batch) as with too few workers
        if 2 * len(waited) < n_steps and m["pct"] < ctx.options["high_pct"]:
            severity = "info"
            ev.note += "; waits in a minority of the steps below high_pct: info"
    # the wait the profiler hid is the cost too: the loop waits (pace - need) a step unprofiled
    cost = max(m["total"], (pace - need) * n_steps) if hidden else m["total"]
    return [
        ctx.finding(
            steps=m["fired"],
            count=m["calls"],
            cost_ns=cost,
            # (the GPU's idle across the waits can outlast them by the launch that follows: at most the wait)
            savings_ns=min(m["idle"], cost),
            severity_pct=max(m["pct"], hidden_pct),
            severity=severity,
            evidence=ev,
            fix=fix,
        )
    ]


def _cores_text(ev: Evidence, per_batch: float, need: float, free: int | None) -> str:
    """The fix text's sentence on the host's cores, which the worker processes share with the loop's threads."""
    k = ev.loop_threads
    if free is None:
        return (
            f" The saving assumes about {math.ceil(ev.cores_needed or 0)} free cores ({per_batch / need:.1f} for the "
            f"workers at one batch every {need / 1e6:.1f} ms, one for each of the loop's {k} threads); the trace "
            "does not record the host's cores (a current `traceview collect` does), and with F free cores for the "
            f"workers the step is at least {_dur(per_batch)} / F."
        )
    if per_batch / need <= free:
        return f" The process may run on {ev.host_cpus} CPUs: enough for the workers and the loop's {k} threads."
    return (
        f" The process may run on {ev.host_cpus} CPUs and the loop's {k} threads take {k}: at most {free} workers "
        f"run at once, a batch every {per_batch / free / 1e6:.1f} ms at best, which the saving is priced at; "
        "beyond that only a cheaper per-sample transform helps."
    )


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: enough workers have every batch ready, so the DataLoader's `__next__`
    time leaves the training thread's path (every host row inside the spans), and the arrivals of the batches the
    traced loop waited for no longer hold it (`input_ready`). The copy to the device stays.
    Where the collector recorded the host's CPUs and the worker count is known, the workers run on at most the
    cores the loop's threads leave free (`cores_floor_ns`): the step is held to their pace at that count."""
    if not applies(ctx):
        return None
    sp = dataloader_spans(ctx.trace)
    if not sp.height:
        return None
    floor = None
    known = current_workers(ctx) if host_cpus(ctx) is not None else None
    if known is not None:
        pace = input_floor_ns(ctx) or ctx.window_ns / max(ctx.steps.height, 1)
        floor = cores_floor_ns(ctx, known[0] * pace, pace)
    return Transform(NAME, host_spans=spans(sp), input_ready=True, floor_ns=floor)
