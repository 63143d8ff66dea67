"""Each rank's own changes priced on the job replay (`jobs[].replay.changes`): per rank, its findings' fixes and
"run as fast as the other ranks" per class (that rank's device or host work of one class brought to the median
of the other ranks'), and the job's step after each change. The straggler is the rank whose change saves the
job most — not necessarily the one most often last to arrive (docs/multi-rank.md, "The job's answer").

Per-rank work is columnar and O(that rank's events): per-class, per-kernel-name and per-host-label times per
step. Only the ranks that can shorten the job are replayed (`MAX_CANDIDATES`, by the time by which each arrived
after every other rank at the collectives it was last at), each in a sub-job of the `SUB_JOB` latest-arriving
ranks (`job_replay.sub_job`): the ranks that never arrive late only wait, and freezing them changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from traceview.rules import BY_NAME

from ..analyses import job_replay
from ..analyses.breakdown import DATALOADER_RE
from ..analyses.classify import sync_calls
from ..analyses.comm import rank_id
from ..analyses.fixes import transforms
from ..analyses.intervals import priority_sweep
from ..analyses.replay import Transform
from ..model import Trace
from ..ruleapi import RuleContext
from . import straggler as sg
from .straggler_fix import _untraced_spans

#: ranks whose changes are replayed (the latest arrivers), and ranks kept in each change's replay
MAX_CANDIDATES = 4
SUB_JOB = 8
#: findings' fixes replayed per candidate rank (its top findings by saving)
TOP_FINDINGS = 2
#: the classes a "run as fast as the others" change is made for; the device classes are one change (kernels
#: by name), reported under the larger of the two
DEVICE = ("gpu_compute", "gpu_memory")
CHANGE_CLASSES = ("device", "cpu_launch", "host_sync", "input")
GPU_KINDS = ["compute", "memcpy", "memset"]


@dataclass(frozen=True)
class Change:
    """One change on one rank: where it comes from (`median`: as fast as the other ranks; `finding`: a rule's
    fix), its classifier class and the replay transformation."""

    rank: int
    source: str
    cls: str
    name: str
    transform: Transform
    rule: str | None = None
    excess_us: float | None = (
        None  # the class's excess per step over the other ranks' median (median changes)
    )


@dataclass(frozen=True)
class RankTimes:
    """One rank's summary: per-step times by classifier class, by kernel name and by host label (µs)."""

    cls: dict[str, float]
    kernels: pl.DataFrame  # [name, us]
    host: dict[str, float]


def _host_windows(t: Trace, st: pl.DataFrame) -> pl.DataFrame:
    """[step, ts, end]: the host span of each analysed step (local ns)."""
    return (
        t.steps.filter(pl.col("step").is_in(st["step"].implode()))
        .select(pl.col("step").cast(pl.Int64), pl.col("cpu_ts").alias("ts"), pl.col("cpu_end").alias("end"))
        .drop_nulls()
        .sort("ts")
    )


