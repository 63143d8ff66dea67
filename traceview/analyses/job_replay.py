"""The job replay: every rank's replay graph (replay_graph) joined by its matched collectives, and the job's step
periods it gives, unmodified or with one rank's change applied (docs/replay.md, "Jobs").

A collective is a cross-rank edge: its kernel on every rank of the group completes only once the last rank has
arrived. Per matched collective (`comm.match`: process group + sequence number, else order per family) a join
event J >= S(kernel on each rank), and E(kernel on rank r) >= J + (its recorded end − the latest arrival), the
transfer time after the last rank joined; the kernel's own duration edge keeps only that part. Unmodified, the
joint graph reproduces each rank's periods as its own replay does; with a change on one rank (a fix on its rows:
`replay.Transform`) the other ranks' collectives end when the changed rank now arrives, so their waits shrink
or grow with it: the job's step after the change.

A host-side (gloo) collective has no kernel: ProcessGroupGloo runs it on a worker thread of each rank, inside
its recorded `gloo:<op>` range — for CUDA tensors a stream synchronize (the inputs' device-to-host copy done),
the exchange over the network (and the sum) with no recorded call, then the copy back. The exchange is the
longest host gap between two calls of the worker thread inside the range: the call before it (or the range's
start) is the rank's arrival, the call after it (P) the collective's completion on that rank. Per matched
collective (`comm.match`, host source: order per collective name within each step) a join event
J >= arrival on each rank, and S(P) >= J + (P's recorded start − the latest arrival), the exchange after the
last rank joined; P's program-order gap keeps only that (plus the rank's time from the call before to the
range's start), and P's single-rank join to another thread of its rank (`replay_graph._joins`, which read the
wait as a hand-off) is dropped: the cross-rank join explains it. DDP's reducer on the autograd thread, which
waits for the worker, stays joined to the worker's calls after P, so the rank's step follows the exchange.
A range with no call inside (CPU tensors) is not joined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from ..model import Trace
from .overhead import from_replays, gpu_busy_per_step, profiler_transform
from .replay import NEG, Transform, activity_positions, edges, longest, split, step_periods
from .replay_graph import Graph, build


@dataclass(frozen=True)
class JobGraph:
    """The ranks' graphs (in job order) and the collective edges between them (indices into the joint events)."""

    ranks: list[int]
    graphs: list[Graph]
    first: np.ndarray  # first joint event index of each rank's graph
    clock: np.ndarray  # each rank's offset to the job's absolute clock (ns)
    n_events: int  # all ranks' events plus one join event per collective
    src: np.ndarray
    dst: np.ndarray
    off: np.ndarray
    comm_dur: list[dict[int, int]]  # per rank: collective kernel gpu row -> duration kept (transfer after the join)
    collectives: int
    host: bool = False  # joined at host-side (gloo) collectives' exchanges, not at kernels
    #: rank -> the transforms that take the profiler's cost off it (`with_unprofiled`): every replay but the
    #: fidelity's runs the job unprofiled, so a change is priced unprofiled against unprofiled
    unprofiled: Mapping[int, Sequence[Transform]] = field(default_factory=dict)


def _waits_float(g: Graph) -> Graph:
    """The graph with every call that waited for the device floored at the shortest call of its name that did not
    wait (0 when every call of the name waited: the wait edge then gives its end). A rank that waits in a
    collective waits in its blocking calls too (`.item()` after the optimizer): when the collective ends earlier,
    so must they; the single-rank floor (the shortest call of the name) is itself a wait when every call waited."""
    waited = g.a_wait >= 0
    if not waited.any():
        return g
    df = pl.DataFrame({"name": g.a_name, "own": g.a_own, "w": waited, "m": g.a_marker})
    free = df.filter(~pl.col("w") & ~pl.col("m")).group_by("name").agg(pl.col("own").min().alias("f"))
    fl = df.select("name").join(free, on="name", how="left", maintain_order="left")["f"].fill_null(0).to_numpy()
    return replace(g, a_own=np.where(waited, np.minimum(g.a_own, fl), g.a_own))


