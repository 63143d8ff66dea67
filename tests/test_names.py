"""analyses.names: a regex run on the distinct names gives the per-row `str.contains` answer."""

from __future__ import annotations

import re

import polars as pl

from tests.conftest import load, raw_events
from traceview.analyses import names
from traceview.analyses.names import contains, matching
from traceview.analyses.roofline import COMPUTE_KERNEL_RE

REL = "gpu_h200/train_tinygpt_modules.json.gz"


def test_kernel_regex_on_distinct_names_matches_every_row(monkeypatch):
    monkeypatch.setattr(names, "_MIN_ROWS", 0)  # the distinct-names path on this small trace
    g = load(REL).gpu
    got = g.filter(contains(g, COMPUTE_KERNEL_RE))
    # independent count: Python's re over the raw JSON kernel events (memcpy/memset names never match)
    pat = re.compile(COMPUTE_KERNEL_RE)
    expect = sum(1 for e in raw_events(REL) if e.get("cat") == "kernel" and pat.search(e.get("name", "")))
    assert got.height == expect == 252
    assert g.filter(pl.col("name").str.contains(COMPUTE_KERNEL_RE))["i"].equals(got["i"])
    # 53 distinct names among 987 GPU rows: the regex runs on those
    assert g["name"].n_unique() == 53
    assert matching(g["name"], COMPUTE_KERNEL_RE).len() < 53


def test_nulls_stay_null_like_str_contains(monkeypatch):
    monkeypatch.setattr(names, "_MIN_ROWS", 0)
    df = pl.DataFrame({"name": ["sgemm_128", None, "relu_kernel", "sgemm_128"]})
    a = df.select(contains(df, "gemm"))["name"]
    b = df.select(pl.col("name").str.contains("gemm"))["name"]
    assert a.to_list() == b.to_list() == [True, None, False, True]
    assert df.select(~contains(df, "gemm"))["name"].to_list() == [False, None, True, False]
