"""Collectives matched across the ranks of one job: waits, transfer time and the straggler.

- Collectives are the `comm` kernels of each rank (`ncclKernel_*`, `ncclDevKernel_*`, RCCL), on the absolute
  clock (`meta.epoch_offset_ns`), restricted to each rank's analysed steps when given. Kernels whose launch
  call is missing (enqueued before the profiler started recording; the GPU runs behind the host, by a
  different number of kernels on each rank) are left out when the trace links the others to their launch.
- A job without any comm kernel whose ranks are CPU-only or use gloo (`distributedInfo.backend`) is matched
  on its **host-side** collectives instead (`source`): the `gloo:<op>` user annotations that ProcessGroupGloo's
  worker threads record around the execution of each collective (start = the work starts on this rank,
  end = it completed, so the wait for a late rank is inside it), else the `c10d::<op>` cpu_ops that enqueue
  them on the calling thread (start times only; their duration is the enqueue). They carry no process group
  or sequence number, so they are matched by order per collective name within each `ProfilerStep#N` (the
  step numbers of one job's ranks are the same logical steps).
- Matching (TraceLens `NcclAnalyser`, tb_plugin): by (process group, sequence number) when every kernel
  carries them; else by order — the n-th kernel of the same family (`ncclKernel_AllReduce…`, name up to the
  first `(`) and process group on each rank. Only keys present on every rank are kept.
- Per collective and rank: `wait` = latest start across ranks − own start (time spent waiting for the last
  rank to arrive), `transfer` = the minimum duration across ranks (tb_plugin: the pure transfer time;
  anything above it is synchronisation), `sync` = duration − transfer.
- Wait per step (`wait_per_step_us`, `wait_by_step_us`): per rank and `ProfilerStep#N`, the union of the wait
  intervals of the step's collectives (the sum when they run one after the other, as DDP's buckets do on
  one stream; concurrent collectives are not counted twice), its mean and median over the steps.
  `total_wait_us` stays the plain sum.
- Exposed wait per step (`exposed_wait_per_step_us`, …): the part of that union when the rank's GPU ran no
  other work (compute, memcpy, memset). NCCL kernels run on their own stream, so a collective issued early
  (DDP's first gradient buckets, FSDP's prefetched all-gathers) can wait for a late rank while the waiting
  rank still computes: that wait is hidden and costs nothing; only the exposed part is time the rank loses to
  the straggler. For host-side collectives it equals the wait (their worker threads wait off the main thread,
  whose work is not GPU time).
- Straggler: the rank most often last to arrive; ties go to the rank with the lowest total wait (TraceLens:
  the rank that waits least is the one the others wait for; HTA's `get_potential_stragglers` ranks late
  starters of the most variable collective).
"""

from __future__ import annotations

import polars as pl

from ..model import Job, Trace
from ..units import us
from .timeline import busy_per_window, gpu_work

#: host-side collectives when a job has no comm kernels, best first: (source, category, name prefix)
HOST_SOURCES = (("gloo_annotation", "user_annotation", "gloo:"), ("c10d_op", "cpu_op", "c10d::"))
#: c10d ops that are not collectives (waits, queries) and are never matched
_C10D_SKIP = r"^c10d::(wait|_wait|monitored_barrier_|allreduce_coalesced_wait)"


def rank_id(trace: Trace, k: int) -> int:
    """The rank the k-th trace of a job stands for: its `distributedInfo` rank, else its position in the job."""
    r = trace.meta.rank
    return r if r is not None and r >= 0 else k


def _with_step(frame: pl.DataFrame, steps: pl.DataFrame | None) -> pl.DataFrame:
    """Add `step`: the analysed ProfilerStep#N whose window a collective starts in (-1 without steps)."""
    if steps is None or steps.height == 0 or frame.height == 0:
        return frame.with_columns(pl.lit(-1, pl.Int64).alias("step"))
    w = steps.select(pl.col("ts").alias("_sts"), pl.col("step").cast(pl.Int64)).sort("_sts")
    out = frame.sort("ts", maintain_order=True).join_asof(w, left_on="ts", right_on="_sts", strategy="backward")
    return out.drop("_sts").with_columns(pl.col("step").fill_null(-1))