def _exchange(g: Graph, trace: Trace, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For host rows `ids` (a host-side collective's `gloo:<op>` range each): (P, the anchor after the exchange,
    -1 where the range holds no call; the anchor before it, whose end is the rank's arrival; the time from that
    end to the arrival, ns: the range's start when the call before is outside it)."""
    n = ids.size
    p, pre, off = np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64)
    h = (trace.host.select(pl.col("i").cast(pl.Int64), pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64),
                           pl.col("end").cast(pl.Int64))
         .join(pl.DataFrame({"i": ids, "_k": np.arange(n)}), on="i", how="inner"))
    if h.height == 0 or g.a_ts.size == 0:
        return p, pre, off
    # anchors inside a range with the host time since the previous call of its thread or the range's start,
    # whichever is later: the longest is the exchange
    real = (g.a_prev >= 0) & ~g.a_marker
    a = pl.DataFrame({"tid": g.a_tid, "ts": g.a_ts, "_a": np.arange(g.a_ts.size),
                      "_pe": g.a_end[np.maximum(g.a_prev, 0)]}).filter(pl.Series(real))
    inside = (h.join(a, on="tid", suffix="_a")
              .filter((pl.col("ts_a") >= pl.col("ts")) & (pl.col("ts_a") < pl.col("end")))
              .with_columns(_gap=pl.col("ts_a") - pl.max_horizontal("_pe", "ts"))
              .sort(["_k", "_gap", "_a"], descending=[False, True, False], maintain_order=True).unique("_k", keep="first"))
    k, j = inside["_k"].to_numpy(), inside["_a"].to_numpy()
    p[k], pre[k] = j, g.a_prev[j]
    off[k] = np.maximum(inside["ts"].to_numpy() - g.a_end[g.a_prev[j]], 0)
    return p, pre, off


def build_job(traces: Sequence[Trace], ranks: Sequence[int], m: pl.DataFrame,
              graphs: Sequence[Graph] | None = None, host: bool = False) -> JobGraph | None:
    """The joint graph of a job's ranks (`traces[k]` is rank `ranks[k]`) and its matched collectives `m`
    (`comm.match`: kernels, or with `host` the host-side collectives' ranges). None without matched
    collectives. `graphs`: the ranks' graphs when already built (`sub_job`)."""
    if m.height == 0 or "i" not in m.columns:
        return None
    graphs = list(graphs) if graphs is not None else [_waits_float(build(t)) for t in traces]
    if host:
        return _build_host(traces, ranks, m, graphs)
    sizes = np.array([g.n_events for g in graphs], np.int64)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    keys = m["key"].unique().sort()
    kid = pl.DataFrame({"key": keys, "_j": np.arange(keys.len(), dtype=np.int64)})
    mm = m.join(kid, on="key").with_columns(
        x=(pl.col("end") - pl.col("ts").max().over("key")).clip(lower_bound=0))
    srcs, dsts, offs, comm_dur = [], [], [], []
    join0 = int(sizes.sum())
    for k, (g, r) in enumerate(zip(graphs, ranks, strict=True)):
        rows = mm.filter(pl.col("rank") == r)
        pos = activity_positions(g.d_i, rows["i"].to_numpy().astype(np.int64))
        ok = pos >= 0
        n_a = g.a_ts.size
        s_ev = first[k] + 2 * n_a + 2 * pos[ok]
        j_ev = join0 + rows["_j"].to_numpy()[ok]
        x = rows["x"].to_numpy().astype(np.int64)[ok]
        srcs += [s_ev, j_ev]
        dsts += [j_ev, s_ev + 1]
        offs += [np.zeros(s_ev.size, np.int64), x]
        comm_dur.append(dict(zip(rows["i"].to_numpy()[ok].tolist(), x.tolist(), strict=True)))
    return JobGraph(ranks=list(ranks), graphs=graphs, first=first,
                    clock=np.array([t.meta.epoch_offset_ns for t in traces], np.int64),
                    n_events=join0 + keys.len(), src=np.concatenate(srcs), dst=np.concatenate(dsts),
                    off=np.concatenate(offs), comm_dur=comm_dur, collectives=keys.len())


