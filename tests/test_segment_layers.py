"""layers.segment_layers: the per-thread binary search (few threads) names the same layer per classifier
segment as the cross join + as-of join over every thread it replaces."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import load
from traceview.analyses import layers as L
from traceview.ruleapi import RuleContext


@pytest.mark.parametrize("rel", ["gpu_h200/train_tinygpt_modules.json.gz", "gpu_h200_real/hf_gpt2_train_bf16.json.gz"])
def test_few_threads_search_equals_cross_join(rel, monkeypatch):
    t = load(rel)
    # two host threads with layered ops (main + autograd): the multi-thread path
    top = L._top_ops(t).filter(pl.col("layer") != L.UNATTRIBUTED)
    assert top.select("pid", "tid").unique().height == 2
    ctx, _ = RuleContext.prepare(t, t.steps)
    fast = L.segment_layers(t, ctx.part)
    monkeypatch.setattr(L, "_FEW_THREADS", 0)
    slow = L.segment_layers(t, ctx.part)
    assert fast.equals(slow)
    # most segments get a layer; their total time matches segment by segment
    named = fast.filter(pl.col("layer") != L.UNATTRIBUTED)
    assert named.height > fast.height // 2
    assert int((fast["end"] - fast["ts"]).sum()) == int((ctx.part["end"] - ctx.part["ts"]).sum())
