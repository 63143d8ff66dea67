"""Grouped-query attention (HF Llama: 16 query heads on 4 key/value heads) in FP32 runs SDPA's math backend on
torch 2.11; materialized-attention names the grouping and the fixes for it (ab_traced/llama_fp32)."""

import json

import rulekit as k

from traceview.analyses.attention import math_sdpa_gqa

AB = {t["problem"]: t for t in json.loads((k.SAMPLES / "ab_traced/labels.json").read_text())["twins"]}


def _rel(run: str) -> str:
    return next((k.SAMPLES / "ab_traced" / run).glob("*.pt.trace.json.gz")).relative_to(k.SAMPLES).as_posix()


def test_grouped_queries_read_from_the_math_backend_calls():
    # the heads the collector's command gave the model, read back from the trace's SDPA shapes
    cmd = AB["llama_fp32"]["problem_command"].split()
    heads, kv = int(cmd[cmd.index("--heads") + 1]), int(cmd[cmd.index("--kv-heads") + 1])
    assert (heads, kv) == (16, 4)
    assert math_sdpa_gqa(k.trace(_rel("llama_fp32"))) == (heads, kv)
    # not grouped: GPT-2's FP32 eager attention has no SDPA call, BERT's FP32 SDPA runs a fused kernel
    assert math_sdpa_gqa(k.trace(_rel("gpt2_eager_fp32_s512"))) is None
    assert math_sdpa_gqa(k.trace(_rel("bert_fp32_s512"))) is None


def test_the_fix_names_the_grouping_and_both_ways_out():
    (f,) = k.findings(_rel("llama_fp32"), "TV205")
    assert f["evidence"]["sdpa_math_backend"] and f["evidence"]["score_shape"]["heads"] == 16
    assert "16 query heads share 4 key/value heads" in f["fix"]
    assert "torch.autocast" in f["fix"] and "repeat_interleave(4, dim=1)" in f["fix"]
    # its BF16 twin's fix (autocast) was measured: 58.2 ms a step saved, GEMMs and attention together
    assert AB["llama_fp32"]["rule"] == "fp32-gemm+materialized-attention"


def test_eager_grouped_queries_are_named_in_the_eager_fix():
    # HF Llama's eager attention repeats K and V from 4 heads to 16 (repeat_kv: expand of [B, 4, 1, N, d], then a copy)
    from traceview.analyses.attention import repeated_kv_heads

    assert repeated_kv_heads(k.trace(_rel("llama_eager_attn")), 16, 1024) == 4
    assert repeated_kv_heads(k.trace(_rel("gpt2_eager_attn")), 12, 512) is None  # GPT-2: one K/V head per query head
    (f,) = k.findings(_rel("llama_eager_attn"), "TV205")
    assert f["evidence"]["score_shape"] == {"heads": 16, "n_q": 1024, "n_kv": 1024}
    assert "repeated from 4 heads to 16" in f["fix"] and "enable_gqa=True" in f["fix"]
    (g,) = k.findings(_rel("gpt2_eager_attn"), "TV205")
    assert "repeated from" not in g["fix"]