def collectives(trace: Trace, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """[rank, family, pg, seq, ts, end, dur, stream, name, step] of one rank's comm kernels (absolute ns)."""
    g = trace.gpu.filter(pl.col("kind") == "comm")
    if "launch_ts" in g.columns and g["launch_ts"].null_count() < g.height:
        # Kernels whose launch call is not in the trace were enqueued before recording started (the GPU runs
        # behind the host): each rank has a different number of them, so they would shift order matching.
        g = g.filter(pl.col("launch_ts").is_not_null())
    if steps is not None and steps.height and g.height:
        lo, hi = int(steps["ts"].min()), int(steps["end"].max())
        g = g.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
    off = trace.meta.epoch_offset_ns
    pg = pl.col("pg_name").cast(pl.String) if "pg_name" in g.columns else pl.lit(None, pl.String)
    seq = pl.col("seq_comm").cast(pl.Int64) if "seq_comm" in g.columns else pl.lit(None, pl.Int64)
    out = g.sort("ts").select(
        pl.lit(trace.meta.rank if trace.meta.rank is not None else -1).cast(pl.Int64).alias("rank"),
        pl.col("name").str.extract(r"^([^(<]+)").str.strip_chars().alias("family"),
        pg.fill_null("").alias("pg"), seq.alias("seq"),
        (pl.col("ts") + off).alias("ts"), (pl.col("end") + off).alias("end"), "dur", "stream", "name",
        pl.col("i").cast(pl.Int64), pl.col("op").cast(pl.Int64))
    return _with_step(out, None if steps is None else steps.with_columns(pl.col("ts") + off))


def _host_rows(trace: Trace, source: str) -> pl.DataFrame:
    cat, prefix = {s: (c, p) for s, c, p in HOST_SOURCES}[source]
    return trace.host.filter((pl.col("cat") == cat) & pl.col("name").str.starts_with(prefix)
                             & ~pl.col("name").str.contains(_C10D_SKIP))


def host_collectives(trace: Trace, steps: pl.DataFrame | None = None, source: str = "gloo_annotation") -> pl.DataFrame:
    """Like `collectives`, from host events (`source` of `HOST_SOURCES`); `stream` is the host thread id."""
    h = _host_rows(trace, source)
    if steps is not None and steps.height and h.height:
        lo, hi = int(steps["ts"].min()), int(steps["end"].max())
        h = h.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
    off = trace.meta.epoch_offset_ns
    pg = pl.col("pg_name").cast(pl.String) if "pg_name" in h.columns else pl.lit(None, pl.String)
    out = h.sort("ts").select(
        pl.lit(trace.meta.rank if trace.meta.rank is not None else -1).cast(pl.Int64).alias("rank"),
        pl.col("name").alias("family"), pg.fill_null("").alias("pg"), pl.lit(None, pl.Int64).alias("seq"),
        (pl.col("ts") + off).alias("ts"), (pl.col("end") + off).alias("end"), "dur",
        pl.col("tid").alias("stream"), "name", pl.col("i").cast(pl.Int64), pl.lit(None, pl.Int64).alias("op"))
    return _with_step(out, None if steps is None else steps.with_columns(pl.col("ts") + off))


def job_source(job: Job) -> str:
    """Which collectives a job is matched on: `kernel` (NCCL/RCCL GPU kernels, whenever any rank has one),
    else the first host source of `HOST_SOURCES` that every rank has, for jobs whose ranks are CPU-only or
    use gloo; else `none`."""
    if any(t.gpu.height and (t.gpu["kind"] == "comm").any() for t in job.traces):
        return "kernel"
    if not job.traces or not all(not t.has_gpu or str(t.meta.distributed.get("backend", "")).startswith("gloo")
                                 for t in job.traces):
        return "none"
    for source, _, _ in HOST_SOURCES:
        if all(_host_rows(t, source).height for t in job.traces):
            return source
    return "none"


def job_backend(job: Job) -> str | None:
    """The process-group backend the ranks report (`distributedInfo.backend`), if any."""
    b = {str(t.meta.distributed.get("backend")) for t in job.traces if t.meta.distributed.get("backend")}
    return ",".join(sorted(b)) or None


def match(job: Job, steps: dict[int, pl.DataFrame] | None = None) -> tuple[pl.DataFrame, str]:
    """Matched collectives [key, rank, family, step, ts, end, dur, wait, transfer, sync, last, i, op] and the
    matching method (`i`: the kernel's gpu row, or the host row of a host-side collective; `op`: the kernel's
    launching op, `record_param_comms` where Kineto records it). Kernels when any rank has comm kernels, else host-side collectives (`job_source`)."""
    source = job_source(job)
    if source == "none":
        return pl.DataFrame(), "none"
    if source == "kernel":
        frames = [collectives(t, (steps or {}).get(k)) for k, t in enumerate(job.traces)]
    else:
        frames = [host_collectives(t, (steps or {}).get(k), source) for k, t in enumerate(job.traces)]
    frames = [f.with_columns(pl.lit(rank_id(t, k), pl.Int64).alias("rank"))
              for k, (t, f) in enumerate(zip(job.traces, frames, strict=True))]
    allc = pl.concat(frames) if frames else pl.DataFrame()
    if allc.height == 0:
        return pl.DataFrame(), "none"
    nranks = len(job.traces)
    use_seq = allc["seq"].null_count() == 0
    if source != "kernel":
        # host events: no process group / sequence number; the n-th call of a name within the same step
        allc = allc.with_columns(key=pl.format("{}|{}@{}#{}", "pg", "family", "step",
                                               pl.int_range(pl.len()).over("rank", "pg", "family", "step")))
        method = "order per (collective name, step)"
    elif use_seq:
        allc = allc.with_columns(key=pl.format("{}#{}", "pg", "seq"))
        method = "process group + sequence number"
    else:
        allc = allc.with_columns(key=pl.format("{}|{}#{}", "pg", "family",
                                               pl.int_range(pl.len()).over("rank", "pg", "family")))
        method = "order per (process group, kernel family)"
    m = allc.filter(pl.col("rank").n_unique().over("key") == nranks)
    m = m.unique(["key", "rank"], keep="first")
    m = m.with_columns(latest=pl.col("ts").max().over("key"), transfer=pl.col("dur").min().over("key"))
    m = m.with_columns(wait=pl.col("latest") - pl.col("ts"), sync=pl.col("dur") - pl.col("transfer"),
                       last=pl.col("ts") == pl.col("latest"))
    return (m.select("key", "rank", "family", "step", "ts", "end", "dur", "wait", "transfer", "sync", "last", "i", "op")
            .sort("key", "rank", maintain_order=True), method)


def wait_per_step(m: pl.DataFrame, busy: pl.DataFrame | None = None) -> pl.DataFrame:
    """[rank, step, wait, exposed]: the wall time each rank spent waiting for the last rank in each analysed step —
    the union of its matched collectives' wait intervals [own start, latest start). With one collective at a
    time that is the sum of their waits (DDP's buckets of one step add up); collectives that wait at the same
    time (gloo's two worker threads, NCCL on several streams) are not counted twice.

    `exposed` is the part of that wait when the rank's GPU ran nothing else: `busy` holds each rank's own
    non-communication GPU work [rank, ts, end] (absolute ns). A collective issued early on its own stream (DDP's
    first buckets, FSDP's prefetched all-gathers) waits while the rank's compute stream is still busy: that
    wait costs the rank nothing. Without `busy` (host-side collectives) `exposed` equals `wait`."""
    w = (m.filter((pl.col("step") >= 0) & (pl.col("wait") > 0))
         .select("rank", "step", pl.col("ts").alias("s"), (pl.col("ts") + pl.col("wait")).alias("e"))
         .sort("rank", "step", "s", maintain_order=True))
    w = w.with_columns(island=(pl.col("s") > pl.col("e").cum_max().shift(1)).fill_null(True).cum_sum()
                       .over("rank", "step"))
    isl = w.group_by("rank", "step", "island").agg(pl.col("s").min().alias("ts"), pl.col("e").max().alias("end"))
    isl = isl.with_columns(wait=pl.col("end") - pl.col("ts"), overlap=pl.lit(0, pl.Int64))
    if busy is not None and busy.height and isl.height:
        win = isl.with_row_index("_win").with_columns(pl.col("_win").cast(pl.Int64))
        # each window against its own rank's GPU work only (linear in ranks)
        ov = busy_per_window(busy.rename({"rank": "device"}).with_columns(kind=pl.lit("compute")),
                             win.select("_win", pl.col("rank").alias("device"), "ts", "end"), win="_win")
        isl = win.join(ov.select("_win", "busy"), on="_win", how="left").with_columns(
            overlap=pl.col("busy").fill_null(0)).drop("_win", "busy")
    per = isl.group_by("rank", "step").agg(pl.col("wait").sum(), (pl.col("wait") - pl.col("overlap")).sum()
                                           .alias("exposed"))
    steps = m.filter(pl.col("step") >= 0).select("rank", "step").unique()
    return (steps.join(per, on=["rank", "step"], how="left")
            .with_columns(pl.col("wait").fill_null(0), pl.col("exposed").fill_null(0)).sort("rank", "step", maintain_order=True))


def compute_busy(job: Job) -> pl.DataFrame:
    """[rank, ts, end]: every rank's own GPU work other than communication, on the absolute clock."""
    frames = []
    for k, t in enumerate(job.traces):
        g = gpu_work(t.gpu).filter(pl.col("kind") != "comm") if t.gpu.height else t.gpu
        if g.height:
            off = t.meta.epoch_offset_ns
            frames.append(g.select(pl.lit(rank_id(t, k), pl.Int64).alias("rank"), (pl.col("ts") + off).alias("ts"),
                                   (pl.col("end") + off).alias("end")))
    return pl.concat(frames) if frames else pl.DataFrame(schema={"rank": pl.Int64, "ts": pl.Int64, "end": pl.Int64})


def summary(job: Job, steps: dict[int, pl.DataFrame] | None = None,
            matched: tuple[pl.DataFrame, str] | None = None) -> dict:
    """Per-rank waits and the straggler. Plain data. `matched`: `match(job, steps)` when the caller has it."""
    m, method = matched if matched is not None else match(job, steps)
    source = job_source(job)
    head = {"source": source if m.height else "none", "backend": job_backend(job)}
    if m.height == 0:
        return {"collectives": 0, "method": method, **head, "steps": 0, "ranks": [], "straggler": None}
    per = (m.group_by("rank").agg(pl.col("wait").sum().alias("total_wait"), pl.col("wait").mean().alias("mean_wait"),
                                  pl.col("last").sum().alias("times_last"),
                                  pl.col("dur").sum().alias("comm_time"), pl.col("sync").sum().alias("sync_time"))
           .sort("rank"))
    first = m.filter(pl.col("wait") == pl.col("wait").max().over("key")).group_by("rank").len()
    per = per.join(first.rename({"len": "times_first"}), on="rank", how="left").with_columns(
        pl.col("times_first").fill_null(0))
    n = m["key"].n_unique()
    nsteps = m.filter(pl.col("step") >= 0)["step"].n_unique()
    ws = wait_per_step(m, compute_busy(job) if source == "kernel" else None)
    # per rank: the sum (-> mean per step) and the median over its steps, of the wait and the exposed wait
    agg = {a["rank"]: a for a in ws.group_by("rank").agg(
        pl.col("wait").sum().alias("wait_sum"), pl.col("wait").median().alias("wait_med"),
        pl.col("exposed").sum().alias("exp_sum"), pl.col("exposed").median().alias("exp_med")).iter_rows(named=True)}

    def by_step_of(col: str) -> dict:
        g = ws.sort("rank", "step", maintain_order=True).group_by("rank", maintain_order=True).agg("step", col)
        return {r: {str(k): us(w) for k, w in zip(ks, vs, strict=True)} for r, ks, vs in g.rows()}

    by_step, exp_by_step = by_step_of("wait"), by_step_of("exposed")
    strag = per.sort(["times_last", "total_wait", "rank"], descending=[True, False, False], maintain_order=True).row(0, named=True)
    tr = m.group_by("key").agg(pl.col("transfer").first())
    return {
        "collectives": n, "method": method, **head, "steps": nsteps,
        "transfer_us": us(int(tr["transfer"].sum())),
        "ranks": [{"rank": r["rank"], "total_wait_us": us(r["total_wait"]),
                   "mean_wait_us": us(r["mean_wait"]), "times_last": r["times_last"],
                   "times_first": r["times_first"], "comm_us": us(r["comm_time"]),
                   "sync_us": us(r["sync_time"]),
                   "wait_per_step_us": round(agg[r["rank"]]["wait_sum"] / 1000 / nsteps, 3) if nsteps else None,
                   "median_wait_per_step_us": us(agg[r["rank"]]["wait_med"]) if nsteps else None,
                   "wait_by_step_us": by_step.get(r["rank"], {}),
                   "exposed_wait_per_step_us": round(agg[r["rank"]]["exp_sum"] / 1000 / nsteps, 3) if nsteps else None,
                   "median_exposed_wait_per_step_us": us(agg[r["rank"]]["exp_med"]) if nsteps else None,
                   "exposed_wait_by_step_us": exp_by_step.get(r["rank"], {})} for r in per.to_dicts()],
        "straggler": {"rank": strag["rank"], "times_last": strag["times_last"], "of": n,
                      "total_wait_us": us(strag["total_wait"]),
                      "reason": f"rank {strag['rank']} arrived last at {strag['times_last']} of {n} matched collectives "
                                f"and waited least ({strag['total_wait'] / 1000:,.1f} µs in total): the other ranks "
                                f"wait for it"},
    }
