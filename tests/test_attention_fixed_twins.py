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


def _main_tid(c) -> int:
    """The thread of the profiler's step spans (the forward's and the optimizer's; autograd's device thread runs the
    backward)."""
    return int(c.trace.host.filter(pl.col("name").str.starts_with("ProfilerStep#"))["tid"][0])


def _phase_ms(c, gpu_dur: dict[int, int] | None = None) -> tuple[float, float]:
    """(forward, backward) kernel time a step (ms), by the thread that launched each kernel; `gpu_dur`: a fix's new
    durations."""
    g = _in_steps(c, c.trace.gpu.filter(pl.col("kind") == "compute")).select("i", "dur", "launch_tid")
    if gpu_dur:
        new = pl.DataFrame({"i": list(gpu_dur), "new": list(gpu_dur.values())},
                           schema={"i": g["i"].dtype, "new": pl.Int64})
        g = g.join(new, on="i", how="left").with_columns(dur=pl.coalesce("new", "dur"))
    fw = pl.col("launch_tid") == _main_tid(c)
    return tuple(float(g.filter(f)["dur"].sum()) / c.steps.height / 1e6 for f in (fw, ~fw))


@pytest.mark.parametrize(
    ("eager", "fixed", "fw_sdpa_ms", "bw_sdpa_ms"),
    [("ab_traced/bert_eager_attn_s512_h100", "ab_traced/bert_eager_attn_s512_h100_fixed", 12.42, 17.68),
     ("ab_traced/llama_eager_attn_h100", "ab_traced/llama_eager_attn_h100_fixed", 10.89, 11.85),
     ("ab_traced/gpt2_eager_attn", "collected3/gpt2_sdpa", 10.52, 12.18)],
)
def test_fix_phase_by_phase(eager, fixed, fw_sdpa_ms, bw_sdpa_ms):
    """The device time the fix leaves, forward and backward apart, against the SDPA program's own kernels: the
    forward within 4 % (the fused price and the kernels removed agree there), the backward 0.2-1.7 ms above it —
    cuDNN's fused backward beats the priced share (BERT at 512 tokens: 160 µs a call, priced 217) and BERT's SDPA
    runs none of the gradient-layout copies the transform keeps (`test_gradient_layout_copies`). The H100 twins'
    misses are not the device's: Llama's saving is 14.1 ms short and the device explains 0.7 of it; BERT's at 512
    tokens is 5.3 ms over and the device's 1.7 ms would add to it (both fixed steps run host-bound:
    docs/predictions.md)."""
    p, f = _ctx(eager), _ctx(fixed)
    tf = MOD.fix_transform(p.for_rule(MOD, Options().options_for(MOD)))
    fw, bw = _phase_ms(p, tf.gpu_dur)
    fw_s, bw_s = _phase_ms(f)
    # the SDPA programs' own kernel time (the trace's, not the tool's); the transform's is held to it below
    assert (fw_s, bw_s) == pytest.approx((fw_sdpa_ms, bw_sdpa_ms), abs=0.01)
    assert fw == pytest.approx(fw_s, rel=0.04)
    assert 0.1 < bw - bw_s < 1.8


def _view_copies(c) -> float:
    """Copy kernels a step under the autograd node of a `view` (`ViewBackward0`): an incoming gradient put back in the
    layout of the tensor viewed (a head split's [B, N, H, d] from a gradient laid out [B, H, N, d])."""
    from traceview.analyses.tree import ancestor_ids

    h = c.trace.host
    node = ((h["cat"] == "cpu_op") & (h["fwd_tid"].fill_null(0) > 0) & h["seq"].is_not_null()).to_numpy()
    g = _in_steps(c, c.trace.gpu.filter(pl.col("kind") == "compute")).filter(pl.col("op").is_not_null())
    ops = g.select("op").unique().join(h.select(pl.col("i").alias("op"), "name"), on="op")
    ops = ops.filter(pl.col("name") == "aten::copy_")
    top = ancestor_ids(h, ops["op"], node)
    names = dict(zip(h["i"].to_list(), h["name"].to_list(), strict=True))
    view = ops.filter(pl.Series([names.get(int(x)) == "ViewBackward0" for x in top]))["op"]
    return g.filter(pl.col("op").is_in(view.implode())).height / c.steps.height


@pytest.mark.parametrize(
    ("eager", "fixed", "operand_copies", "eager_copies", "sdpa_copies"),
    [("ab_traced/bert_eager_attn_s512_h100", "ab_traced/bert_eager_attn_s512_h100_fixed", 3, 36, 0),
     ("ab_traced/gpt2_eager_attn", "collected3/gpt2_sdpa", 1, 12, 12),
     ("ab_traced/llama_eager_attn_h100", "ab_traced/llama_eager_attn_h100_fixed", 1, 24, 24)],
)
def test_gradient_layout_copies(eager, fixed, operand_copies, eager_copies, sdpa_copies):
    """Why the transform keeps the backward's gradient-layout copies: whether SDPA still runs them is the library's
    path, not the eager trace's. BERT's SDPA runs none of its 36 a step (3 a layer: cuDNN returns dQ, dK and dV
    in the strides of the head split's views); GPT-2's and Llama's run every one, though their eager matmuls copied
    an operand in the forward too (one a call), as BERT's copied three."""
    from traceview.analyses.attention import GEMM_WRAPPERS
    from traceview.analyses.tree import ancestor_ids

    p, f = _ctx(eager), _ctx(fixed)
    kern = MOD._kernels(p.for_rule(MOD, Options().options_for(MOD))).join(p.trace.gpu.select("i", "launch_tid"), on="i")
    h = p.trace.host
    # the forward's operand copies: copy kernels of a forward call, launched under aten::matmul, of a Q, K or V (no
    # score shape: BERT's and Llama's matmuls copy their probabilities too)
    fwd = kern.filter((pl.col("launch_tid") == _main_tid(p)) & pl.col("heads").is_null())
    fwd = fwd.join(h.select(pl.col("i").alias("op"), pl.col("name").alias("n")), on="op").filter(pl.col("n") == "aten::copy_")
    under = ancestor_ids(h, fwd["op"], h["name"].is_in(list(GEMM_WRAPPERS)).to_numpy()) >= 0
    per_call = fwd.filter(pl.Series(under)).group_by("call").len()["len"]
    assert per_call.len() == kern.filter(pl.col("launch_tid") == _main_tid(p))["call"].n_unique()
    assert (per_call == operand_copies).all()
    assert (_view_copies(p), _view_copies(f)) == (eager_copies, sdpa_copies)
