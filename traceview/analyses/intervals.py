"""Interval algebra on polars frames with Int64 `ts`/`end` columns (ns)."""

from __future__ import annotations

import numpy as np
import polars as pl

from ..engine import IN_MEMORY
from ..frames import take


def _runs(ts: np.ndarray, end: np.ndarray, group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, group) of the union of [ts, end) intervals per group, sorted by (group, start): one stable sort
    (intervals mostly come in time order, so it is cheap) and a running maximum of the ends, no per-event loop."""
    o = np.argsort(ts, kind="stable")
    if group is not None:
        g = group[o]
        # small codes sort by radix (linear) as 16-bit keys
        o = o[np.argsort(g.astype(np.uint16) if g.size and 0 <= g.min() and g.max() < 2**16 else g, kind="stable")]
        del g
        group = group[o]
    ts, end = ts[o], end[o]
    del o
    if group is not None and ts.size:
        # one running maximum over all groups: each group's ends are lifted above every earlier group's
        lift = (group - group[0]).astype(np.int64)
        lift *= int(end.max()) - min(int(ts.min()), int(end.min())) + 1
        prev = end + lift  # (in place from here: one array of every interval less at the peak)
        np.maximum.accumulate(prev, out=prev)
        prev -= lift
        del lift
    else:
        prev = np.maximum.accumulate(end)
    new = np.ones(ts.size, bool)
    np.greater(ts[1:], prev[:-1], out=new[1:])
    del prev
    if group is not None:
        new[1:] |= group[1:] != group[:-1]
    at = np.flatnonzero(new)
    return ts[at], np.maximum.reduceat(end, at) if at.size else end[:0], (group[at] if group is not None else at)


def merge(df: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """Union of [ts, end) intervals per group: HTA's vectorised merge."""
    by = by or []
    if df.height == 0:
        return df.select(*by, "ts", "end")
    if len(by) <= 1 and not any(df[c].null_count() for c in (*by, "ts", "end")):
        ts, end = df["ts"].to_numpy(), df["end"].to_numpy()
        if not by:
            s, e, _ = _runs(ts, end)
            return pl.DataFrame([pl.Series("ts", s, df.schema["ts"]), pl.Series("end", e, df.schema["end"])])
        g = df[by[0]]
        span = max(int(ts.max()), int(end.max())) - min(int(ts.min()), int(end.min())) + 1
        if g.dtype.is_integer() and (int(g.max()) - int(g.min()) + 1) * span < 2**62:  # the lifted ends fit
            s, e, k = _runs(ts, end, g.to_numpy())
            return pl.DataFrame([pl.Series(by[0], k, g.dtype), pl.Series("ts", s, df.schema["ts"]),
                                 pl.Series("end", e, df.schema["end"])])
    key = by or None
    srt = df.select(*by, "ts", "end").sort([*by, "ts"], maintain_order=True)
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


