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


def segments(intervals: pl.DataFrame, priorities: list[str], windows: pl.DataFrame, other: str = "other",
             win: str = "step") -> pl.DataFrame:
    """Elementary segments [win, ts, end, cls] that tile each window [ts, end): at every instant the
    highest-priority label active then (`other` where none is).

    `intervals` [label, ts, end]; `windows` [win, ts, end] (non-overlapping). Each label's intervals are
    merged first (so a label is simply on or off), then one +1/-1 boundary sweep: no per-event loop.
    """
    iv = merge(intervals.filter(pl.col("label").is_in(priorities) & (pl.col("end") > pl.col("ts"))), ["label"])
    rank = {p: k for k, p in enumerate(priorities)}
    iv = iv.with_columns(_k=pl.col("label").replace_strict(rank, return_dtype=pl.Int32))
    w = windows.select(pl.col("ts").alias("t"), pl.lit(-1, pl.Int32).alias("_k"), pl.lit(0, pl.Int64).alias("d"))
    pts = pl.concat([
        iv.select(pl.col("ts").alias("t"), "_k", pl.lit(1, pl.Int64).alias("d")),
        iv.select(pl.col("end").alias("t"), "_k", pl.lit(-1, pl.Int64).alias("d")),
        w, windows.select(pl.col("end").alias("t"), pl.lit(-1, pl.Int32).alias("_k"), pl.lit(0, pl.Int64).alias("d")),
    ])
    cols = [f"_c{k}" for k in range(len(priorities))]
    pts = pts.with_columns([pl.when(pl.col("_k") == k).then(pl.col("d")).otherwise(0).alias(c)
                            for k, c in enumerate(cols)])
    seg = (pts.group_by("t").agg([pl.col(c).sum() for c in cols]).sort("t")
           .with_columns([pl.col(c).cum_sum() for c in cols]).with_columns(_next=pl.col("t").shift(-1)))
    label = pl.lit(other)
    for p, c in reversed(list(zip(priorities, cols, strict=True))):
        label = pl.when(pl.col(c) > 0).then(pl.lit(p)).otherwise(label)
    seg = seg.filter(pl.col("_next") > pl.col("t")).select("t", "_next", label.alias("cls"))
    wn = windows.select(win, pl.col("ts").alias("_wts"), pl.col("end").alias("_wend")).sort("_wts")
    seg = (seg.join_asof(wn, left_on="t", right_on="_wts", strategy="backward")
           .filter(pl.col("t") < pl.col("_wend")))
    return seg.select(win, pl.col("t").alias("ts"), pl.col("_next").alias("end"), "cls")


def priority_sweep(intervals: pl.DataFrame, priorities: list[str], windows: pl.DataFrame,
                   other: str = "other", win: str = "step") -> pl.DataFrame:
    """Time per label per window [win, label, dur], every instant counted once (see `segments`);
    a window's durations sum to its length."""
    seg = segments(intervals, priorities, windows, other, win)
    return (seg.group_by(win, "cls").agg((pl.col("end") - pl.col("ts")).sum().alias("dur"))
            .rename({"cls": "label"}).sort(win, "label"))
