"""analyses.rowid: `by_id` equals the left join it stands for, and `locate` the straightforward dict lookup, on
every path (dense table, kept table, binary search in sorted or unsorted ids)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

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
    assert any(ref() is t.host for ref, *_ in rowid._TABLES.values())


def test_frames_of_one_id_column_share_a_kept_table(monkeypatch):
    t = load(REL)
    monkeypatch.setattr(rowid, "_CACHE_MIN_ROWS", 0)
    ids = t.gpu["i"].sample(fraction=0.5, seed=1)
    assert by_id(t.gpu, ids, "ts")["ts"].equals(_join(t.gpu, ids, "ts")["ts"])
    codes = t.gpu.select("i", "kind")  # (the GPU frame's own `i` column: the same buffer)
    assert by_id(codes, ids, "kind")["kind"].equals(_join(t.gpu, ids, "kind")["kind"])
    assert rowid._kept(codes) is rowid._kept(t.gpu) is not None
    # a frame of other ids (a copy of equal values is another buffer) gets a table of its own
    other = t.gpu.select(pl.col("i").reverse(), "kind")
    assert by_id(other, ids, "kind")["kind"].equals(_join(other, ids, "kind")["kind"])
    assert rowid._kept(other) is not None and rowid._kept(other) is not rowid._kept(t.gpu)


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
    # unsorted and too sparse for a table: a binary search in the sorted ids
    far = pl.DataFrame({"i": [10**9, 5, 3 * 10**9], "v": ["a", "b", "c"]})
    assert rowid.positions(far, pl.Series([5])).to_list() == [1]
    assert by_id(far, pl.Series([3 * 10**9, 7, 5]), "v")["v"].to_list() == ["c", None, "b"]
    # ids with a null: the hash join
    holes = pl.DataFrame({"i": [4, None, 2], "v": ["a", "b", "c"]})
    assert rowid.positions(holes, pl.Series([2])) is None
    assert by_id(holes, pl.Series([2, None, 9, 4]), "v")["v"].to_list() == ["c", None, None, "a"]


def _expected(at: np.ndarray, keys: np.ndarray, miss: np.ndarray | None) -> list:
    where = {int(v): k for k, v in enumerate(at.tolist())}
    return [None if (miss is not None and miss[j]) else where.get(int(q)) for j, q in enumerate(keys.tolist())]


@pytest.mark.parametrize("case", ["dense", "dense_unsorted", "sparse_sorted", "sparse_unsorted", "negative",
                                  "kept"])
def test_locate_equals_a_dict_lookup(case, monkeypatch):
    """Each path of `locate` on the host and GPU row ids of a real trace (and shifted, shuffled, spread copies)."""
    t = load(REL)
    host, gpu = t.host["i"].to_numpy().astype(np.int64), t.gpu["i"].to_numpy().astype(np.int64)
    rng = np.random.default_rng(7)
    at, owner = {"dense": (gpu, None), "dense_unsorted": (rng.permutation(gpu), None),
                 "sparse_sorted": (gpu * 1000, None), "sparse_unsorted": (rng.permutation(gpu) * 1000, None),
                 "negative": (gpu - 500, None), "kept": (gpu, t.gpu)}[case]
    if case == "kept":
        monkeypatch.setattr(rowid, "_CACHE_MIN_ROWS", 0)
    keys = np.concatenate([host, at[::3], [at.max() + 1, 10**7]])
    if case.startswith("sparse"):
        keys = np.concatenate([keys * 1000, keys])
    miss = rng.random(keys.size) < 0.1
    for m in (None, miss):
        got = rowid.locate(at, keys, m, owner=owner)
        assert got.dtype == pl.UInt32 and got.to_list() == _expected(at, keys, m)
        assert got.drop_nulls().len() > 0
    if case == "kept":  # the table was kept for the frame and is reused
        assert rowid._kept(t.gpu) is not None
        assert rowid.locate(at, keys, owner=t.gpu).to_list() == _expected(at, keys, None)
    assert rowid.locate(at[:0], keys).null_count() == keys.size
    assert rowid.locate(at, keys[:0]).len() == 0


def test_forget_drops_a_frames_kept_table(monkeypatch):
    t = load(REL)
    monkeypatch.setattr(rowid, "_CACHE_MIN_ROWS", 0)
    ids = t.gpu["i"].head(100)
    expect = by_id(t.gpu, ids, "ts")
    assert rowid._kept(t.gpu) is not None
    rowid.forget(t.gpu)
    assert rowid._kept(t.gpu) is None
    assert by_id(t.gpu, ids, "ts").equals(expect)  # (built again)
