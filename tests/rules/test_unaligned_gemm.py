"""TV208 unaligned-gemm on the twins recorded for it (sample_traces/ab_traced, one process each: the trace, then the
problem and its padded twin timed unprofiled in ABBA rounds) and on the misalignment test itself."""

import functools
import json

import pytest
import rulekit as k

from traceview.analyses.alignment import misaligned
from traceview.report import analyze

AB = json.loads((k.SAMPLES / "ab_traced/labels.json").read_text())
TWIN = {t["problem"]: t for t in AB["twins"]}
BF = "c10::BFloat16"


@functools.cache
def doc(rel: str) -> dict:
    return analyze([str(next((k.SAMPLES / rel).glob("*.pt.trace.json*")))]).to_dict()["traces"][0]


def tv208(rel: str) -> list[dict]:
    return [f for f in doc(rel)["findings"] if f["code"] == "TV208"]


@pytest.mark.parametrize(("name", "dims", "types", "strides", "want"), [
    # GPT-2's LM head forward: the weight's transposed view is [768, 50257] with rows of 768; the output's are 50257
    ("aten::mm", [[4096, 768], [768, 50257]], [BF, BF], [[768, 1], [1, 768]], (2, [50257])),
    # its weight gradient: A = the logits' gradient transposed, rows of 50257
    ("aten::mm", [[50257, 4096], [4096, 768]], [BF, BF], [[1, 50257], [768, 1]], (2, [50257])),
    # M = 4095 with A row-major: every row is 4096 long, nothing to pad (measured: 1.00x)
    ("aten::mm", [[4095, 4096], [4096, 8192]], [BF, BF], [[4096, 1], [8192, 1]], None),
    # ... and A transposed: its rows are 4095 long (measured: 5.5x)
    ("aten::mm", [[4095, 4096], [4096, 8192]], [BF, BF], [[1, 4095], [8192, 1]], (2, [4095])),
    # a multiple of 8, not of 64: aligned (measured <= 6 %)
    ("aten::mm", [[16384, 2048], [2048, 1000]], [BF, BF], [[2048, 1], [1000, 1]], None),
    # FP32 (TF32): 4 elements make 16 bytes
    ("aten::mm", [[4096, 4096], [4096, 8190]], ["float", "float"], None, (4, [8190])),
    ("aten::mm", [[4096, 4096], [4096, 8188]], ["float", "float"], None, None),
    # no strides recorded: each operand contiguous, linear's output rows = the weight's first dim
    ("aten::linear", [[8, 512, 768], [50257, 768], [50257]], [BF, BF, BF], None, (2, [50257])),
    ("aten::addmm", [[30522], [4096, 768], [768, 30522], [], []], [BF, BF, BF, "Scalar", "Scalar"],
     [[1], [768, 1], [1, 768], [], []], (2, [30522])),
    # a dimension of size 1 has no rows to align (a batch-1 GEMV's [1, K] input)
    ("aten::mm", [[1, 768], [768, 4096]], [BF, BF], [[5, 1], [4096, 1]], None),
    # not a GEMM the model reads (a 1-D operand)
    ("aten::mm", [[768], [768]], [BF, BF], None, None),
])
def test_misaligned(name, dims, types, strides, want):
    assert misaligned(name, dims, types, strides) == want


def test_lm_head_twin_priced_by_the_replay():
    """The LM head alone (x [4096, 768] . W^T [768, 50257] and its two gradient GEMMs, bf16): 7.87 ms a step
    measured against 1.21 padded to 50304 in the trace's own process. The finding names the rows and the padded
    size, and its aligned time per GEMM is the padded twin's measured step over its three GEMMs, within 20 %."""
    rel = "ab_traced/unaligned_gemm"
    (f,) = tv208(rel)
    ev, t = f["evidence"], TWIN["unaligned_gemm"]
    assert f["severity"] == "error" and f["count"] == 9 and ev["dims"] == [50257] and ev["padded_dims"] == [50304]
    assert ev["bytes_per_element"] == 2 and "cutlass_75" in ev["top_kernel"]  # the sm75-era fallback on an H200
    assert ev["predicted_aligned_time_us"] / 9 == pytest.approx(t["fixed_step_ms"] * 1000 / 3, rel=0.2)
    # the saving is the replay's, within the band of the measured one
    assert f["savings_us"] / 1000 == pytest.approx(t["measured_fix_saving_ms"], rel=0.2)
    assert "50304" in f["fix"] and "pad_to_multiple_of=64" in f["fix"]


