"""NCCL/RCCL collectives matched across the ranks of one job: waits, transfer time and the straggler.

- Collectives are the `comm` kernels of each rank (`ncclKernel_*`, `ncclDevKernel_*`, RCCL), on the absolute
  clock (`meta.epoch_offset_ns`), restricted to each rank's analysed steps when given.
- Matching (TraceLens `NcclAnalyser`, tb_plugin): by (process group, sequence number) when every kernel
  carries them; else by order — the n-th kernel of the same family (`ncclKernel_AllReduce…`, name up to the
  first `(`) and process group on each rank. Only keys present on every rank are kept.
- Per collective and rank: `wait` = latest start across ranks − own start (time spent waiting for the last
  rank to arrive), `transfer` = the minimum duration across ranks (tb_plugin: the pure transfer time;
  anything above it is synchronisation), `sync` = duration − transfer.
- Straggler: the rank most often last to arrive; ties go to the rank with the lowest total wait (TraceLens:
  the rank that waits least is the one the others wait for; HTA's `get_potential_stragglers` ranks late
  starters of the most variable collective).
"""

from __future__ import annotations

import polars as pl

from ..model import Job, Trace


def collectives(trace: Trace, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """[rank, family, pg, seq, ts, end, dur, stream, name] of one rank's comm kernels (absolute ns)."""
    g = trace.gpu.filter(pl.col("kind") == "comm")
    if steps is not None and steps.height and g.height:
        lo, hi = int(steps["ts"].min()), int(steps["end"].max())
        g = g.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
    off = trace.meta.epoch_offset_ns
    pg = pl.col("pg_name").cast(pl.String) if "pg_name" in g.columns else pl.lit(None, pl.String)
    seq = pl.col("seq_comm").cast(pl.Int64) if "seq_comm" in g.columns else pl.lit(None, pl.Int64)
    return g.sort("ts").select(
        pl.lit(trace.meta.rank if trace.meta.rank is not None else -1).cast(pl.Int64).alias("rank"),
        pl.col("name").str.extract(r"^([^(<]+)").str.strip_chars().alias("family"),
        pg.fill_null("").alias("pg"), seq.alias("seq"),
        (pl.col("ts") + off).alias("ts"), (pl.col("end") + off).alias("end"), "dur", "stream", "name")


def match(job: Job, steps: dict[int, pl.DataFrame] | None = None) -> tuple[pl.DataFrame, str]:
    """Matched collectives [key, rank, ts, end, dur, wait, transfer, sync, last] and the matching method."""
    frames = [collectives(t, (steps or {}).get(k)) for k, t in enumerate(job.traces)]
    frames = [f.with_columns(pl.lit(k).alias("_idx")) for k, f in enumerate(frames)]
    allc = pl.concat(frames) if frames else pl.DataFrame()
    if allc.height == 0:
        return pl.DataFrame(), "none"
    nranks = len(job.traces)
    # ranks with the same rank id (or none) are told apart by file order
    allc = allc.with_columns(rank=pl.when(pl.col("rank") >= 0).then(pl.col("rank")).otherwise(pl.col("_idx")))
    use_seq = allc["seq"].null_count() == 0
    if use_seq:
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
    return m.select("key", "rank", "family", "ts", "end", "dur", "wait", "transfer", "sync", "last").sort("key", "rank"), method


def summary(job: Job, steps: dict[int, pl.DataFrame] | None = None) -> dict:
    """Per-rank waits and the straggler. Plain data."""
    m, method = match(job, steps)
    if m.height == 0:
        return {"collectives": 0, "method": method, "ranks": [], "straggler": None}
    per = (m.group_by("rank").agg(pl.col("wait").sum().alias("total_wait"), pl.col("wait").mean().alias("mean_wait"),
                                  pl.col("last").sum().alias("times_last"),
                                  pl.col("dur").sum().alias("comm_time"), pl.col("sync").sum().alias("sync_time"))
           .sort("rank"))
    first = m.filter(pl.col("wait") == pl.col("wait").max().over("key")).group_by("rank").len()
    per = per.join(first.rename({"len": "times_first"}), on="rank", how="left").with_columns(
        pl.col("times_first").fill_null(0))
    n = m["key"].n_unique()
    strag = per.sort(["times_last", "total_wait", "rank"], descending=[True, False, False]).row(0, named=True)
    tr = m.group_by("key").agg(pl.col("transfer").first())
    return {
        "collectives": n, "method": method,
        "transfer_us": round(int(tr["transfer"].sum()) / 1000, 3),
        "ranks": [{"rank": r["rank"], "total_wait_us": round(r["total_wait"] / 1000, 3),
                   "mean_wait_us": round(r["mean_wait"] / 1000, 3), "times_last": r["times_last"],
                   "times_first": r["times_first"], "comm_us": round(r["comm_time"] / 1000, 3),
                   "sync_us": round(r["sync_time"] / 1000, 3)} for r in per.to_dicts()],
        "straggler": {"rank": strag["rank"], "times_last": strag["times_last"], "of": n,
                      "total_wait_us": round(strag["total_wait"] / 1000, 3),
                      "reason": f"rank {strag['rank']} arrived last at {strag['times_last']} of {n} matched collectives "
                                f"and waited least ({strag['total_wait'] / 1000:,.1f} µs in total): the other ranks "
                                f"wait for it"},
    }
