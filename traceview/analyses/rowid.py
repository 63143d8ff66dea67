"""Columns of frame rows looked up by row id (`i`): a binary search in the frame's sorted ids, not a hash join.

The host and GPU frames keep the file's event order, so their ids ascend; looking up 100 k ids among 300 k rows
this way costs a tenth of a hash join (which hashes the whole frame on every call)."""

from __future__ import annotations

import numpy as np
import polars as pl


def by_id(frame: pl.DataFrame, ids: pl.Series, *exprs: str | pl.Expr) -> pl.DataFrame:
    """`exprs` of the `frame` row (unique `i`) of each id in `ids`, in the order of `ids`; nulls where the id is
    null or not in `frame`. The same as `ids.to_frame("i").join(frame.select("i", *exprs), on="i", how="left")`
    without the `i` column."""
    sel = frame.select(*exprs)
    key = frame["i"]
    if not key.is_sorted() or key.null_count():
        joined = ids.rename("i").to_frame().join(frame.select("i", *exprs), on="i", how="left", coalesce=True)
        return joined.drop("i")
    k = key.to_numpy()
    q = ids.fill_null(0).to_numpy()
    p = np.minimum(np.searchsorted(k, q), max(k.size - 1, 0))
    hit = ids.is_not_null().to_numpy() & (k[p] == q) if k.size else np.zeros(q.size, bool)
    return sel.select(pl.all().gather(pl.Series(p, dtype=pl.UInt32).set(pl.Series(~hit), None)))
