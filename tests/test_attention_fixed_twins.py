"""The materialized-attention fix against what the fixed program's own trace runs (SDPA, recorded alone on the same
GPU): one fused call per attention call (`attention_calls`: Llama's eager attention is three runs of score kernels
a forward, split by autocast's casts of Q, K and V, and SDPA runs one call for all three), the device time the
transform takes off against the eager and SDPA steps' kernel time, and the fused kernels' price against the
fixed trace's cuDNN kernels."""

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent / "rules"))
import rulekit as k  # noqa: E402
from traceview.rules import BY_NAME  # noqa: E402

from traceview.analyses.attention import FUSED_ATTN_KERNEL_RE  # noqa: E402
from traceview.options import Options  # noqa: E402
from traceview.report import rule_context, select_steps  # noqa: E402

MOD = BY_NAME["materialized-attention"]
#: the fused backends' ops, forward and backward: one each per attention call
FUSED_CALL_RE = r"^aten::_(flash|efficient|cudnn)_attention_(forward|backward)$"


def _ctx(rel: str):
    path = next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*"))
    t = k.trace(path)
    ctx, _, _ = rule_context(t, select_steps(t, None), None)
    return ctx


def _in_steps(ctx, df: pl.DataFrame) -> pl.DataFrame:
    return df.filter((pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))


@pytest.mark.parametrize(
    ("eager", "fixed", "calls", "runs", "removed_ms", "saved_ms", "fused_ms", "sdpa_ms"),
    [
        # HF BERT-base, 12 layers, 16 x 512 tokens, bf16, H100: one run a call already
        ("ab_traced/bert_eager_attn_s512_h100", "ab_traced/bert_eager_attn_s512_h100_fixed", 24, 24,
         19.43, 21.20, 3.648, 2.903),
        # HF Llama, 8 layers, 16 query heads on 4 x 1024 tokens, bf16, H100: repeat_kv's copies, Q·K^T to softmax
        # and the cast to P·V are three runs a forward, two a backward
        ("ab_traced/llama_eager_attn_h100", "ab_traced/llama_eager_attn_h100_fixed", 16, 40,
         15.32, 16.35, 1.824, 1.237),
        # HF GPT-2, 6 layers, 8 x 512 tokens, bf16, H200 (its SDPA twin recorded in collected3)
        ("ab_traced/gpt2_eager_attn", "collected3/gpt2_sdpa", 12, 12, 3.92, 4.09, 0.570, 0.629),
    ],
)
def test_fix_matches_the_fixed_programs_trace(eager, fixed, calls, runs, removed_ms, saved_ms, fused_ms, sdpa_ms):
    p, f = _ctx(eager), _ctx(fixed)
    n, nf = p.steps.height, f.steps.height
    rc = p.for_rule(MOD, Options().options_for(MOD))
    kern = MOD._kernels(rc)
    # one fused call per attention call: as many as the SDPA program's fused forward and backward ops
    fused_ops = _in_steps(f, f.trace.host.filter(pl.col("name").str.contains(FUSED_CALL_RE)))
    assert fused_ops.height / nf == calls
    assert kern["call"].n_unique() / n == calls
    assert kern["run"].n_unique() / n == runs
    # the device time the transform takes off, against the eager step's kernels less the SDPA step's
    tf = MOD.fix_transform(rc)
    g = p.trace.gpu.filter(pl.col("i").is_in(list(tf.gpu_dur))).select("i", "dur")
    new = pl.Series([tf.gpu_dur[int(i)] for i in g["i"]])
    removed = float((g["dur"] - new.clip(upper_bound=g["dur"])).sum()) / n / 1e6
    assert removed == pytest.approx(removed_ms, abs=0.01)

    def kernel_ms(c) -> float:
        return float(_in_steps(c, c.trace.gpu.filter(pl.col("kind") == "compute"))["dur"].sum()) / c.steps.height / 1e6

    saved = kernel_ms(p) - kernel_ms(f)
    assert saved == pytest.approx(saved_ms, abs=0.01)
    assert removed == pytest.approx(saved, rel=0.10)  # what SDPA took off the device, within 10 %
    # the fused calls' price against the fixed trace's fused kernels (cuDNN's SDPA): the efficiency is the
    # median of 14 programs, so one program's own kernels sit within its spread (BERT +26 %, Llama +47 %, GPT-2 -9 %)
    fused = float(MOD._runs(rc)["fused_time"].sum()) / n / 1e6
    assert fused == pytest.approx(fused_ms, abs=0.002)
    fk = _in_steps(f, f.trace.gpu.filter(pl.col("name").str.contains(FUSED_ATTN_KERNEL_RE)))
    sdpa = float(fk["dur"].sum()) / nf / 1e6
    assert sdpa == pytest.approx(sdpa_ms, abs=0.002)
    assert 0.8 < fused / sdpa < 1.5
