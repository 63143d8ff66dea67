"""The event frames' compact dtypes (issue 32: memory bounded by the work) and the replay graph's 32-bit rows."""

from __future__ import annotations

import numpy as np
import polars as pl
from conftest import load, raw_events

from traceview.analyses.replay_graph import build
from traceview.ingest.categories import GPU_CATS, HOST_CATS
from traceview.model import schema_problems

REL = "gpu_h200/train_tinygpt_modules.json.gz"  # 15 k host rows: the loader's large-trace path (> 4096 rows)

#: the columns kept narrower than Int64 / String: row ids and tree links 32-bit, args text as dictionary codes
NARROW = {
    "host": {"i": pl.UInt32, "parent": pl.UInt32, "op": pl.UInt32, "depth": pl.Int32, "input_dims": pl.Categorical,
             "input_type": pl.Categorical, "concrete": pl.Categorical, "strides": pl.Categorical},
    "gpu": {"i": pl.UInt32, "launch": pl.UInt32, "op": pl.UInt32, "graph": pl.Boolean},
}


def test_event_frames_keep_their_compact_dtypes():
    t = load(REL)
    assert schema_problems(t) == []
    for frame, cols in NARROW.items():
        got = getattr(t, frame).schema
        assert {c: got[c] for c in cols} == cols, frame


def test_absent_args_are_null_columns_of_their_declared_dtype():
    """An args field no event of the file carries is a column of nulls (of the declared dtype), one some event
    carries is not: counted on the raw JSON."""
    t = load(REL)
    ev = [e for e in raw_events(REL) if e.get("ph") == "X"]
    host = [e.get("args", {}) for e in ev if e.get("cat") in HOST_CATS]
    gpu = [e.get("args", {}) for e in ev if e.get("cat") in GPU_CATS]
    for col, key in (("in_nelems", "In msg nelems"), ("seq", "Sequence number"), ("correlation", "correlation")):
        n = sum(key in a for a in host)
        assert t.host.height - t.host[col].null_count() == n, col
        assert t.host[col].dtype == pl.Int64
    for col, key in (("graph_id", "graph id"), ("regs", "registers per thread"), ("correlation", "correlation")):
        n = sum(key in a for a in gpu)
        assert t.gpu.height - t.gpu[col].null_count() == n, col
        assert t.gpu[col].dtype == pl.Int64
    assert t.gpu["graph_id"].null_count() == t.gpu.height  # (this trace has no CUDA graph)
    assert t.gpu["regs"].null_count() < t.gpu.height


def test_replay_rows_are_32_bit_and_found_by_id():
    t = load(REL)
    rows = build(t).seg_rows
    assert (rows.i.dtype, rows.seg.dtype, rows.kind.dtype, rows.where.dtype) == (np.uint32, np.int32, np.int8, np.int8)
    assert rows.i.size > 10_000 and np.unique(rows.i).size == rows.i.size
    # every row found from its id, in any order (int64 ids, as the transforms give them), an unknown id left out
    rng = np.random.default_rng(0)
    ids = rng.permutation(rows.i.astype(np.int64))
    p = rows.positions(np.concatenate([ids, [-1, int(t.host["i"].max()) + 1]]))
    assert p.size == ids.size and np.array_equal(rows.i[p].astype(np.int64), ids)
    # the independent lookup: a dict of id -> position
    where = {int(i): k for k, i in enumerate(rows.i.tolist())}
    assert p[:50].tolist() == [where[int(i)] for i in ids[:50]]
