import rulekit as k


def test_eager_chain_of_8():
    _, f, _ = k.run("gpu_h200/elementwise_chain_eager.json.gz", "TV201")
    (x,) = f
    ev = x["evidence"]
    assert ev["kernels_per_chain"] == 8 and x["count"] == 3 and ev["chains_per_step"] == 1.0
    assert ev["ops"] == ["aten::mul", "aten::add", "aten::clamp_min", "aten::mul", "aten::sigmoid", "aten::sub",
                         "aten::tanh", "aten::mul"]
    # 7 kernels x (128 MiB in + 128 MiB out) + one binary mul (2 x 128 MiB in + 128 MiB out) = 2.125 GiB
    # (plus the 0-dim tensors some ops take, one element each: a few bytes)
    assert 0 <= ev["bytes_per_chain"] - 17 * 2**27 <= 64 and 1.9 < ev["gib_per_chain"] < 2.2
    # first input + the extra mul operand (+ 0-dim operands) + last output
    assert 0 <= ev["fused_bytes_per_chain"] - 3 * 2**27 <= 64
    assert x["savings_pct"] > 70 and x["severity"] == "error"
    assert 80 < ev["savings_of_chain_pct"] < 85  # labels: eager 0.538 ms vs compiled 0.103 ms (81 %)
    assert 3500 < ev["achieved_bandwidth_gbps"] < 4800  # DOMAIN.md: D2D copy ~4.3 TB/s on H200


def test_compiled_has_no_chain():
    t = k.trace("gpu_h200/elementwise_chain_compiled.json.gz")
    assert t.gpu.filter(t.gpu["name"].str.starts_with("triton")).height == 3  # one fused kernel per step
    assert k.findings("gpu_h200/elementwise_chain_compiled.json.gz", "TV201") == []


def test_gemm_negative_control():
    assert k.findings("gpu_h200/compute_bound_gemm.json.gz", "TV201") == []


GPT2 = "collected3/gpt2_sdpa/rank0.1796173474679494691.pt.trace.json.gz"


