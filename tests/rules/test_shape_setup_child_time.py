"""TV106's children's time per op (`_child_time`, numpy) against the hash group-by and join it replaced."""

import polars as pl
from traceview.rules.shape_setup import _child_time


def _by_join(h: pl.DataFrame, ids: pl.Series) -> pl.Series:
    child = (h.lazy().filter(pl.col("parent").is_in(ids.implode())).group_by("parent")
             .agg((pl.col("end") - pl.col("ts")).sum().alias("_c")))
    return ids.to_frame("i").lazy().join(child, left_on="i", right_on="parent", how="left",
                                          maintain_order="left").collect()["_c"]


def test_child_time_matches_the_group_by():
    h = pl.DataFrame({
        "i": [0, 1, 2, 3, 4, 5, 6, 7],
        "parent": [None, 0, 0, 1, None, 4, 4, 9],
        "ts": [0, 10, 50, 12, 100, 101, None, 5],
        "end": [90, 40, 70, 30, 200, 150, 160, 6],
    }, schema={"i": pl.UInt32, "parent": pl.UInt32, "ts": pl.Int64, "end": pl.Int64})
    ids = pl.Series("i", [0, 1, 2, 4, 5, 9], pl.UInt32)
    got = _child_time(h, ids)
    assert got.to_list() == _by_join(h, ids).to_list() == [50, 18, None, 49, None, 1]


def test_child_time_without_parents():
    h = pl.DataFrame({"i": [0, 1], "parent": [None, None], "ts": [0, 1], "end": [2, 3]},
                     schema={"i": pl.UInt32, "parent": pl.UInt32, "ts": pl.Int64, "end": pl.Int64})
    assert _child_time(h, pl.Series("i", [0, 1], pl.UInt32)).to_list() == [None, None]