def _build_host(traces: Sequence[Trace], ranks: Sequence[int], m: pl.DataFrame, graphs: list[Graph]) -> JobGraph | None:
    """`build_job` on host-side collectives: each rank's graph with its exchanges' gaps and joins cut to the
    exchange after the last arrival, and a join event per collective held by every rank."""
    clock = np.array([t.meta.epoch_offset_ns for t in traces], np.int64)
    frames = []
    for k, (t, g, r) in enumerate(zip(traces, graphs, ranks, strict=True)):
        rows = m.filter(pl.col("rank") == r).select("key", pl.col("i").cast(pl.Int64))
        p, pre, off = _exchange(g, t, rows["i"].to_numpy())
        ok = p >= 0
        frames.append(rows.select("key").filter(pl.Series(ok)).with_columns(
            _k=pl.lit(k, pl.Int64), _p=p[ok], _pre=pre[ok], _off=off[ok],
            _arr=g.a_end[pre[ok]] + off[ok] + clock[k], _ts=g.a_ts[p[ok]] + clock[k]))
    # only the collectives found on every rank: a join that misses a rank would hold the others forever
    ex = pl.concat(frames).filter(pl.col("_k").n_unique().over("key") == len(graphs))
    if ex.height == 0:
        return None
    keys = ex["key"].unique().sort()
    ex = (ex.join(pl.DataFrame({"key": keys, "_j": np.arange(keys.len(), dtype=np.int64)}), on="key")
          .with_columns(_x=(pl.col("_ts") - pl.col("_arr").max().over("key")).clip(lower_bound=0)))
    sizes = np.array([g.n_events for g in graphs], np.int64)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    join0 = int(sizes.sum())
    srcs, dsts, offs, out = [], [], [], []
    for k, g in enumerate(graphs):
        e = ex.filter(pl.col("_k") == k)
        j, p, pre, off, x = (e[c].to_numpy() for c in ("_j", "_p", "_pre", "_off", "_x"))
        gap, join, jwake = g.a_gap.astype(np.int64), g.a_join.copy(), g.a_jwake.astype(np.int64)  # (copies, int64)
        gap[p] = np.minimum(g.a_ts[p] - g.a_end[pre], off + x)
        join[p], jwake[p] = -1, 0
        out.append(replace(g, a_gap=gap, a_join=join, a_jwake=jwake))
        srcs += [first[k] + 2 * pre + 1, join0 + j]
        dsts += [join0 + j, first[k] + 2 * p]
        offs += [off, x]
    return JobGraph(ranks=list(ranks), graphs=out, first=first, clock=clock, n_events=join0 + keys.len(),
                    src=np.concatenate(srcs), dst=np.concatenate(dsts), off=np.concatenate(offs),
                    comm_dur=[{} for _ in graphs], collectives=keys.len(), host=True)


def sub_job(jg: JobGraph, traces: Sequence[Trace], keep: Sequence[int], m: pl.DataFrame) -> JobGraph | None:
    """The joint graph of the ranks at positions `keep` only (their graphs reused): the other ranks' arrivals
    are frozen into the collectives' transfer (a kept rank that waited for a dropped one keeps that wait), so a
    change on a kept rank is priced against the ranks that arrive late with it. `steps` follow `keep`."""
    ranks = [jg.ranks[k] for k in keep]
    sub = build_job([traces[k] for k in keep], ranks, m.filter(pl.col("rank").is_in(ranks)),
                    graphs=[jg.graphs[k] for k in keep], host=jg.host)
    return None if sub is None else with_unprofiled(sub, {r: t for r, t in jg.unprofiled.items() if r in ranks})


def with_unprofiled(jg: JobGraph, unprofiled: Mapping[int, Sequence[Transform]]) -> JobGraph:
    """The joint graph replayed with each rank's profiler cost taken off (`unprofiled`: rank -> its pricing
    transforms, `fixes.pricing_transform`): the job's step and every change's saving in unprofiled terms."""
    return replace(jg, unprofiled=dict(unprofiled))


def simulate_job(jg: JobGraph, changes: Mapping[int, Sequence[Transform]] | None = None,
                 profiled: bool = False) -> list[tuple[np.ndarray, ...]]:
    """Each rank's replayed event times (`replay.split`, on its own clock) with `changes` (rank -> transforms),
    unprofiled (`jg.unprofiled`) unless `profiled` (the recording as it ran: the fidelity's)."""
    base, src, dst, off = [np.full(jg.n_events - int(jg.first[-1] + jg.graphs[-1].n_events), NEG, np.int64)], \
        [jg.src], [jg.dst], [jg.off]
    parts = []
    for k, (g, r) in enumerate(zip(jg.graphs, jg.ranks, strict=True)):
        tr = [Transform("collective transfer", gpu_dur=jg.comm_dur[k]),
              *(() if profiled else jg.unprofiled.get(r, ())), *((changes or {}).get(r, ()))]
        b, s, d, o = edges(g, tr)
        parts.append(np.where(b == NEG, NEG, b + jg.clock[k]))
        src.append(s + jg.first[k])
        dst.append(d + jg.first[k])
        off.append(o)
    base = [*parts, *base]
    t = longest(np.concatenate(base), np.concatenate(src), np.concatenate(dst), np.concatenate(off))
    out = []
    for k, g in enumerate(jg.graphs):
        lo = int(jg.first[k])
        local = t[lo:lo + g.n_events]
        out.append(split(g, np.where(local == NEG, NEG, local - jg.clock[k])))
    return out


def job_periods(jg: JobGraph, steps: Sequence[pl.DataFrame],
                changes: Mapping[int, Sequence[Transform]] | None = None, profiled: bool = False) -> np.ndarray:
    """[rank, step] replayed step periods (ns) of the job, each rank over its own `steps` (the same logical
    steps on every rank; a rank with fewer steps is padded with NaN); unprofiled unless `profiled`."""
    times = simulate_job(jg, changes, profiled)
    n = max((s.height for s in steps), default=0)
    out = np.full((len(jg.graphs), n), np.nan)
    for k, (g, st) in enumerate(zip(jg.graphs, steps, strict=True)):
        if st.height:
            out[k, :st.height] = step_periods(g, st, times[k])
    return out


