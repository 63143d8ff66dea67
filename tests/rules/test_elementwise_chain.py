import rulekit as k


def test_eager_chain_of_8():
    _, f, _ = k.run("gpu_h200/elementwise_chain_eager.json.gz", "TV201")
    (x,) = f
    ev = x["evidence"]
    assert ev["kernels_per_chain"] == 8 and x["count"] == 3 and ev["chains_per_step"] == 1.0
    assert ev["ops"] == ["aten::mul", "aten::add", "aten::clamp_min", "aten::mul", "aten::sigmoid", "aten::sub",
                         "aten::tanh", "aten::mul"]
    # 7 kernels x (128 MiB in + 128 MiB out) + one binary mul (2 x 128 MiB in + 128 MiB out) = 2.125 GiB
    assert ev["bytes_per_chain"] == 17 * 2**27 and 1.9 < ev["gib_per_chain"] < 2.2
    assert ev["fused_bytes_per_chain"] == 3 * 2**27  # first input + the extra mul operand + last output
    assert x["savings_pct"] > 70 and x["severity"] == "error"
    assert 80 < ev["savings_of_chain_pct"] < 85  # labels: eager 0.538 ms vs compiled 0.103 ms (81 %)
    assert 3500 < ev["achieved_bandwidth_gbps"] < 4800  # DOMAIN.md: D2D copy ~4.3 TB/s on H200


def test_compiled_has_no_chain():
    t = k.trace("gpu_h200/elementwise_chain_compiled.json.gz")
    assert t.gpu.filter(t.gpu["name"].str.starts_with("triton")).height == 3  # one fused kernel per step
    assert k.findings("gpu_h200/elementwise_chain_compiled.json.gz", "TV201") == []


def test_gemm_negative_control():
    assert k.findings("gpu_h200/compute_bound_gemm.json.gz", "TV201") == []
