import json

import polars as pl
import rulekit as k

LABELS = json.loads((k.SAMPLES / "gpu_h200_compile/labels.json").read_text())


def test_fires_on_single_tensor_adamw():
    assert LABELS["optimizer_single_tensor"]["expected"] == "unfused-optimizer"
    (f,) = k.findings("gpu_h200_compile/optimizer_single_tensor.json.gz", "TV203")
    ev = f["evidence"]
    assert f["rule"] == "unfused-optimizer" and f["steps"] == [1, 2, 3]
    # 48 parameters x 8 AdamW ops (mul_ twice) = 384 kernels per step; counted independently below
    t = k.trace("gpu_h200_compile/optimizer_single_tensor.json.gz")
    spans = t.host.filter(pl.col("name") == "Optimizer.step#AdamW.step")
    launched = sum(t.gpu.filter(pl.col("launch_ts").is_between(s["ts"], s["end"])).height
                   for s in spans.iter_rows(named=True))
    assert ev["kernels_per_step"] * 3 == launched == 1152
    assert ev["estimated_parameters"] == 48 and ev["distinct_kernels"] == 7
    assert {o["op"] for o in ev["ops"]} == {"aten::mul_", "aten::add_", "aten::addcdiv_", "aten::addcmul_",
                                           "aten::div", "aten::lerp_", "aten::sqrt"}
    # the span is ~10 ms of host time per step; the fused twin's optimizer span is ~0.8 ms
    twin = k.trace("gpu_h200_compile/optimizer_fused.json.gz")
    fused = float(twin.host.filter(pl.col("name") == "Optimizer.step#AdamW.step")["dur"].mean()) / 1000
    saved = f["savings_us"] / 3
    assert abs(saved - (ev["host_time_per_step_us"] - fused)) / saved < 0.1
    assert "fused=True" in f["fix"] and "AdamW" in f["fix"]


def test_silent_on_fused_twin():
    assert LABELS["optimizer_fused"]["expected"] == "none"
    assert k.findings("gpu_h200_compile/optimizer_fused.json.gz", "TV203") == []
