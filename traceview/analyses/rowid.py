"""Rows looked up by row id (`i`): where each id is in a frame's ids, by a dense id -> position table or a binary
search, never a hash join (which hashes the whole frame on every call).

`locate` is the core on numpy arrays (the loader sets args tables and launches beside their rows with it);
`positions` / `by_id` / `join_by_id` are its frame API for the analyses. The host and GPU frames keep the file's
event order, so their ids ascend; looking up 100 k ids among 300 k rows this way costs a tenth of a hash join."""

from __future__ import annotations

import weakref

import numpy as np
import polars as pl

#: dense id -> position tables of the large frames looked up repeatedly (the host frame: ~10 lookups per
#: analysis, the GPU frame), held while their frame lives, with the ids they were built from; other tables are
#: built on each call
_TABLES: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}
_CACHE_MIN_ROWS = 4096
#: a kept table may span up to this many ids per frame row (4 bytes each)
_SPARSE = 32


def locate(at: np.ndarray, keys: np.ndarray, miss: np.ndarray | None = None, owner: object | None = None) -> pl.Series:
    """The position in `at` (unique integer ids, in any order) of each of `keys` (integers): UInt32, null where
    the key is not in `at` or `miss` (a mask over `keys`) is set.

    Ids compact next to `at` or the keys (row ids) are looked up in a dense id -> position table (two passes,
    no binary search: 100 k queries into a few thousand sparse ids cost a tenth of `searchsorted` this way);
    others by a binary search among the sorted ids. The table of a large `owner` (the frame `at` holds the ids
    of) is kept while the owner lives, and may then be sparser (the GPU frame: ids interleaved with the host's,
    ~20 per row)."""
    n = at.size
    if n == 0 or keys.size == 0:
        return pl.repeat(None, keys.size, dtype=pl.UInt32, eager=True)
    kept = owner is not None and n >= _CACHE_MIN_ROWS
    neg = int(keys.min()) < 0  # (never in a table)
    tab = _kept(owner, at) if kept and not neg else None
    if tab is None:
        ascending = n < 2 or bool((at[1:] > at[:-1]).all())
        lo, hi = (int(at[0]), int(at[-1])) if ascending else (int(at.min()), int(at.max()))
        if lo >= 0 and not neg and (hi < 4 * (n + keys.size) + 1024 or (kept and hi < _SPARSE * n)):
            tab = _table(at, hi, owner if kept else None)
    if tab is not None:
        p = tab.take(keys, mode="clip")  # (an id past the table reads its last slot: none)
        hit = p >= 0
        np.maximum(p, 0, out=p)
    else:
        by = None if ascending else np.argsort(at, kind="stable")
        ranked = at if by is None else at[by]
        p = np.minimum(np.searchsorted(ranked, keys), n - 1)
        hit = ranked[p] == keys
        if by is not None:
            p = by[p]
    if miss is not None:
        hit &= ~miss
    idx = pl.Series(p.astype(np.uint32, copy=False))
    return idx if hit.all() else idx.set(pl.Series(~hit), None)  # (a mask: far cheaper than a scatter)


def _kept(owner: object, at: np.ndarray | None = None) -> np.ndarray | None:
    """The kept table of `owner`, or of another live frame whose ids are the same buffer as `at` (a frame derived
    from the GPU frame with its `i` column, `layers.gpu_codes`, shares that column: one table of 4 bytes an id
    for both, not a second one, at 10 M tiny events 38 MiB at the rules' peak)."""
    hit = _TABLES.get(id(owner))
    if hit is not None and hit[0]() is owner:
        return hit[1]
    if at is None:
        return None
    ptr = at.__array_interface__["data"][0]
    for ref, tab, ids in list(_TABLES.values()):  # (a few frames)
        # (`ids` is held with its table: a live buffer at the same address, of the same length and type, is
        # the same ids, as a frame's columns are immutable)
        if (ref() is not None and ids.size == at.size and ids.dtype == at.dtype
                and ids.__array_interface__["data"][0] == ptr):
            _keep(owner, tab, at)
            return tab
    return None


def _keep(owner: object, tab: np.ndarray, at: np.ndarray) -> None:
    key = id(owner)
    _TABLES[key] = (weakref.ref(owner, lambda _r, key=key: _TABLES.pop(key, None)), tab, at)


def forget(owner: object) -> None:
    """Drop the table kept for `owner` (a frame looked up by id once more at most: its table, 4 bytes an id, would
    stay with it to the end of the run); a later lookup builds it again."""
    hit = _TABLES.get(id(owner))
    if hit is not None and hit[0]() is owner:
        del _TABLES[id(owner)]


def _table(at: np.ndarray, hi: int, owner: object | None) -> np.ndarray:
    """id -> position in `at` (-1: none; largest id `hi`), with one extra -1 slot past the largest id; kept while
    `owner` (not None) lives."""
    tab = np.full(hi + 2, -1, np.int32 if at.size < 2**31 else np.int64)
    tab[at] = np.arange(at.size, dtype=tab.dtype)
    if owner is not None:
        _keep(owner, tab, at)
    return tab


def by_id(frame: pl.DataFrame, ids: pl.Series, *exprs: str | pl.Expr) -> pl.DataFrame:
    """`exprs` evaluated on the `frame` row (unique `i`) of each id in `ids`, in the order of `ids`; a null or
    unknown id reads an all-null row. For plain columns this is `ids.to_frame("i").join(frame, on="i",
    how="left")`; expressions are evaluated on the looked-up rows only."""
    ex = [pl.col(e) if isinstance(e, str) else e for e in exprs]
    cols = list(dict.fromkeys(c for e in ex for c in e.meta.root_names()))
    idx = positions(frame, ids)
    if idx is None:  # the frame's ids have nulls: a hash join
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
    None when the frame's ids have nulls."""
    key = frame["i"]
    if key.null_count():
        return None
    q = ids.to_numpy()
    miss = None
    if ids.null_count():  # a nullable integer column reads as float with NaN (exact below 2**53): no polars call
        miss = np.isnan(q)
        q = np.where(miss, 0, q).astype(np.int64)
    return locate(key.to_numpy(), q, miss, owner=frame)


def _eval(rows: pl.DataFrame, ex: list[pl.Expr]) -> pl.DataFrame:
    """`ex` on `rows`, literals broadcast to its height."""
    return rows.with_columns(ex).select([e.meta.output_name() for e in ex])


def join_by_id(df: pl.DataFrame, on: str, frame: pl.DataFrame, *exprs: str | pl.Expr) -> pl.DataFrame:
    """`df` with `exprs` of the `frame` row whose id is `df[on]` (a left join on `frame`'s `i`)."""
    return pl.concat([df, by_id(frame, df[on], *exprs)], how="horizontal")