def test_gpt2_vocabulary_twin():
    """HF GPT-2 (6 layers, batch 8 x 512, bf16 autocast, SDPA): vocabulary 50257 -> 50304 saves 6.66 ms of 23.59
    measured; the finding is what to fix first and prices it within 20 %."""
    rel = "ab_traced/gpt2_vocab"
    (f,) = tv208(rel)
    t = TWIN["gpt2_vocab"]
    assert f["evidence"]["dims"] == [50257] and f["severity"] in ("warning", "error")
    assert f["savings_us"] / 1000 == pytest.approx(t["measured_fix_saving_ms"], rel=0.2)
    d = doc(rel)
    assert d["classification"]["primary"] == "gpu_compute" and d["projection"]["fixes"][0]["code"] == "TV208"


@pytest.mark.parametrize("rel", ["ab_traced/gpt2_vocab_padded", "collected3/gpt2_sdpa_compiled"])
def test_silent_where_the_rows_are_aligned(rel):
    # the padded model, and the compiled one (Inductor pads the LM head to 50264: its GEMMs are aligned)
    assert tv208(rel) == []


def test_host_bound_step_saves_nothing():
    """HF BERT (12 layers, batch 32 x 128, bf16) with its 30522-token MLM head: the fallback GEMMs take 2.4 ms a
    step, but the step is host-bound (35.5 ms measured, the GPU busy a fraction of it), so padding to 30528 saves
    nothing measurable (-3.3 ms, rounds -8.8 to +2.5) and the replay says 0: the finding stays at info."""
    fs = tv208("ab_traced/bert_vocab")
    assert TWIN["bert_vocab"]["measured_fix_saving_ms"] < 0.5
    assert all(f["severity"] == "info" and f["savings_us"] < 100 for f in fs)


def test_fp32_simt_gemms_are_fp32_gemms():
    # GPT-2 in FP32 with TF32 off runs its LM head on the CUDA cores: TF32 first (fp32-gemm), not alignment
    assert tv208("ab_traced/gpt2_fp32") == []
    assert any(f["code"] == "TV202" for f in doc("ab_traced/gpt2_fp32")["findings"])


def test_the_stride_principle_on_measured_gemms():
    """`misaligned` against the H200 measurements (sample_traces/ab_traced/gemm_alignment_h200.ndjson: each GEMM
    timed with CUDA events against the same GEMM padded to a multiple of 64): of the compute-bound shapes (M >= 512),
    every one it calls misaligned ran >= 1.5x slower, every one it calls aligned within 1.1x — whichever operand is
    transposed, in bf16, fp16 and TF32."""
    dtype = {"bfloat16": BF, "float16": "c10::Half", "float32": "float"}
    rows = [json.loads(x) for x in (k.SAMPLES / "ab_traced/gemm_alignment_h200.ndjson").read_text().splitlines()]
    checked = 0
    for r in rows:
        m, n, kk = r["m"], r["n"], r["k"]
        if m < 512:
            continue
        sa = [1, m] if r["ta"] else [kk, 1]  # A [M, K]: a transposed view of [K, M], or row-major
        sb = [1, kk] if r["tb"] else [n, 1]
        t = dtype[r["dtype"]]
        bad = misaligned("aten::mm", [[m, kk], [kk, n]], [t, t], [sa, sb]) is not None
        ratio = r["ms"] / r["padded_ms"]
        assert (ratio >= 1.5) if bad else (ratio <= 1.1), r
        checked += 1
    assert checked == 54
