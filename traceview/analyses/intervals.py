"""Interval algebra on polars frames with Int64 `ts`/`end` columns (ns)."""

from __future__ import annotations

import polars as pl


def merge(df: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """Union of [ts, end) intervals per group: HTA's vectorised merge, in polars."""
    by = by or []
    if df.height == 0:
        return df.select(*by, "ts", "end")
    key = by or None
    srt = df.select(*by, "ts", "end").sort([*by, "ts"])
    prev_end = pl.col("end").shift().cum_max()
    if key:
        prev_end = prev_end.over(key)
    run = (pl.col("ts") > prev_end).fill_null(True).cum_sum()
    if key:
        run = run.over(key)
    return (srt.with_columns(_run=run).group_by([*by, "_run"], maintain_order=True)
            .agg(pl.col("ts").min(), pl.col("end").max()).drop("_run"))


def clip(df: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """Intervals cut to [lo, hi); empty ones dropped."""
    return (df.with_columns(ts=pl.col("ts").clip(lo, hi), end=pl.col("end").clip(lo, hi))
            .filter(pl.col("end") > pl.col("ts")))


def total(df: pl.DataFrame) -> int:
    """Length of the union of the intervals."""
    if df.height == 0:
        return 0
    m = merge(df)
    return int((m["end"] - m["ts"]).sum())


def per_window(intervals: pl.DataFrame, windows: pl.DataFrame, win: str = "step") -> pl.DataFrame:
    """Length of the union of `intervals` inside each window [ts, end) -> [win, dur]."""
    m = merge(intervals)
    out = (windows.select(win, pl.col("ts").alias("_wts"), pl.col("end").alias("_wend"))
           .join(m, how="cross")
           .with_columns(_d=(pl.min_horizontal("end", "_wend") - pl.max_horizontal("ts", "_wts")).clip(lower_bound=0))
           .group_by(win).agg(pl.col("_d").sum().alias("dur")))
    return windows.select(win).join(out, on=win, how="left").with_columns(pl.col("dur").fill_null(0))


def priority_sweep(intervals: pl.DataFrame, priorities: list[str], windows: pl.DataFrame,
                   other: str = "other", win: str = "step") -> pl.DataFrame:
    """Give every instant of each window exactly one label: the highest-priority label active then.

    `intervals` [label, ts, end], `windows` [win, ts, end] (non-overlapping). Returns
    [win, label, dur] including `other` for instants no interval covers; the durations of a
    window sum to its length. A sweep over +1/-1 boundaries, not a per-event loop.
    """
    iv = intervals.filter(pl.col("label").is_in(priorities) & (pl.col("end") > pl.col("ts")))
    pts = pl.concat([
        iv.select(pl.col("ts").alias("t"), "label", pl.lit(1, pl.Int64).alias("d")),
        iv.select(pl.col("end").alias("t"), "label", pl.lit(-1, pl.Int64).alias("d")),
        windows.select(pl.col("ts").alias("t"), pl.lit(None, pl.String).alias("label"), pl.lit(0, pl.Int64).alias("d")),
        windows.select(pl.col("end").alias("t"), pl.lit(None, pl.String).alias("label"), pl.lit(0, pl.Int64).alias("d")),
    ])
    cols = [f"_c{k}" for k in range(len(priorities))]
    seg = (pts.group_by("t").agg([pl.col("d").filter(pl.col("label") == p).sum().alias(c)
                                  for p, c in zip(priorities, cols, strict=True)])
           .sort("t").with_columns([pl.col(c).cum_sum() for c in cols])
           .with_columns(_len=pl.col("t").shift(-1) - pl.col("t")))
    label = pl.lit(other)
    for p, c in reversed(list(zip(priorities, cols, strict=True))):
        label = pl.when(pl.col(c) > 0).then(pl.lit(p)).otherwise(label)
    seg = seg.with_columns(label=label).filter(pl.col("_len") > 0).select("t", "_len", "label")
    w = windows.select(win, pl.col("ts").alias("_wts"), pl.col("end").alias("_wend")).sort("_wts")
    seg = (seg.sort("t").join_asof(w, left_on="t", right_on="_wts", strategy="backward")
           .filter(pl.col("t") < pl.col("_wend")))
    return seg.group_by(win, "label").agg(pl.col("_len").sum().alias("dur")).sort(win, "label")
