import json

import polars as pl
import pytest
import rulekit as k

LABELS = json.loads((k.SAMPLES / "gpu_h200_compile/labels.json").read_text())


def test_fires_on_fp32_gemm_without_tf32():
    assert LABELS["fp32_gemm_no_tf32"]["expected"] == "fp32-gemm"
    (f,) = k.findings("gpu_h200_compile/fp32_gemm_no_tf32.json.gz", "TV202")
    ev = f["evidence"]
    assert f["rule"] == "fp32-gemm" and f["severity"] == "error" and f["count"] == 3
    # an 8192^3 GEMM = 2 * 8192^3 FLOP in ~21.5 ms: ~51 TFLOP/s, 77 % of the H200's 67 TFLOP/s FP32 peak
    assert ev["achieved_tflops"] == pytest.approx(2 * 8192**3 / 21.55e-3 / 1e12, rel=0.02)
    assert ev["tf32_peak_tflops"] == 494.5 and ev["fp32_peak_tflops"] == 67.0
    # predicted TF32 time 21.5 ms * 67 / 494.5 = 2.92 ms per GEMM; the TF32 twin measures 2.66 ms per GEMM
    twin = k.trace("gpu_h200_compile/fp32_gemm_tf32.json.gz")
    tf32 = float(twin.gpu.filter(pl.col("kind") == "compute")["dur"].mean()) / 1000
    predicted = ev["predicted_tf32_time_us"] / 3
    assert abs(predicted - tf32) / tf32 < 0.15
    assert "set_float32_matmul_precision" in f["fix"] and "autocast" in f["fix"]


def test_silent_on_tf32_twin():
    assert LABELS["fp32_gemm_tf32"]["expected"] == "none"
    assert k.findings("gpu_h200_compile/fp32_gemm_tf32.json.gz", "TV202") == []


def test_tiny_latency_bound_fp32_gemms_save_nothing():
    # the optimizer traces' Linear layers are FP32 SIMT GEMMs too, but they reach ~2 % of the FP32 peak and the
    # host launches late: TF32 would not shorten the step
    for n in ("optimizer_single_tensor", "optimizer_fused"):
        assert k.findings(f"gpu_h200_compile/{n}.json.gz", "TV202") == []
