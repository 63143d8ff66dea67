import polars as pl
import pytest
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
    # savings: the add and relu kernels run queued behind the forward GEMM, but the backward's first kernel after
    # that busy run was launched only ~26 µs before it started: the replay passes on that much of each step's
    # 59 µs and no more (the host's late launch is then the path), so the saving is below the kernels' time
    kern = t.gpu.filter(pl.col("op").is_in(t.host.filter(pl.col("name").is_in(["aten::add", "aten::clamp_min"])
                                                         & pl.col("input_dims").cast(pl.String).str.starts_with("[[4096, 4096], ")
                                                         )["i"].implode()))
    assert 0.5 * float(kern["dur"].sum()) / 1000 < f["savings_us"] < float(kern["dur"].sum()) / 1000
    assert "F.linear" in f["fix"] and "torch.compile" in f["fix"]


def test_scalar_add_after_gemm_is_not_a_bias():
    # seed_fragmented adds a Python scalar after each mm: not a bias the GEMM can take (elementwise-chain's case)
    assert k.findings("gpu_h200/seed_fragmented_eager.json.gz", "TV204") == []


BERT = "collected5/epilogue_bert_eager/rank0.1796199133200825241.pt.trace.json.gz"
BERT_FUSED = "collected5/epilogue_bert_fused/rank0.1796199147955930437.pt.trace.json.gz"
MLP = "collected5/epilogue_mlp_eager/rank0.1796199097919090608.pt.trace.json.gz"


def test_hf_bert_gelu_on_the_3d_view_of_a_flattened_addmm():
    # nn.Linear on [32, 128, 1024] runs addmm on [4096, 1024] and hands on a [32, 128, 4096] view: the GELU reads
    # the GEMM's own output; the residual adds after the other addmms are not biases (addmm already adds it)
    (f,) = k.findings(BERT, "TV204")
    ev = f["evidence"]
    assert ev["gemm_op"] == "aten::addmm"
    assert {(o["role"], o["op"]) for o in ev["epilogue_ops"]} == {("activation", "aten::gelu")}
    t = k.trace(BERT)
    gelu = t.host.filter((pl.col("name") == "aten::gelu") & (pl.col("input_dims").cast(pl.String) == "[[32, 128, 4096], []]"))
    assert ev["gemms_with_epilogue"] == gelu.height == 12  # 4 layers x 3 steps
    kern = t.gpu.filter(pl.col("op").is_in(gelu["i"].implode()))
    assert ev["epilogue_time_us"] == pytest.approx(float(kern["dur"].sum()) / 1000, abs=0.01)
    assert ev["epilogue_bytes"] == 12 * 2 * 4096 * 4096 * 2  # bf16: read and write [4096, 4096] each
    # a launch-bound step (GPU busy ~21 %): the saving is the GELU ops' host time, which the replay finds and
    # the kernels' time alone (off the critical path) would not
    assert 0 < ev["epilogue_savings_us"] < float(gelu["dur"].sum()) / 1000 / 3
    assert k.findings(BERT_FUSED, "TV204") == []  # torch._addmm_activation: GELU in the epilogue


def test_compile_variant_keeps_one_pointwise_kernel_per_activation():
    # torch.compile folds the lone bias into addmm but runs bias + GELU as one pointwise kernel after the GEMM
    from traceview.rules import gemm_epilogue as G

    (f,) = k.findings(MLP, "TV204")
    ev = f["evidence"]
    t = k.trace(MLP)
    ctx, _ = k.RuleContext.prepare(t, t.steps)
    (tf,) = G.fix_variants(ctx).values()
    adds = t.host.filter((pl.col("name") == "aten::add") & pl.col("input_dims").cast(pl.String).str.contains(r"^\[\[8192, \d+\], \[\d+\]"))
    assert sorted(tf.gpu_dur) == sorted(t.gpu.filter(pl.col("op").is_in(adds["i"].implode()))["i"].to_list())
    assert len(tf.gpu_dur) == 24
    # a GPU-bound step: the two fixes differ by the activation kernels' time (independent: the GELU kernels)
    gelu = t.gpu.filter(pl.col("name").str.contains("Gelu") & pl.col("ts").is_between(t.steps["ts"].min(), t.steps["end"].max()))
    per_step = float(gelu["dur"].sum()) / 1000 / t.steps.height
    assert ev["epilogue_savings_us"] - ev["compile_savings_us"] == pytest.approx(per_step, rel=0.05)
    assert "torch._addmm_activation" in f["fix"] and "pointwise kernel after the GEMM" in f["fix"]
