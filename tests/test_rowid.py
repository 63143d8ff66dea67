"""analyses.rowid.by_id: the lookup equals the left join it stands for, on every path (dense table, cached
table, binary search)."""

from __future__ import annotations

import polars as pl

from tests.conftest import load
from traceview.analyses import rowid
from traceview.analyses.rowid import by_id

REL = "gpu_h200/train_tinygpt_modules.json.gz"


def _join(frame: pl.DataFrame, ids: pl.Series, *cols: str) -> pl.DataFrame:
    return ids.rename("_q").to_frame().join(frame.select("i", *cols), left_on="_q", right_on="i",
                                            how="left", maintain_order="left").select(cols)


def test_gpu_launches_looked_up_in_the_host_frame(monkeypatch):
    t = load(REL)
    ids = t.gpu["launch"]  # every GPU row's launching runtime call (null for none)
    expect = _join(t.host, ids, "name", "ts")
    assert ids.null_count() < ids.len() and expect["name"].null_count() == ids.null_count()
    assert by_id(t.host, ids, "name", "ts").equals(expect)
    monkeypatch.setattr(rowid, "_CACHE_MIN_ROWS", 0)  # the cached table: built once, then reused
    assert by_id(t.host, ids, "name", "ts").equals(expect)
    assert by_id(t.host, ids, "name", "ts").equals(expect)
    assert any(ref() is t.host for ref, _ in rowid._TABLES.values())


def test_sparse_frame_many_queries_and_unknown_ids():
    t = load(REL)
    runtime = t.host.filter(pl.col("cat") == "cuda_runtime").select("i", "name")
    # ids of every host row (most are not runtime calls), a null and an id past the end
    ids = pl.concat([t.host["i"], pl.Series([None, 10**7], dtype=t.host["i"].dtype)])
    got = by_id(runtime, ids, "name")
    expect = _join(runtime, ids, "name")
    assert got.equals(expect)
    assert got["name"].drop_nulls().len() == runtime.height


def test_unsorted_frame_by_table_or_join(monkeypatch):
    g = load(REL).gpu.sort("dur", "i")  # the GPU rows not in id order (ids interleaved with the host's)
    assert not g["i"].is_sorted()
    ids = pl.concat([g["i"].reverse(), pl.Series([None, 0], dtype=g["i"].dtype)])
    expect = _join(g, ids, "name", "dur")
    assert by_id(g, ids, "name", "dur").equals(expect)
    monkeypatch.setattr(rowid, "_CACHE_MIN_ROWS", 0)  # the kept sparse table
    assert by_id(g, ids, "name", "dur").equals(expect)
    # unsorted and too sparse for a table: the hash join
    far = pl.DataFrame({"i": [10**9, 5, 3 * 10**9], "v": ["a", "b", "c"]})
    assert rowid.positions(far, pl.Series([5])) is None
    assert by_id(far, pl.Series([3 * 10**9, 7, 5]), "v")["v"].to_list() == ["c", None, "b"]
