"""Attention FLOPs do not depend on which op of a fused call the kernel hangs off: SDPA's `_scaled_dot_product_*`
ops take Q, K, V as [B, H, N, d], the flash / memory-efficient ops under them as [B, N, H, d] (read as the first
layout, ViT-B/16's FP32 attention counted 197/12 = 16x too few FLOPs and the flash ones 2048/16 = 128x)."""

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent / "rules"))
import rulekit as k  # noqa: E402

from traceview.analyses.roofline import op_costs  # noqa: E402

INNER = r"^aten::_(flash|efficient)_attention_(forward|backward)$"


@pytest.mark.parametrize(
    ("rel", "b", "h", "n", "d"),
    [("collected4/attn_flash_s2048", 4, 16, 2048, 64),  # flash, BF16
     ("ab_traced/vit_fp32", 64, 12, 197, 64)],  # memory-efficient, FP32 (ViT-B/16: 196 patches + the class token)
)
def test_inner_and_outer_attention_ops_agree(rel, b, h, n, d):
    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))
    host = t.host.select("i", "name", "parent")
    inner = host.filter(pl.col("name").str.contains(INNER))
    assert inner.height > 0
    pairs = inner.join(host.select(pl.col("i").alias("parent"), pl.col("name").alias("outer")), on="parent")
    assert (pairs["outer"].str.starts_with("aten::_scaled_dot_product_")).all()
    ids = pl.concat([pairs["i"], pairs["parent"]]).unique()
    cost = dict(op_costs(t, ids).select("op", "flops").iter_rows())
    forward = 4.0 * b * h * n * n * d  # Q·K^T and P·V, 2 FLOPs a multiply-add
    for i, p, name in pairs.select("i", "parent", "name").iter_rows():
        want = forward * (2.5 if "backward" in name else 1.0)
        assert cost[i] == pytest.approx(want)
        assert cost[p] == pytest.approx(want)  # the SDPA op above it, in its own layout


@pytest.mark.parametrize(
    ("rel", "sdpa", "eager"),
    [("ab_traced/gpt2_fp32", 0.625, 1.0),  # GPT-2 (a causal LM) on SDPA, is_causal=True, 512 tokens: 5 of 8 tiles
     ("ab_traced/bert_fp32_s512", 1.0, 1.0),  # BERT (bidirectional) on SDPA
     ("ab_traced/gpt2_eager_fp32_s1024", 1.0, 0.5625),  # eager GPT-2: its [B, 1, N, N] causal mask added to the scores
     ("ab_traced/bert_eager_attn_s512", 1.0, 1.0),  # eager BERT: no mask over queries x keys
     ("collected4/attn_eager_s2048", 1.0, 0.53125),  # a [N, N] masked_fill mask, 2048 tokens: 17 of 32 tiles
     ("collected4/attn_math_s2048", 0.53125, 0.53125)],  # SDPA's math backend with is_causal=True
)
def test_causal_share(rel, sdpa, eager):
    from traceview.analyses.attention import eager_causal
    from traceview.analyses.causal import sdpa_causal

    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))
    assert sdpa_causal(t) == sdpa
    assert eager_causal(t) == eager
