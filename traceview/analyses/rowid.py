"""Columns of frame rows looked up by row id (`i`): a binary search in the frame's sorted ids, not a hash join.

The host and GPU frames keep the file's event order, so their ids ascend; looking up 100 k ids among 300 k rows
this way costs a tenth of a hash join (which hashes the whole frame on every call)."""

from __future__ import annotations

import weakref

import numpy as np
import polars as pl

#: dense id -> position tables of the large frames looked up repeatedly (the host frame: ~10 lookups per
#: analysis), held while their frame lives; small frames build theirs on each call
_TABLES: dict[int, tuple[weakref.ref, np.ndarray]] = {}
_CACHE_MIN_ROWS = 50_000


def by_id(frame: pl.DataFrame, ids: pl.Series, *exprs: str | pl.Expr) -> pl.DataFrame:
    """`exprs` evaluated on the `frame` row (unique `i`) of each id in `ids`, in the order of `ids`; a null or
    unknown id reads an all-null row. For plain columns this is `ids.to_frame("i").join(frame, on="i",
    how="left")`; expressions are evaluated on the looked-up rows only."""
    ex = [pl.col(e) if isinstance(e, str) else e for e in exprs]
    cols = list(dict.fromkeys(c for e in ex for c in e.meta.root_names()))
    key = frame["i"]
    if not key.is_sorted() or key.null_count():
        rows = ids.rename("_q").to_frame().join(frame.select("i", *(c for c in cols if c != "i")), left_on="_q",
                                                right_on="i", how="left", coalesce=False)
        return _eval(rows, ex)
    k = key.to_numpy()
    q = ids.fill_null(0).to_numpy()
    if k.size and 0 <= k[0] and k[-1] < 4 * (k.size + q.size) + 1024 and (q.size == 0 or 0 <= q.min()):
        # ids compact next to the frame or the query: a dense id -> position table (two passes, no binary
        # search; 100 k queries into a few thousand sparse ids cost a tenth of `searchsorted` this way)
        at = _positions(frame, k)
        p = at[np.minimum(q, k[-1] + 1)]
        hit = ids.is_not_null().to_numpy() & (p >= 0)
        p = np.maximum(p, 0)
    else:
        p = np.minimum(np.searchsorted(k, q), max(k.size - 1, 0))
        hit = ids.is_not_null().to_numpy() & (k[p] == q) if k.size else np.zeros(q.size, bool)
    idx = pl.Series(p, dtype=pl.UInt32).set(pl.Series(~hit), None)
    return _eval(frame.select(cols).select(pl.all().gather(idx)) if cols else pl.DataFrame({"_q": ids}), ex)


def _positions(frame: pl.DataFrame, k: np.ndarray) -> np.ndarray:
    """id -> row position (-1: no row) of `frame`, whose sorted ids are `k`; one extra -1 slot past the
    largest id."""
    key = id(frame)
    hit = _TABLES.get(key)
    if hit is not None and hit[0]() is frame:
        return hit[1]
    at = np.full(int(k[-1]) + 2, -1, np.int32 if k.size < 2**31 else np.int64)
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
