"""traceview.frames: each helper returns what the polars call it stands for returns (values, types, shape), with
or without a query, on the edge cases where a shortcut would differ (no name, every column dropped, a fill value
the type cannot hold, an all-null or empty series, null and negative positions)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

from traceview.frames import dropnull, filled, isnull, members, notnull, omit, pick, take

DF = pl.DataFrame({"a": [1, 2, 3], "b": ["x", None, "z"], "c": [0.5, None, 1.5]})


@pytest.mark.parametrize("names", [(), ("a",), ("c", "a"), ("a", "b", "c")])
def test_pick_is_select(names: tuple[str, ...]) -> None:
    assert_frame_equal(pick(DF, *names), DF.select(*names))
    assert_frame_equal(pick(DF.clear(), *names), DF.clear().select(*names))


@pytest.mark.parametrize("names", [("a",), ("c", "a"), ("a", "b", "c")])
def test_omit_is_drop(names: tuple[str, ...]) -> None:
    assert_frame_equal(omit(DF, *names), DF.drop(*names))
    assert omit(DF, *names).shape == DF.drop(*names).shape  # (every column dropped: the rows' count is kept)


SERIES = [pl.Series("s", [1, None, 3], pl.UInt32), pl.Series("s", [1, 2, 3], pl.UInt32),
          pl.Series("s", [1, 2], pl.Int32), pl.Series("s", [True, None]), pl.Series("s", [True, False]),
          pl.Series("s", [0.5, 1.0]), pl.Series("s", [None, None]), pl.Series("s", [], pl.Null),
          pl.Series("s", [], pl.Int64)]


@pytest.mark.parametrize("s", SERIES)
@pytest.mark.parametrize("value", [0, -1, 2**40, False, True, 0.5])
def test_filled_is_fill_null(s: pl.Series, value: object) -> None:
    try:
        want = s.fill_null(value)
    except Exception:  # noqa: BLE001 - a fill polars refuses: the helper refuses it too
        with pytest.raises(Exception):  # noqa: B017
            filled(s, value)
        return
    assert_series_equal(filled(s, value), want)


@pytest.mark.parametrize("s", SERIES)
def test_null_masks_and_drop(s: pl.Series) -> None:
    assert_series_equal(notnull(s), s.is_not_null())
    assert_series_equal(isnull(s), s.is_null())
    assert_series_equal(dropnull(s), s.drop_nulls())


def test_members_is_implode_in_is_in() -> None:
    col = pl.DataFrame({"op": pl.Series([1, 2, None, 4], dtype=pl.UInt32)})
    for vals in (pl.Series([2, 4, None]), pl.Series([], dtype=pl.UInt32), pl.Series([1], dtype=pl.UInt32)):
        assert_frame_equal(col.select(pl.col("op").is_in(members(vals))), col.select(pl.col("op").is_in(vals.implode())))
        assert_series_equal(col["op"].is_in(members(vals)), col["op"].is_in(vals.implode()))


@pytest.mark.parametrize("idx", [pl.Series([0, None, 2], dtype=pl.UInt32), pl.Series([0, -1, 2]),
                                 np.array([2, 0]), np.array([], np.int64), pl.Series([], dtype=pl.UInt32)])
def test_take_is_gather(idx: pl.Series | np.ndarray) -> None:
    s = pl.Series("s", ["a", "b", "c"])
    assert_series_equal(take(s, idx), s.gather(idx))
