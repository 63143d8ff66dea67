"""Columns of frame rows looked up by row id (`i`): a binary search in the frame's sorted ids, not a hash join.

The host and GPU frames keep the file's event order, so their ids ascend; looking up 100 k ids among 300 k rows
this way costs a tenth of a hash join (which hashes the whole frame on every call)."""

from __future__ import annotations

import weakref

import numpy as np
import polars as pl

#: dense id -> position tables of the large frames looked up repeatedly (the host frame: ~10 lookups per
#: analysis, the GPU frame), held while their frame lives; small frames build theirs on each call
_TABLES: dict[int, tuple[weakref.ref, np.ndarray]] = {}
_CACHE_MIN_ROWS = 4096
#: a kept table may span up to this many ids per frame row (4 bytes each)
_SPARSE = 32


def by_id(frame: pl.DataFrame, ids: pl.Series, *exprs: str | pl.Expr) -> pl.DataFrame:
    """`exprs` evaluated on the `frame` row (unique `i`) of each id in `ids`, in the order of `ids`; a null or
    unknown id reads an all-null row. For plain columns this is `ids.to_frame("i").join(frame, on="i",
    how="left")`; expressions are evaluated on the looked-up rows only."""
    ex = [pl.col(e) if isinstance(e, str) else e for e in exprs]
    cols = list(dict.fromkeys(c for e in ex for c in e.meta.root_names()))
    idx = positions(frame, ids)
    if idx is None:  # null or sparse unsorted ids: a hash join
        rows = ids.rename("_q").to_frame().join(frame.select("i", *(c for c in cols if c != "i")), left_on="_q",
                                                right_on="i", how="left", coalesce=False)
        return _eval(rows, ex)
    if not cols:
        return _eval(pl.DataFrame({"_q": ids}), ex)
    # the rows by position (a take on the needed columns: no lazy query on a small frame)
    rows = frame[cols][idx]
    # plain columns, renamed or not: the taken columns themselves (Series renames, no query)
    plain = [e.meta.undo_aliases() for e in ex]
    if all(p.meta.is_column() for p in plain):
        return pl.DataFrame([rows[p.meta.output_name()].alias(e.meta.output_name()) for p, e in zip(plain, ex, strict=True)])
    return _eval(rows, ex)


def positions(frame: pl.DataFrame, ids: pl.Series) -> pl.Series | None:
    """The row position in `frame` (unique ids `i`) of each id in `ids` (UInt32; null for a null or unknown id);
    None when the frame's ids have nulls, or are neither sorted nor compact enough for a table."""
    key = frame["i"]
    if key.null_count():
        return None
    k = key.to_numpy()
    nulls = ids.null_count()
    q = ids.to_numpy()
    if nulls:  # a nullable integer column reads as float with NaN (exact below 2**53): no polars call
        miss = np.isnan(q)
        q = np.where(miss, 0, q).astype(np.int64)
    srt = key.is_sorted()
    lo, hi = (int(k[0]), int(k[-1])) if srt and k.size else (int(k.min()), int(k.max())) if k.size else (0, 0)
    # ids compact next to the frame or the query: a dense id -> position table (two passes, no binary search;
    # 100 k queries into a few thousand sparse ids cost a tenth of `searchsorted` this way); a large frame's
    # table is kept (the GPU frame: ids interleaved with the host's, ~20 per row)
    dense = k.size and lo >= 0 and (q.size == 0 or 0 <= q.min()) and (
        hi < 4 * (k.size + q.size) + 1024 or (k.size >= _CACHE_MIN_ROWS and hi < _SPARSE * k.size))
    if dense:
        at = _positions(frame, k, hi)
        p = at[np.minimum(q, hi + 1)]
        hit = p >= 0
        p = np.maximum(p, 0)
    elif srt:
        p = np.minimum(np.searchsorted(k, q), max(k.size - 1, 0))
        hit = (k[p] == q) if k.size else np.zeros(q.size, bool)
    else:
        return None
    if nulls:
        hit &= ~miss
    idx = pl.Series(p, dtype=pl.UInt32)
    return idx if hit.all() else idx.scatter(np.flatnonzero(~hit), None)


def _positions(frame: pl.DataFrame, k: np.ndarray, hi: int) -> np.ndarray:
    """id -> row position (-1: no row) of `frame`, whose ids are `k` (largest `hi`); one extra -1 slot past
    the largest id."""
    key = id(frame)
    hit = _TABLES.get(key)
    if hit is not None and hit[0]() is frame:
        return hit[1]
    at = np.full(hi + 2, -1, np.int32 if k.size < 2**31 else np.int64)
    at[k] = np.arange(k.size)
    if k.size >= _CACHE_MIN_ROWS:
        _TABLES[key] = (weakref.ref(frame, lambda _r, key=key: _TABLES.pop(key, None)), at)
    return at


def _eval(rows: pl.DataFrame, ex: list[pl.Expr]) -> pl.DataFrame:
    """`ex` on `rows`, literals broadcast to its height."""
    return rows.with_columns(ex).select([e.meta.output_name() for e in ex])


def join_by_id(df: pl.DataFrame, on: str, frame: pl.DataFrame, *exprs: str | pl.Expr) -> pl.DataFrame:
    """`df` with `exprs` of the `frame` row whose id is `df[on]` (a left join on `frame`'s `i`)."""
    return pl.concat([df, by_id(frame, df[on], *exprs)], how="horizontal")
