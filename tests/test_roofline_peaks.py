"""No op runs faster than its math unit's peak: FP32 convolutions that cuDNN runs on TF32 Tensor Cores (PyTorch's
default, `torch.backends.cudnn.allow_tf32`) and FP32 GEMMs under `set_float32_matmul_precision("high")` are measured
against the TF32 peak. Against the FP32 peak, ResNet-18's convolutions read 149 % of peak and a conv stack's 255 %."""

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent / "rules"))
import rulekit as k  # noqa: E402

from traceview.analyses.roofline import kernel_bound, peak_expr  # noqa: E402
from traceview.analyses.specs import trace_spec  # noqa: E402


@pytest.mark.parametrize("rel", ["collected4/conv_fp32", "ab_traced/resnet18_fp32", "ab_traced/gpt2_tf32_vocab",
                                 "ab_traced/gpt2_fp32"])
def test_gemm_and_conv_ops_stay_under_their_peak(rel):
    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))
    spec = trace_spec(t.meta)
    kb = kernel_bound(t, spec).filter(pl.col("category").is_in(["gemm", "conv"]) & pl.col("flops").is_not_null())
    kb = kb.join(t.gpu.select("i", "dur", "name"), on="i").with_columns(peak=peak_expr(spec))
    per = kb.group_by("op").agg(pl.col("flops").sum(), pl.col("dur").sum(), pl.col("peak").first(),
                                pl.col("tf32").first(), pl.col("bpe").first())
    per = per.with_columns(share=pl.col("flops") / (pl.col("dur") * 1e-9) / pl.col("peak"))
    assert per.height > 0
    assert per["share"].max() <= 1.0
    fp32 = per.filter(pl.col("bpe") == 4)
    # FP32 operands on TF32 kernels are the ones the FP32 peak could not explain; FP32 SIMT GEMMs (gpt2_fp32)
    # keep the FP32 peak
    tf32_named = kb.filter(pl.col("name").str.contains("(?i)tf32|s1688"))["op"].unique()
    assert fp32.filter(pl.col("op").is_in(tf32_named.implode()))["tf32"].all()
    assert not fp32.filter(~pl.col("op").is_in(tf32_named.implode()))["tf32"].any()
    if rel == "ab_traced/gpt2_fp32":
        assert not fp32["tf32"].any() and fp32.height > 0
    else:
        assert fp32["tf32"].sum() > 0


@pytest.mark.parametrize("rel", ["ab_traced/bert_eager_attn_s128", "collected3/gpt2_sdpa"])
def test_nll_loss_kernels_move_no_more_than_the_bandwidth(rel):
    # the loss reads one logit per target: counted as the whole [N, vocab] logits, BERT's loss kernels moved
    # 6x the H200's HBM bandwidth in their measured time
    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))
    spec = trace_spec(t.meta)
    kb = kernel_bound(t, spec).filter(pl.col("op_name").str.starts_with("aten::nll_loss"))
    kb = kb.join(t.gpu.select("i", "dur"), on="i")
    assert set(kb["op_name"]) == {"aten::nll_loss_forward", "aten::nll_loss_backward"}
    assert (kb["bytes"] / (kb["dur"] * 1e-9)).max() <= spec.bw
    # one per target: BERT's 32 x 128 tokens, GPT-2's 8 x 511 (its labels shifted by one token)
    assert kb["flops"].max() == (32 * 128.0 if "bert" in rel else 8 * 511.0)


@pytest.mark.parametrize("rel", ["ab_traced/bert_eager_attn_s128", "ab_traced/ddp_accum4_gpt2"])
def test_copy_kernels_move_no_more_than_the_bandwidth(rel):
    # copy_(self, src) reads src and writes self: counted as an elementwise op that also reads self, BERT's and
    # GPT-2's copies moved 1.35x the HBM bandwidth in their measured time
    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))
    spec = trace_spec(t.meta)
    kb = kernel_bound(t, spec).filter(pl.col("op_name") == "aten::copy_").join(t.gpu.select("i", "dur"), on="i")
    kb = kb.filter(pl.col("dur") > 5000)  # (a few µs: launch latency, not bandwidth)
    assert kb.height > 100
    assert (kb["bytes"] / (kb["dur"] * 1e-9)).max() <= spec.bw


def test_old_split_convolution_backward_ops():
    # PyTorch 1.8's cudnn_convolution_backward_weight(weight_size, grad_output, input, ...): the weight's size is an
    # int list the trace does not record, so its FLOPs are unknown (read as a forward convolution of grad_output by
    # input they came out 500x the V100's peak); backward_input(input_size, grad_output, weight, ...) is dgrad only
    import msgspec

    from traceview.analyses.opshapes import decode
    from traceview.analyses.roofline import op_cost

    t = k.trace("kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    ops = t.host.filter(pl.col("name").str.starts_with("aten::cudnn_convolution_backward_"))
    ops = ops.select("name", "input_dims", "input_type").unique()
    assert set(ops["name"]) == {"aten::cudnn_convolution_backward_weight", "aten::cudnn_convolution_backward_input"}
    for name, d, ty in ops.iter_rows():
        cat, flops, byts, _ = op_cost(name, msgspec.json.decode(d), msgspec.json.decode(ty))
        (go, _), (second, _) = decode(d, ty)[:2]
        assert cat == "conv" and byts > 0
        if name.endswith("_weight"):
            assert flops is None
        else:
            assert flops == 2.0 * np.prod(go) * np.prod(second[1:])


def test_predicates_write_one_byte_an_element():
    # SDPA's math backend on HF Llama's FP32 grouped-query attention runs isneginf over its [4, 16, 1024, 1024] FP32
    # scores (torch >= 2.5 zeroes fully masked rows): counted as writing FP32, its kernels moved 1.4x the H200's
    # bandwidth; a bool is one byte. where(cond, a, b) writes its values' width, not the condition's
    t = k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / "ab_traced/llama_fp32").glob("*.pt.trace.json*")))
    spec = trace_spec(t.meta)
    kb = kernel_bound(t, spec).join(t.gpu.select("i", "dur"), on="i")
    neg = kb.filter(pl.col("op_name") == "aten::isneginf")
    assert neg.height == 8 * 3  # one a layer (8), forward, in 3 steps
    elems = 4 * 16 * 1024 * 1024
    assert neg["bytes"].to_list() == [elems * (4 + 1)] * neg.height
    assert (neg["bytes"] / (neg["dur"] * 1e-9)).max() <= spec.bw
    from traceview.analyses.roofline import io_bytes, op_cost

    cond, vals = [4, 1, 1024, 1024], [4, 16, 1024, 1024]
    assert op_cost("aten::where", [cond, vals, []], ["bool", "float", "Scalar"])[2] == elems * 1 / 16 + elems * 4 + elems * 4
    assert io_bytes([vals], ["float"], "aten::isneginf") == (elems * 4.0, 0.0, elems * 1.0)
    assert io_bytes([vals], ["float"], "aten::neg")[2] == elems * 4.0