def test_kernel_classes_by_name_and_op():
    import polars as pl

    from traceview.analyses.fusible import kernel_class

    rows = [  # (kind, kernel, op, roofline category) -> class
        ("compute", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "aten::fill_",
         "elementwise", "pointwise"),
        ("compute", "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>", "aten::sum", "reduction",
         "reduction"),
        ("compute", "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "aten::_log_softmax",
         "reduction", "reduction"),
        ("compute", "triton_poi_fused__softmax_0", "triton_poi_fused__softmax_0", None, "pointwise"),
        ("compute", "triton_red_fused_sum_1", "triton_red_fused_sum_1", None, "reduction"),
        # embedding backward: its radix sort, its scatter and even its zero-fill are not fusible with neighbours
        ("compute", "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<int>",
         "aten::embedding_dense_backward", "elementwise", "other"),
        ("compute", "void at::native::(anonymous namespace)::sum_and_scatter<float>", None, None, "other"),
        ("compute", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
         "aten::embedding_dense_backward", "elementwise", "other"),
        ("compute", "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FunctorA>", "aten::_foreach_add_",
         "elementwise", "other"),
        ("compute", "void cublasLt::splitKreduce_kernel<32, 16>", "Torch-Compiled Region: 0/0", None, "other"),
        ("compute", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", "aten::cudnn_batch_norm", "reduction", "reduction"),
        ("compute", "void at_cuda_detail::cub::detail::scan::DeviceScanKernel<int>", "aten::cumsum", "reduction",
         "reduction"),
        ("compute", "my_custom_kernel", "myext::op", "elementwise", "other"),  # opaque to a fuser
        ("memcpy", "Memcpy DtoD (Device -> Device)", "aten::copy_", "elementwise", "other"),
    ]
    g = pl.DataFrame([r[:4] for r in rows], schema=["kind", "name", "op_name", "category"], orient="row")
    assert g.select(kernel_class(g))["literal"].to_list() == [r[4] for r in rows]


def test_gpt2_chains_hold_only_fusible_kernels():
    """GPT-2 training (eager, SDPA, foreach AdamW): the embedding backward's radix sort and scatter kernels run right
    after elementwise kernels, and the optimizer's multi-tensor kernels after the grad-norm ones, yet no chain holds
    them; the cross-entropy is split at its reductions (the upcast copies fuse into log_softmax, one kernel)."""
    t = k.trace(GPT2)
    names = t.gpu.filter(t.gpu["kind"] == "compute").sort("ts")["name"].to_list()
    pairs = list(zip(names, names[1:], strict=False))  # each kernel and the next one on the GPU
    assert any("elementwise" in a and "RadixSort" in b for a, b in pairs)
    assert any(("elementwise" in a or "reduce_kernel" in a) and "multi_tensor_apply" in b for a, b in pairs)
    _, f, _ = k.run(GPT2, "TV201")
    assert f
    for x in f:
        kern, ops = x["evidence"]["kernels"], x["evidence"]["ops"]
        assert not any(s in n for n in kern for s in ("cub::", "RadixSort", "multi_tensor_apply", "scatter",
                                                       "nll_loss", "SoftMaxBackward"))
        assert not any(o in ("aten::embedding_dense_backward", "aten::nll_loss_forward") or "_foreach_" in o
                       for o in ops)
        # at most one reduction, and only as the chain's last kernel (its producers fuse into it)
        assert not any("reduce_kernel" in n or "SoftMax" in n for n in kern[:-1])
    (loss,) = [x for x in f if "aten::_log_softmax" in x["evidence"]["ops"]]
    assert loss["evidence"]["ops"] == ["aten::copy_"] * 3 + ["aten::_log_softmax"] and loss["count"] == 3


def test_single_tensor_optimizer_step_is_not_a_chain():
    """A single-tensor AdamW step launches hundreds of eager pointwise kernels back to back (add_, mul_, lerp_, …
    per parameter): the unfused-optimizer rule's (fused/foreach AdamW), never one elementwise chain."""
    import polars as pl

    rel = "collected3/gpt2_sdpa_single/rank0.1796173565697623337.pt.trace.json.gz"
    t = k.trace(rel)
    span = t.host.filter(pl.col("name").str.starts_with("Optimizer.step#AdamW")).sort("ts").row(-1, named=True)
    inside = t.gpu.filter((pl.col("kind") == "compute") & (pl.col("launch_ts") >= span["ts"])
                          & (pl.col("launch_ts") < span["end"]))
    assert inside.height > 600 and not inside["name"].str.contains("multi_tensor_apply").any()
    from traceview.rules.elementwise_chain import chains

    from traceview.analyses.classify import kernel_bound

    ch = chains(t, t.steps, kernel_bound(t))
    assert ch.height > 0 and not set(ch["i"].to_list()) & set(inside["i"].to_list())
    _, f, _ = k.run(rel, "TV201")
    assert all(x["evidence"]["kernels_per_chain"] < 100 for x in f)
    assert not any(o in ("aten::lerp_", "aten::addcdiv_", "aten::addcmul_") for x in f for o in x["evidence"]["ops"])


EFFNET = "ab_traced/effnet_compile/rank0.1796288359499171271.pt.trace.json.gz"


def test_batch_norm_chains_read_their_inputs_twice_fused():
    """EfficientNet-B0 training, eager (its torch.compile'd twin measured 2.77 ms a step SLOWER in the same process:
    sample_traces/ab_traced/effnet_compile): a chain that ends in a training batch norm saves nothing fused (its
    statistics span the batch of each channel: a fused kernel reads the inputs twice), and BatchNorm's
    `num_batches_tracked += 1` (a 0-dim long tensor) is not the producer of the normalization after it."""
    import polars as pl
    from traceview.rules.elementwise_chain import chains, per_chain

    from traceview.analyses.classify import kernel_bound

    t = k.trace(EFFNET)
    kb = kernel_bound(t)
    per = per_chain(chains(t, t.steps, kb))
    silu = per.filter(pl.col("ops") == "aten::silu_backward → aten::cudnn_batch_norm_backward")
    assert silu.height == 48 and silu["savings"].max() == 0  # 16 a step, one per MBConv block's expansion
    scalar = per.filter(pl.col("ops") == "aten::add_ → aten::cudnn_batch_norm")
    assert scalar.height == 147 and scalar["savings"].max() == 0  # 49 batch norms a step
    # the add_ really is the 0-dim counter: 8-byte operands, beside a normalization of megabytes
    ch = chains(t, t.steps, kb)
    first = ch.filter(pl.col("op_name") == "aten::add_").join(scalar.select("chain"), on="chain")
    assert first["bytes"].max() < 64 and first["in0_bytes"].max() == 8
    _, f, _ = k.run(EFFNET, "TV201")
    assert [x["severity"] for x in f if x["severity"] != "info"] == []


def _chain(rows: list[tuple]):
    """A one-chain frame as `chains` gives it: rows of (name, op_name, dur, in0, extra, out, sole)."""
    import polars as pl

    k = len(rows)
    return pl.DataFrame(
        [(1, 0, 0, 7, i, name, op, 1000 * i, 1000 * i + dur, dur, (in0 + ex + out) if in0 is not None else None,
          in0, ex, out, sole, i, k) for i, (name, op, dur, in0, ex, out, sole) in enumerate(rows)],
        schema={"chain": pl.UInt32, "step": pl.Int64, "device": pl.Int64, "stream": pl.Int64, "i": pl.UInt32,
                "name": pl.String, "op_name": pl.String, "ts": pl.Int64, "end": pl.Int64, "dur": pl.Int64,
                "bytes": pl.Float64, "in0_bytes": pl.Float64, "extra_bytes": pl.Float64, "out_bytes": pl.Float64,
                "sole": pl.Boolean, "pos": pl.Int64, "k": pl.UInt32}, orient="row")


def test_fused_bytes_follow_producers_and_consumers():
    """The fused-byte accounting on hand-built chains (B = 1 MB): a producer -> consumer pair reads B and writes B;
    a kernel that reads no earlier output reads its own input, and an output no later kernel reads is written; a
    training batch norm at the end reads the inputs twice; its inference kernel once; no shapes: the longest
    kernel stays."""
    from traceview.rules.elementwise_chain import per_chain

    b = 1e6
    ew = "void at::native::vectorized_elementwise_kernel<4>"
    # x -> relu -> mul(., y): first input + extra + last output
    linked = per_chain(_chain([(ew, "aten::relu", 10, b, 0.0, b, True), (ew, "aten::mul", 10, b, b, b, True)]))
    assert linked["fused_bytes"].to_list() == [3 * b]
    # a 0-dim counter (8 bytes) before an unrelated elementwise op on B: nothing links them
    scalar = per_chain(_chain([(ew, "aten::add_", 2, 8.0, 8.0, 8.0, True), (ew, "aten::silu", 10, b, 0.0, b, True)]))
    assert scalar["fused_bytes"].to_list() == [8 + 8 + 8 + b + b]
    # ... the same pair where the kernels are not their ops' only ones: bytes are shares, no check (linked)
    shared = per_chain(_chain([(ew, "aten::add_", 2, 8.0, 8.0, 8.0, False), (ew, "aten::silu", 10, b, 0.0, b, False)]))
    assert shared["fused_bytes"].to_list() == [8 + 8 + b]
    # a consumer of the first kernel's output after an unrelated small kernel: still linked to its producer
    skip = per_chain(_chain([(ew, "aten::copy_", 10, b, b, 2 * b, True), (ew, "aten::copy_", 1, 8.0, 8.0, 8.0, True),
                             ("softmax_warp_forward", "aten::_log_softmax", 10, 2 * b, 0.0, 2 * b, True)]))
    assert skip["fused_bytes"].to_list() == [b + b + 8 + 8 + 8 + 2 * b]
    # silu_backward -> training batch norm backward: two passes over the inputs (dy, x of silu, x of the norm)
    bn = per_chain(_chain([(ew, "aten::silu_backward", 10, b, b, b, True),
                           ("cudnn::bn_bw_1C11_singleread", "aten::cudnn_batch_norm_backward", 10, b, b, b, True)]))
    assert bn["fused_bytes"].to_list() == [2 * (b + b + b) + b] and bn["savings"].to_list() == [0.0]
    inf = per_chain(_chain([(ew, "aten::add", 10, b, b, b, True),
                            ("cudnn::bn_fw_inf_1C11_kernel_NCHW", "aten::cudnn_batch_norm", 10, b, 0.0, b, True)]))
    assert inf["fused_bytes"].to_list() == [3 * b]
    # no shapes: the chain keeps its longest kernel
    none = per_chain(_chain([(ew, "aten::add", 3, None, None, None, True), (ew, "aten::mul", 9, None, None, None, True)]))
    assert none["fused_time"].to_list() == [9.0] and none["savings"].to_list() == [3.0]


def _context(rel: str):
    import dataclasses

    from traceview.ruleapi import RuleContext

    t = k.trace(str(next((k.SAMPLES / rel).glob("*.pt.trace.json*")).relative_to(k.SAMPLES)))
    ctx, _ = RuleContext.prepare(t, t.steps)
    return dataclasses.replace(ctx, options={"min_kernels": 2})


def test_the_compiled_call_cost_is_the_h200_measurement():
    # COMPILED_CALL_OPS against collectors/examples/compile_call_cost.py's rows, recomputed here: one eager
    # pointwise op is the eager loop's slope over the chain length (a median of pairwise slopes: the rows are
    # noisy), a forward call the compiled rows' median; the backward call what a compiled forward + backward costs
    # beyond the eager loop's base (its intercept: the sum and the autograd engine) and the forward call
    import json
    import statistics

    from traceview.rules.elementwise_chain import COMPILED_CALL_OPS

    rows = [json.loads(x[5:]) for x in (k.SAMPLES / "ab_traced/compile_call_cost_h200.ndjson").read_text()
            .splitlines() if x.startswith("CALL ")]

    def fit(back: bool) -> tuple[float, float, float]:
        r = [x for x in rows if x["backward"] is back]
        slope = statistics.median((b["eager_us"] - a["eager_us"]) / (b["k"] - a["k"])
                                  for i, a in enumerate(r) for b in r[i + 1:])
        base = statistics.median(x["eager_us"] - slope * x["k"] for x in r)
        return slope, base, statistics.median(x["default_us"] for x in r)

    op, _, fwd = fit(False)
    _, base, both = fit(True)
    assert 7.0 < op < 7.6 and 35 < fwd < 45  # µs: an eager op, a compiled call
    assert round(fwd / op, 1) == COMPILED_CALL_OPS["forward"]
    assert round((both - base - fwd) / op) == COMPILED_CALL_OPS["backward"]


def test_the_fix_pays_one_compiled_call_per_step_and_direction():
    from traceview.rules.elementwise_chain import COMPILED_CALL_OPS, _chains, compiled_call_cut

    from traceview.analyses.overhead import eager_op_host_ns

    # inference, one chain a step: one forward call on each of the 3 steps, on the chain's first op
    ctx = _context("ab_traced/elementwise_32mib_eager")
    ch = _chains(ctx)
    cut = compiled_call_cut(ctx, ch)
    one = eager_op_host_ns(ctx.trace)
    assert 4000 < one < 9000  # ns: one eager op unprofiled on the H200 host (the sweep: 7.3 µs)
    assert len(cut) == 3 and set(cut.values()) == {-int((COMPILED_CALL_OPS["forward"] - 1) * one)}
    firsts = set(k.traceview.analyses.rowid.by_id(ctx.trace.gpu, ch.filter(ch["pos"] == 0)["i"], "op")["op"].to_list())
    assert set(cut) <= firsts
    # training (HF GPT-2, chains in the forward and in autograd's backward thread): a forward and a backward call
    # a step
    ctx = _context("ab_traced/gpt2p_compile")
    got = sorted(compiled_call_cut(ctx, _chains(ctx)).values())
    one = eager_op_host_ns(ctx.trace)
    assert got == [-int((COMPILED_CALL_OPS["backward"] - 1) * one)] * 3 + [-int((COMPILED_CALL_OPS["forward"] - 1) * one)] * 3
    # a trace that runs compiled regions already pays its calls: nothing added
    ctx = _context("collected3/gpt2_sdpa_compiled")
    assert ctx.features.compiled and compiled_call_cut(ctx, _chains(ctx)) == {}
