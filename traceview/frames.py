"""Frame and series operations that need no polars query when there is nothing to do: a small trace's run is mostly
polars' fixed cost per query (~0.1 ms whatever the rows, and a hand-off to its thread pool), and `select`/`drop` of
plain column names, or a `fill_null`/`is_null`/`drop_nulls` of a series without a null, each run one, where
indexing the frame's columns or reading the series' null count does not (issue 32, start-up; bench/README.md).
Each returns what the polars call returns.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def pick(df: pl.DataFrame, *names: str) -> pl.DataFrame:
    """`df.select(*names)` of plain column names (each present once), without a query."""
    return df[list(names)] if names else df.select()  # (`df[[]]` would keep the rows' count)


def column(df: pl.DataFrame, name: str) -> pl.Series:
    """`df[name]`, leaving the frame's own column as it is: a column held as a constant (`ingest.loader.
    _null_constants`: no buffer) and read as `df[name]` keeps the buffer polars fills for it while the frame
    lives (the trace's frames: the whole run)."""
    return pick(df, name).to_series()


def omit(df: pl.DataFrame, *names: str) -> pl.DataFrame:
    """`df.drop(*names)` (every name present), without a query."""
    gone = set(names)
    keep = [c for c in df.columns if c not in gone]
    return df[keep] if keep else df.drop(*names)  # (no column left: the rows' count is kept, as `drop` keeps it)


def _keeps_type(dtype: pl.DataType, value: object) -> bool:
    """Whether `fill_null(value)` leaves a series of `dtype` that type (polars widens it to hold a value it cannot:
    -1 in a UInt32 series makes it Int64)."""
    if isinstance(value, bool):
        return dtype == pl.Boolean
    if isinstance(value, int):
        if dtype.is_float():
            return True
        if dtype.is_integer():
            r = np.iinfo(str(dtype).lower())
            return int(r.min) <= value <= int(r.max)
    return False


def filled(s: pl.Series, value: object) -> pl.Series:
    """`s.fill_null(value)`, without a query when `s` has no null and keeps its type."""
    return s if not s.null_count() and _keeps_type(s.dtype, value) else s.fill_null(value)


def notnull(s: pl.Series) -> pl.Series:
    """`s.is_not_null()`, without a query when `s` has no null."""
    return s.is_not_null() if s.null_count() else pl.Series(s.name, np.ones(s.len(), bool))


def isnull(s: pl.Series) -> pl.Series:
    """`s.is_null()`, without a query when `s` has no null."""
    return s.is_null() if s.null_count() else pl.Series(s.name, np.zeros(s.len(), bool))


def dropnull(s: pl.Series) -> pl.Series:
    """`s.drop_nulls()`, without a query when `s` has no null."""
    return s.drop_nulls() if s.null_count() else s


def members(s: pl.Series) -> pl.Expr:
    """`s.implode()` as an expression (the values of `s` as one list, for `is_in`), without a query of its own."""
    return pl.lit(s).implode()


def take(s: pl.Series, idx: pl.Series | np.ndarray) -> pl.Series:
    """`s.gather(idx)` for positions in a series or a numpy array (nulls give nulls, negatives count from the end),
    without a query: indexing gathers natively."""
    return s[idx]
