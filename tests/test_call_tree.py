"""analyses.tree.call_tree (sorts and binary searches over all threads at once) against the straightforward walk:
per thread, in the call tree's order, a slice's depth is the number of earlier slices still open at its start
(ending after it), and its parent the last earlier slice one level up."""

from __future__ import annotations

import bisect

import polars as pl
import pytest
from conftest import load

from traceview.analyses import tree

TRACES = [
    "gpu_h200/train_tinygpt_modules.json.gz",  # 21 levels of modules, ops and launches
    "hta/trace_diff/test/test.json.gz",  # 3 threads, 9.5 k zero-length slices
    "hta/rank_non_gpu/rank_non_gpu.json.gz",  # zero-length slices, no GPU
]


def _walk(host: pl.DataFrame) -> tuple[list[int], list[int | None]]:
    """(depth, parent id) per row of `host`, one slice at a time."""
    ts, dur = host["ts"].to_numpy(), host["dur"].to_numpy()
    order, gid = tree._order(host, host["pid"].to_numpy(), host["tid"].to_numpy(), ts, dur)
    ids = host["i"].to_list()
    depth: list[int] = [0] * host.height
    parent: list[int | None] = [None] * host.height
    thread, ends, last = None, [], {}
    for r in order.tolist():
        if gid[r] != thread:  # a new thread: nothing open
            thread, ends, last = gid[r], [], {}
        d = len(ends) - bisect.bisect_right(ends, int(ts[r]))  # earlier slices ending after this one starts
        depth[r] = d
        parent[r] = ids[last[d - 1]] if d > 0 and d - 1 in last else None
        last[d] = r
        bisect.insort(ends, int(ts[r] + dur[r]))
    return depth, parent


@pytest.mark.parametrize("rel", TRACES)
def test_call_tree_equals_the_walk(rel: str) -> None:
    host = load(rel).host.drop("depth", "parent", "op")
    got = tree.call_tree(host)
    depth, parent = _walk(host)
    assert got["depth"].to_list() == depth
    assert got["parent"].to_list() == parent
    assert got["depth"].max() >= 5 and got["parent"].null_count() < host.height  # a real tree, not a flat list
    if rel.startswith("hta/trace_diff"):  # the paths for several threads and for zero-length slices ran
        assert (host["dur"] == 0).sum() > 1000 and host.select(pl.struct("pid", "tid").n_unique()).item() == 3