def open_at(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time `t`, the position in `starts` (ascending) of the last interval started at or before it, where that
    interval is still open then (`t < ends[j]`); -1 where none is: an as-of search by binary search (no frame of
    every query; in place: one int64 per time)."""
    j = np.searchsorted(starts, t, side="right")
    j -= 1
    if starts.size == 0:  # (every j is -1)
        return j
    ok = j >= 0
    np.maximum(j, 0, out=j)
    ok &= t < ends[j]
    j[~ok] = -1
    return j


def per_window(intervals: pl.DataFrame, windows: pl.DataFrame, win: str = "step") -> pl.DataFrame:
    """Length of the union of `intervals` inside each window [ts, end) -> [win, dur].

    With B(t) = the union's length before t (a running sum over the merged intervals, read by binary search),
    a window [a, b) holds B(b) - B(a): linear, no cross join of windows and intervals."""
    m = merge(intervals)
    if m["ts"].null_count() or m["end"].null_count() or windows["ts"].null_count() or windows["end"].null_count():
        out = (windows.select(win, pl.col("ts").alias("_wts"), pl.col("end").alias("_wend"))
               .join(m, how="cross")
               .with_columns(_d=(pl.min_horizontal("end", "_wend") - pl.max_horizontal("ts", "_wts")).clip(lower_bound=0))
               .group_by(win).agg(pl.col("_d").sum().alias("dur")))
        return windows.select(win).join(out, on=win, how="left").with_columns(pl.col("dur").fill_null(0))
    s, e = m["ts"].to_numpy(), m["end"].to_numpy()
    run = np.concatenate([[0], np.cumsum(e - s)])

    def before(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(s, t, side="right") - 1  # the last interval starting at or before t
        jj = np.maximum(j, 0)
        inside = np.minimum(t, e[jj]) - s[jj] if s.size else np.zeros(t.size, np.int64)
        return np.where(j >= 0, run[jj] + inside, 0)

    a, b = windows["ts"].to_numpy(), windows["end"].to_numpy()
    d = np.maximum(before(b) - before(a), 0)
    keys = windows[win]
    if keys.null_count() == 0 and np.unique(keys.to_numpy()).size == keys.len():  # one window per key: its own
        return pl.DataFrame([keys, pl.Series("dur", d, pl.Int64)])
    # windows sharing a key share its total, as a group-by would
    w = windows.select(win).with_columns(_d=pl.Series(d, dtype=pl.Int64))
    return w.select(win, pl.col("_d").sum().over(win).alias("dur"))


def segments(intervals: pl.DataFrame | pl.LazyFrame, priorities: list[str], windows: pl.DataFrame, other: str = "other",
             win: str = "step", cls_dtype: pl.DataType = pl.String) -> pl.DataFrame:
    """Elementary segments [win, ts, end, cls] that tile each window [ts, end): at every instant the
    highest-priority label active then (`other` where none is).

    `intervals` [label, ts, end] (or [k, ts, end]: k the label's index in `priorities`); `windows` [win, ts, end]
    (non-overlapping). Each label's intervals are
    merged first (so a label is simply on or off), then one boundary sweep: a running count per label over
    the sorted boundaries, no per-event loop. `cls_dtype`: the labels' type (an Enum of them: a byte per segment).
    """
    wi, ts, end, cls = _segment_arrays(intervals, priorities, windows)
    names = pl.Series([*priorities, other], dtype=cls_dtype)
    return pl.DataFrame({
        win: take(windows[win], pl.Series(wi)), "ts": _owned(ts),
        "end": _owned(end), "cls": take(names, pl.Series(cls)),
    })


def _owned(a: np.ndarray) -> pl.Series:
    """`a` as an Int64 Series in polars' own memory (`+ 0` copies). A Series made from a numpy array shares its
    buffer, and a long-lived one (the cached partition) keeps that buffer in the C heap above the temporaries
    freed after it, which the heap then cannot give back (1 M tiny events: +50 MB held to the end)."""
    return pl.Series(a, dtype=pl.Int64) + 0


def _segment_arrays(intervals: pl.DataFrame | pl.LazyFrame, priorities: list[str],
                    windows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`segments` as arrays (window position, ts, end, priority rank; len(priorities) = `other`). `intervals` may
    be lazy: its rows are then built here and freed once merged (no frame of every interval during the sweep)."""
    # each label's priority rank (null: not a ranked label), by equality tests: cheaper than a hash lookup; or
    # the ranks themselves (`k`, no `label`: breakdown.role_ranks)
    rank = (pl.coalesce([pl.when(pl.col("label") == p).then(pl.lit(k, pl.Int32)) for k, p in enumerate(priorities)])
            if "label" in intervals.collect_schema().names() else pl.col("k"))
    iv = (intervals.lazy().select(rank.alias("k"), "ts", "end")
          .filter(pl.col("k").is_not_null() & (pl.col("end") > pl.col("ts"))).collect(**IN_MEMORY))
    s, e, k = _runs(iv["ts"].to_numpy(), iv["end"].to_numpy(), iv["k"].to_numpy())
    del iv
    wts, wend = windows["ts"].to_numpy(), windows["end"].to_numpy()
    t, ps, pe = _boundaries(s, e, wts, wend)
    del s, e
    # label k is on over [t[j], t[j+1]) while its running count of starts minus ends is positive; the highest
    # priority label on wins (merged runs of one label never touch); runs come grouped by label
    nk = len(priorities)
    cls = np.full(t.size, nk, np.int8 if nk < 127 else np.int64)  # nk: `other`
    d = np.zeros(t.size, np.int8)
    bounds = np.searchsorted(k, np.arange(nk + 1))
    for j in reversed(range(nk)):
        a, b = bounds[j], bounds[j + 1]
        if a == b:
            continue
        d[:] = 0
        d[ps[a:b]] = 1  # a label's run boundaries are all distinct times
        d[pe[a:b]] = -1
        cls[np.cumsum(d, dtype=np.int8) > 0] = j
    del d, ps, pe
    ts, end, cls = t[:-1], t[1:], cls[:-1]
    # each segment in the window that starts at or before it (and only while that window lasts)
    wo = np.argsort(wts, kind="stable").astype(np.int32 if wts.size < 2**31 else np.int64)
    w = np.searchsorted(wts[wo], ts, side="right")
    keep = w > 0  # (w - 1: the window's position among the sorted starts)
    w -= 1
    np.maximum(w, 0, out=w)
    wi = wo[w]
    del w
    keep &= ts < wend[wi]
    return wi[keep], ts[keep], end[keep], cls[keep]


def _boundaries(s: np.ndarray, e: np.ndarray, wts: np.ndarray,
                wend: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, ps, pe): the distinct boundary times t of runs [s, e) and windows [wts, wend), sorted, and the position
    in t of each run's start and end. One stable sort (of sorted runs: cheap) ranks them all, no binary search
    per boundary; positions in 32 bits when they fit; each temporary freed as soon as it is read."""
    x = np.concatenate([s, e, wts, wend])
    o = np.argsort(x, kind="stable")
    xs = x[o]
    del x
    new = np.ones(xs.size, bool)
    np.not_equal(xs[1:], xs[:-1], out=new[1:])
    t = xs[new]
    del xs
    rank = np.cumsum(new, dtype=np.int32 if new.size < 2**31 else np.int64)
    del new
    rank -= 1
    pos = np.empty(o.size, rank.dtype)
    pos[o] = rank
    del o, rank
    return t, pos[:s.size], pos[s.size:2 * s.size]


def priority_sweep(intervals: pl.DataFrame, priorities: list[str], windows: pl.DataFrame,
                   other: str = "other", win: str = "step") -> pl.DataFrame:
    """Time per label per window [win, label, dur], every instant counted once (see `segments`);
    a window's durations sum to its length."""
    # summed per (window, rank) in numpy first: no frame of every segment, no string group-by over it
    wi, ts, end, cls = _segment_arrays(intervals, priorities, windows)
    nk = len(priorities) + 1
    key = wi.astype(np.int64) * nk + cls
    size = windows.height * nk
    dur = np.bincount(key, weights=end - ts, minlength=size) if key.size else np.zeros(size)
    has = np.flatnonzero(np.bincount(key, minlength=size)) if key.size else np.zeros(0, np.int64)
    names = pl.Series([*priorities, other], dtype=pl.String)
    seg = pl.DataFrame({
        win: windows[win].gather(pl.Series(has // nk)), "cls": names.gather(pl.Series(has % nk)),
        "dur": pl.Series(dur[has].round().astype(np.int64), dtype=pl.Int64),
    })
    # windows sharing a key share one row, as the group-by over segments did
    return (seg.group_by(win, "cls").agg(pl.col("dur").sum())
            .rename({"cls": "label"}).sort(win, "label", maintain_order=True))


def sweep_totals(intervals: pl.DataFrame | pl.LazyFrame, priorities: list[str], windows: pl.DataFrame,
                 win: str = "step") -> np.ndarray:
    """`priority_sweep` as a matrix: ns per window (row, in the order of `windows`) and label (column: the
    priorities, then `other`), Int64; windows sharing a key share their total, as in `priority_sweep`."""
    wi, ts, end, cls = _segment_arrays(intervals, priorities, windows)
    nk, n = len(priorities) + 1, windows.height
    dur = np.bincount(wi.astype(np.int64) * nk + cls, weights=end - ts, minlength=n * nk) if wi.size else np.zeros(n * nk)
    dur = dur.reshape(n, nk).round().astype(np.int64)
    keys = windows[win].to_numpy()
    if windows[win].n_unique() < n:  # sum each key's windows, then give every window its key's sum
        _, inv = np.unique(keys, return_inverse=True)
        tot = np.zeros((int(inv.max()) + 1, nk), np.int64)
        np.add.at(tot, inv, dur)
        dur = tot[inv]
    return dur