def traced_periods(steps: Sequence[pl.DataFrame]) -> np.ndarray:
    """[rank, step] traced step periods (ns), NaN-padded as `job_periods`."""
    n = max((s.height for s in steps), default=0)
    out = np.full((len(steps), n), np.nan)
    for k, st in enumerate(steps):
        out[k, :st.height] = (st["end"] - st["ts"]).to_numpy()
    return out


def job_step(periods: np.ndarray) -> float:
    """The job's step (ns) from [rank, step] periods: every rank runs the job's step, so the mean over ranks and
    steps (the ranks' periods differ only by where each one's step boundary falls)."""
    return float(np.nanmean(periods)) if periods.size else float("nan")


def noise_ns(periods: np.ndarray) -> float:
    """The step-to-step noise of the job (ns): the sample standard deviation of the job's step (mean over ranks)
    across the steps (0 with one step)."""
    per_step = np.nanmean(periods, axis=0) if periods.size else np.zeros(0)
    return float(np.std(per_step, ddof=1)) if per_step.size > 1 else 0.0


def unprofiled_estimates(jg: JobGraph, traces: Sequence[Trace], steps: Sequence[pl.DataFrame],
                         recorded: np.ndarray | None = None, cost_us: dict[str, float] | None = None
                         ) -> list[np.ndarray]:
    """Each rank's estimated unprofiled step durations (ns, over its `steps`) from the job replay: the joint graph
    replayed as recorded (`recorded`: `job_periods(jg, steps, profiled=True)` when the caller has it) and with
    every rank's fitted profiler cost taken off (`overhead.profiler_transform`, `cost_us` as there: never the
    collector's measurement, which the estimate is checked against), taken to each rank's steps as a single
    trace's estimate is (`overhead.from_replays`). A rank's wait for a peer at a collective is not its own host
    time: in the joint graph it shrinks or grows with the peer's profiler cost, where a rank's own replay keeps it
    as recorded. `jg` is the job with every rank (a sub-job freezes the dropped ranks' profiled arrivals)."""
    rec = recorded if recorded is not None else job_periods(jg, steps, profiled=True)
    est = job_periods(with_unprofiled(jg, {r: [profiler_transform(t, cost_us)]
                                           for r, t in zip(jg.ranks, traces, strict=True)}), steps)
    return [from_replays(t, st, rec[k, :st.height], est[k, :st.height], busy_per_step(t, st, jg.comm_dur[k]))
            for k, (t, st) in enumerate(zip(traces, steps, strict=True))]


def busy_per_step(trace: Trace, steps: pl.DataFrame, kept: Mapping[int, int]) -> np.ndarray | None:
    """GPU busy ns of each step with each collective kernel held to its transfer after the last rank joined
    (`kept`: gpu row -> ns, `JobGraph.comm_dur`): a kernel that waited for a later rank was not busy with work
    of its own while it waited, so that wait is no floor under the rank's unprofiled step (None: no kernel)."""
    if not kept or steps.height == 0:
        return None
    x = pl.DataFrame({"i": np.fromiter(kept.keys(), np.int64), "_x": np.fromiter(kept.values(), np.int64)})
    gpu = (trace.gpu.with_columns(pl.col("i").cast(pl.Int64)).join(x, on="i", how="left", maintain_order="left")
           .with_columns(ts=pl.when(pl.col("_x").is_null()).then(pl.col("ts"))
                         .otherwise(pl.max_horizontal("ts", pl.col("end") - pl.col("_x"))))
           .drop("_x"))
    return gpu_busy_per_step(trace, steps, gpu)


def fidelity(jg: JobGraph, steps: Sequence[pl.DataFrame], base: np.ndarray) -> dict:
    """The joint replay's fit per rank: mean and worst relative error of its replayed step periods."""
    traced = traced_periods(steps)
    err = np.abs(base / np.where(traced > 0, traced, np.nan) - 1)
    rows = [{"rank": r, "traced_us": round(float(np.nanmean(traced[k])) / 1000, 3),
             "replayed_us": round(float(np.nanmean(base[k])) / 1000, 3),
             "mean_error_pct": round(100 * float(np.nanmean(err[k])), 2),
             "max_error_pct": round(100 * float(np.nanmax(err[k])), 2)} for k, r in enumerate(jg.ranks)
            if np.isfinite(err[k]).any()]
    return {"ranks": rows, "max_error_pct": max((r["max_error_pct"] for r in rows), default=None)}
