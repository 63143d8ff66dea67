"""Tests on name columns: regexes run on the distinct names only, and prefix tests.

A trace repeats a few dozen kernel names and a few hundred op names over hundreds of thousands of rows:
a regex over every row of the GPU frame costs ~10 ms on a 132 MB trace, the same regex over its ~50 distinct
names and an `is_in` ~1 ms. Same result as `pl.col(col).str.contains(pattern)`, nulls included (a null name
gives null).
"""

from __future__ import annotations

import weakref

import polars as pl


def matching(names: pl.Series, pattern: str, unless: str | None = None) -> pl.Series:
    """The distinct non-null values of `names` that match `pattern` (and not `unless`)."""
    u = names.drop_nulls().unique()
    hit = u.str.contains(pattern)
    return u.filter(hit if unless is None else hit & ~u.str.contains(unless))


#: below this many rows the regex runs on every row (the distinct-names detour costs three polars calls)
_MIN_ROWS = 4096


#: the distinct names of a frame's column, kept while the frame lives: the rules test a few dozen patterns on the
#: same kernel frame, and each `unique` over its rows costs more than the regex over the distinct names
_distinct: dict[tuple[int, str], tuple[weakref.ref, pl.Series]] = {}


def _distinct_names(frame: pl.DataFrame, col: str) -> pl.Series:
    key = (id(frame), col)
    got = _distinct.get(key)
    if got is not None and got[0]() is frame:
        return got[1]
    u = frame[col].drop_nulls().unique()
    _distinct[key] = (weakref.ref(frame, lambda _r, k=key: _distinct.pop(k, None)), u)
    return u


def contains(frame: pl.DataFrame, pattern: str, col: str = "name", unless: str | None = None) -> pl.Expr:
    """`pl.col(col).str.contains(pattern)` (`& ~pl.col(col).str.contains(unless)`: one pass over the distinct
    names for both) for rows of `frame`, as a lookup of the distinct names that match."""
    if frame.height < _MIN_ROWS:
        hit = pl.col(col).str.contains(pattern)
        return hit if unless is None else hit & ~pl.col(col).str.contains(unless)
    return pl.col(col).is_in(matching(_distinct_names(frame, col), pattern, unless).implode())


def starts_with_any(col: str, prefixes: tuple[str, ...]) -> pl.Expr:
    """Whether `col` starts with one of `prefixes` (null for a null value, as `str.contains`): a regex of
    alternatives tested as its literal prefixes costs a tenth (the alternation defeats the regex engine's own
    prefix search)."""
    return pl.any_horizontal([pl.col(col).str.starts_with(p) for p in prefixes])