def rank_times(t: Trace, st: pl.DataFrame, part: pl.DataFrame | None) -> RankTimes | None:
    """Its times per analysed step (None: no GPU or no steps)."""
    n = st.height
    if not n or not t.has_gpu or part is None or part.height == 0:
        return None
    c = part.group_by("cls").agg(((pl.col("end") - pl.col("ts")).sum() / n / 1000).alias("us"))
    lo, hi = int(st["ts"].min()), int(st["end"].max())
    k = (
        t.gpu.select("name", "kind", "ts", "dur")
        .filter(pl.col("kind").is_in(GPU_KINDS) & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
        .group_by("name")
        .agg((pl.col("dur").sum() / n / 1000).alias("us"))
    )
    w = _host_windows(t, st)
    host = (
        priority_sweep(sg._host_intervals(t), sg.HOST_LABELS, w, other="untraced")
        if w.height
        else pl.DataFrame()
    )
    h = host.group_by("label").agg((pl.col("dur").sum() / n / 1000).alias("us")) if host.height else host
    return RankTimes(
        cls=dict(zip(c["cls"].to_list(), c["us"].to_list(), strict=True)),
        kernels=k,
        host=dict(zip(h["label"].to_list(), h["us"].to_list(), strict=True)) if h.height else {},
    )


def _median(vals: list[float]) -> float:
    return float(np.median(vals)) if vals else 0.0


def _others(times: list[RankTimes | None], k: int, get) -> float:
    return _median([get(x) for j, x in enumerate(times) if j != k and x is not None])


def candidates(m: pl.DataFrame, ranks: list[int], always: int | None) -> tuple[list[int], list[int]]:
    """(candidate rank positions, sub-job rank positions): the ranks by the time they arrived after every other
    rank, summed over the collectives they were last at (what fixing that rank alone can give back at most),
    and the sub-job: those and the next latest arrivers (summed lateness over the median arrival)."""
    pos = {r: k for k, r in enumerate(ranks)}
    mm = m.filter(pl.col("step") >= 0) if "step" in m.columns else m
    srt = mm.sort(["key", "ts"], descending=[False, True], maintain_order=True)
    gap = (
        srt.group_by("key", maintain_order=True)
        .agg(pl.col("rank").first(), (pl.col("ts").first() - pl.col("ts").slice(1, 1).first()).alias("gap"))
        .filter(pl.col("gap") > 0)
        .group_by("rank")
        .agg(pl.col("gap").sum())
        .sort(["gap", "rank"], descending=[True, False], maintain_order=True)
    )
    cand = [pos[r] for r in gap["rank"].to_list()[:MAX_CANDIDATES] if r in pos]
    if always is not None and always in pos and pos[always] not in cand:
        cand.append(pos[always])
    late = (
        mm.with_columns(late=(pl.col("ts") - pl.col("ts").median().over("key")).clip(lower_bound=0))
        .group_by("rank")
        .agg(pl.col("late").sum())
        .sort(["late", "rank"], descending=[True, False], maintain_order=True)
    )
    sub = list(cand)
    for r in late["rank"].to_list():
        if len(sub) >= max(SUB_JOB, len(cand)):
            break
        if r in pos and pos[r] not in sub:
            sub.append(pos[r])
    return cand, sorted(sub)


def _device(t: Trace, st: pl.DataFrame, own: pl.DataFrame, med: pl.DataFrame) -> dict[int, int]:
    """Kernel durations scaled, name by name, to the other ranks' median time per step of that name."""
    f = (
        own.join(med, on="name", how="left")
        .with_columns(pl.col("med").fill_null(0.0))
        .filter(pl.col("us") > pl.col("med"))
        .select("name", (pl.col("med") / pl.col("us")).alias("f"))
    )
    if f.height == 0:
        return {}
    lo, hi = int(st["ts"].min()), int(st["end"].max())
    g = (
        t.gpu.select("i", "name", "kind", "ts", "dur")
        .filter(pl.col("kind").is_in(GPU_KINDS) & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
        .join(f, on="name")
    )
    new = (g["dur"].cast(pl.Float64) * g["f"]).round().cast(pl.Int64)
    return dict(zip(g["i"].cast(pl.Int64).to_list(), new.to_list(), strict=True))


def _longest_first(df: pl.DataFrame, need_ns: float) -> pl.DataFrame:
    """Rows [ts, end, ...] longest first until `need_ns` of them."""
    return (
        df.with_columns(_len=pl.col("end") - pl.col("ts"))
        .sort("_len", descending=True)
        .with_columns(_before=pl.col("_len").cum_sum() - pl.col("_len"))
        .filter(pl.col("_before") < need_ns)
    )


def median_changes(
    t: Trace, st: pl.DataFrame, k: int, rank: int, times: list[RankTimes | None]
) -> list[Change]:
    """Rank `k`'s "as fast as the other ranks" changes, one per class it spends more on than their median."""
    me = times[k]
    if me is None:
        return []
    n = st.height
    out: list[Change] = []
    for group in CHANGE_CLASSES:
        classes = DEVICE if group == "device" else (group,)
        x = {c: me.cls.get(c, 0.0) - _others(times, k, lambda r, c=c: r.cls.get(c, 0.0)) for c in classes}
        cls = max(x, key=x.get)
        excess = sum(x.values())
        if excess <= 0:
            continue
        name = f"rank {rank}: {cls} as fast as the other ranks"
        tf = None
        if group == "device":
            others = [r.kernels for j, r in enumerate(times) if j != k and r is not None]
            if not others:
                continue
            allk = pl.concat([o.with_columns(pl.lit(j).alias("r")) for j, o in enumerate(others)])
            names = allk.select("name").unique()
            grid = names.join(pl.DataFrame({"r": list(range(len(others)))}), how="cross")
            med = (
                grid.join(allk, on=["name", "r"], how="left")
                .with_columns(pl.col("us").fill_null(0.0))
                .group_by("name")
                .agg(pl.col("us").median().alias("med"))
            )
            gd = _device(t, st, me.kernels, med)
            tf = Transform(name, gpu_dur=gd) if gd else None
        elif group == "cpu_launch":
            hx = {
                c: me.host.get(c, 0.0) - _others(times, k, lambda r, c=c: r.host.get(c, 0.0))
                for c in ("host_ops", *sg.HOST_CODE)
            }
            code = sum(max(hx[c], 0.0) for c in sg.HOST_CODE)
            w = _host_windows(t, st).rename({"ts": "lo", "end": "hi"})
            if code >= max(hx["host_ops"], 0.0) and code > 0:
                sp = _untraced_spans(t, w, 1000 * code)  # (per step)
                tf = Transform(name, host_spans=sp) if sp else None
            elif hx["host_ops"] > 0 and w.height:
                span = float((w["hi"] - w["lo"]).mean()) / 1000
                share = float(np.clip(hx["host_ops"] / span, 0.0, 0.9)) if span > 0 else 0.0
                tf = Transform(name, host_share=share) if share > 0 else None
        elif group == "host_sync":
            w = _host_windows(t, st)
            sc = (
                sync_calls(t)
                .select("i", "ts", "end")
                .filter((pl.col("ts") >= w["ts"].min()) & (pl.col("ts") < w["end"].max()))
                if w.height
                else None
            )
            if sc is not None and sc.height:
                sc = _longest_first(sc, 1000 * excess * n)
                tf = Transform(name, no_wait=sc["i"].cast(pl.Int64).to_list()) if sc.height else None
        elif group == "input":
            w = _host_windows(t, st)
            h = (
                sg._program_host(t)
                .filter(pl.col("name").str.contains(DATALOADER_RE))
                .select("tid", "ts", "end")
            )
            if w.height and h.height:
                h = _longest_first(
                    h.filter((pl.col("ts") >= w["ts"].min()) & (pl.col("ts") < w["end"].max())),
                    1000 * excess * n,
                )
                tf = (
                    Transform(name, host_spans=[tuple(r) for r in h.select("tid", "ts", "end").rows()])
                    if h.height
                    else None
                )
        if tf is not None:
            out.append(Change(rank, "median", cls, name, tf, excess_us=round(excess, 3)))
    return out


def finding_changes(t: Trace, st: pl.DataFrame, rank: int, entry: dict, options) -> list[Change]:
    """Rank's top findings' fixes (replayable ones; not communication: a wait is not the rank's own work)."""
    fs = sorted(
        (
            f
            for f in entry.get("findings") or []
            if f.get("savings_us", 0) > 0
            and f["rule"] in BY_NAME
            and getattr(BY_NAME[f["rule"]], "CLASS", None) not in sg.WAIT_CLASSES
        ),
        key=lambda f: -f["savings_us"],
    )
    if not fs or not t.has_gpu:
        return []
    ctx, _ = RuleContext.prepare(t, st)
    out: list[Change] = []
    for f in fs:
        if len(out) >= TOP_FINDINGS or any(c.rule == f["rule"] for c in out):
            continue
        tf = transforms(ctx, options, [BY_NAME[f["rule"]]]).get(f["rule"])
        if tf is not None:
            out.append(
                Change(
                    rank,
                    "finding",
                    BY_NAME[f["rule"]].CLASS,
                    f"rank {rank}: {f['rule']} fix",
                    tf,
                    rule=f["rule"],
                )
            )
    return out


def saving_ns(base: np.ndarray, changed: np.ndarray) -> float:
    """The job's saving per step (ns): the median over the steps of the job step (mean over ranks) before minus
    after the change (the median: the first replayed step starts from the recording's own start)."""
    d = np.nanmean(base, axis=0) - np.nanmean(changed, axis=0)
    d = d[np.isfinite(d)]
    return float(np.median(d)) if d.size else 0.0


def price(
    jg: job_replay.JobGraph,
    traces: list[Trace],
    steps: list[pl.DataFrame],
    m: pl.DataFrame,
    parts: list[pl.DataFrame | None],
    entries: list[dict],
    options,
    last: int | None,
) -> tuple[list[dict[str, Any]], Change | None, float]:
    """(rows [{rank, source, class, change, rule, own, excess_us_per_step, job_saving_us_per_step}] best first,
    the rank's own change (`own`) that saves the job most, its saving ns)."""
    ranks = [rank_id(t, k) for k, t in enumerate(traces)]
    cand, sub = candidates(m, ranks, last)
    if not cand:
        return [], None, 0.0
    times = [rank_times(t, st, p) for t, st, p in zip(traces, steps, parts, strict=True)]
    if len(sub) < len(ranks) and jg.ranks == [ranks[k] for k in sub]:  # a large job's replay is this sub-job
        sjg, sst = jg, [steps[k] for k in sub]
    elif len(sub) < len(ranks):
        sjg = job_replay.sub_job(jg, traces, sub, m)
        sst = [steps[k] for k in sub]
    else:
        sjg, sst = jg, steps
    if sjg is None:
        return [], None, 0.0
    base = job_replay.job_periods(sjg, sst)
    has = [{f["rule"] for f in e.get("findings") or [] if f.get("savings_us", 0) > 0} for e in entries]
    rows, best, best_ns = [], None, 0.0
    for k in cand:
        changes = median_changes(traces[k], steps[k], k, ranks[k], times) + finding_changes(
            traces[k], steps[k], ranks[k], entries[k], options
        )
        for c in changes:
            ns = max(saving_ns(base, job_replay.job_periods(sjg, sst, {c.rank: [c.transform]})), 0.0)
            # its own: a class it spends more on than the others, or a finding most other ranks do not have (a
            # fix every rank needs is every rank's, `projection.all_top_fixes`, not what makes this one late)
            others = [h for j, h in enumerate(has) if j != k]
            own = c.source == "median" or 2 * sum(c.rule in h for h in others) < len(others)
            rows.append(
                {
                    "rank": c.rank,
                    "source": c.source,
                    "class": c.cls,
                    "change": c.name,
                    "rule": c.rule,
                    "own": own,
                    "excess_us_per_step": c.excess_us,
                    "job_saving_us_per_step": round(ns / 1000, 3),
                    "_c": c,
                }
            )
            if own and (best is None or ns > best_ns):
                best, best_ns = c, ns
    rows.sort(key=lambda r: (-r["job_saving_us_per_step"], r["rank"], r["change"]))
    for r in rows:
        r.pop("_c")
    return rows, best, best_ns
