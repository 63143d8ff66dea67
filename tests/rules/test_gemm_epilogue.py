import polars as pl
import rulekit as k


def test_seed_relu_linear_bias_and_relu_after_mm():
    (f,) = k.findings("gpu_h200/seed_relu_linear_m4096.json.gz", "TV204")
    ev = f["evidence"]
    assert f["rule"] == "gemm-epilogue" and ev["gemm_op"] == "aten::mm"
    roles = {(o["role"], o["op"]) for o in ev["epilogue_ops"]}
    assert roles == {("bias", "aten::add"), ("activation", "aten::clamp_min")}
    # independent: the forward mm of relu(x @ w + b), one per step, each followed by add [4096,4096]+[4096] and relu
    t = k.trace("gpu_h200/seed_relu_linear_m4096.json.gz")
    adds = t.host.filter((pl.col("name") == "aten::add") & (pl.col("input_dims").cast(pl.String) == "[[4096, 4096], [4096], []]"))
    assert ev["gemms_with_epilogue"] == adds.height == 3
    # bytes (bf16): add reads 4096^2 + 4096 elements and writes 4096^2; relu reads and writes 4096^2
    n = 4096 * 4096 * 2
    assert ev["epilogue_bytes"] == 3 * ((2 * n + 4096 * 2) + 2 * n)
    # savings: the add and relu kernels, all queued behind the GEMMs (the GPU is the critical path)
    kern = t.gpu.filter(pl.col("op").is_in(t.host.filter(pl.col("name").is_in(["aten::add", "aten::clamp_min"])
                                                         & pl.col("input_dims").cast(pl.String).str.starts_with("[[4096, 4096], ")
                                                         )["i"].implode()))
    assert abs(f["savings_us"] - float(kern["dur"].sum()) / 1000) < 0.05 * f["savings_us"]
    assert "F.linear" in f["fix"] and "torch.compile" in f["fix"]


def test_scalar_add_after_gemm_is_not_a_bias():
    # seed_fragmented adds a Python scalar after each mm: not a bias the GEMM can take (elementwise-chain's case)
    assert k.findings("gpu_h200/seed_fragmented_eager.json.gz", "TV204") == []
