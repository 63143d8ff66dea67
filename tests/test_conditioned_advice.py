"""Advice that fits the trace (issue 10 item 5): what the trace already does is detected, never recommended, and
the fix names the next step instead; syncs made by torch.compile are the compiler's."""

from __future__ import annotations

import pytest
from conftest import SAMPLES, load

from traceview.analyses.classify import sync_calls
from traceview.analyses.features import detect
from traceview.report import analyze


def _trace(rel: str):
    p = SAMPLES / rel
    return load(rel) if p.is_file() else load(next(p.glob("*.pt.trace.json.gz")).relative_to(SAMPLES).as_posix())


def _findings(rel: str) -> list[dict]:
    p = SAMPLES / rel
    f = p if p.is_file() else next(p.glob("*.pt.trace.json.gz"))
    (t,) = analyze([f]).to_dict()["traces"]
    return t["findings"]


@pytest.mark.parametrize(("rel", "want"), [
    ("collected2/tiny_ops_n64_cudagraph", {"cuda_graphs"}),  # plain torch.cuda.graph: no op, one cudaGraphLaunch
    ("collected2/tiny_ops_n64_reduce_overhead", {"cuda_graphs", "compiled", "triton_kernels"}),
    ("collected2/compile_recompile_every_step", {"compiled", "triton_kernels", "compiling"}),
    ("collected2/adamw_fused", {"fused_optimizer"}),
    ("collected2/adamw_foreach", {"foreach_optimizer"}),
    ("collected2/gemm_bf16_n4096", {"low_precision"}),  # nvjet kernels: bf16 only from the operand widths
    ("collected2/cnn_input_nw8", {"dataloader_workers"}),
    ("gpu_h200_real/hf_gpt2_train_bf16.json.gz", {"fused_optimizer", "low_precision"}),
])
def test_features_detected(rel, want):
    from traceview.analyses.classify import kernel_bound

    t = _trace(rel)
    got = {k for k, v in detect(t, kernel_bound(t)).to_dict().items() if v}
    assert want <= got, got


@pytest.mark.parametrize("rel", ["collected2/adamw_single_tensor", "collected2/tiny_ops_n64_eager",
                                 "collected2/cnn_input_nw0"])
def test_features_absent(rel):
    from traceview.analyses.classify import kernel_bound

    t = _trace(rel)
    f = detect(t, kernel_bound(t))
    assert not f.cuda_graphs and not f.compiled and f.triton_kernels == 0 and not f.fused_optimizer
    if rel.endswith("nw0"):
        assert f.dataloader_workers is False


def test_launch_bound_fix_on_cuda_graph_trace_says_the_next_step():
    (lb,) = [f for f in _findings("gpu_h200/cudagraph_reduce_overhead.json.gz") if f["rule"] == "launch-bound"]
    assert "already replays CUDA graphs" in lb["fix"]
    assert "reduce-overhead" not in lb["fix"] and "capture the step with CUDA Graphs" not in lb["fix"]


def test_launch_bound_fix_on_compiled_trace_says_cuda_graphs_next():
    lb = [f for f in _findings("gpu_h200_compile/compile_recompile_every_step.json.gz") if f["rule"] == "launch-bound"]
    assert lb and "already compiled" in lb[0]["fix"] and "let torch.compile fuse" not in lb[0]["fix"]


def test_launch_bound_fix_on_eager_trace_is_the_general_one():
    (lb,) = [f for f in _findings("gpu_h200/launch_bound_tiny_ops.json.gz") if f["rule"] == "launch-bound"]
    assert "capture the step with CUDA Graphs" in lb["fix"] and "foreach" in lb["fix"]


def test_compile_syncs_are_the_compilers():
    """compile_recompile_every_step: 24 cudaDeviceSynchronize inside CachingAutotuner.benchmark_all_configs
    (collected2/MANIFEST.md), none from user code: no host_sync time, one info finding that says compilation."""
    t = _trace("collected2/compile_recompile_every_step")
    assert sync_calls(t, compilation=True).height == 24
    assert sync_calls(t).filter(sync_calls(t)["name"] == "cudaDeviceSynchronize").height == 0
    hs = [f for f in _findings("collected2/compile_recompile_every_step") if f["rule"] == "host-sync"]
    assert hs and all(f["severity"] == "info" for f in hs)
    (comp,) = [f for f in hs if f["evidence"]["cause"] == "torch.compile compilation / autotuning"]
    assert comp["count"] == 24 and "Remove the synchronisation" not in comp["fix"] and "recompiled" in comp["fix"]


def test_triton_chain_is_info_with_compiled_advice():
    ch = [f for f in _findings("collected2/compile_no_break") if f["rule"] == "elementwise-chain"]
    assert ch and all(f["severity"] == "info" and "already compiled" in f["fix"] for f in ch)


def test_input_fix_with_workers_does_not_ask_for_workers():
    from traceview.rules.input_bound import fix_for

    from traceview.analyses.features import Features

    assert "already runs worker processes" in fix_for(Features(dataloader_workers=True))
    assert "num_workers > 0" in fix_for(Features(dataloader_workers=False))


def test_foreach_kernels_are_never_in_a_chain():
    # sum → 4 × _foreach_add_ run back to back on one stream (the trace's own kernel order), but a multi-tensor
    # kernel is one launch over many tensors already (the unfused-optimizer rule's business): no chain holds one
    t = _trace("collected/nccl_world1_allreduce")
    g = t.gpu.filter(t.gpu["kind"] == "compute").sort("ts")
    names = g["name"].to_list()
    assert any("reduce_kernel" in a and all("multi_tensor_apply" in b for b in names[i + 1:i + 5])
               for i, a in enumerate(names))
    ch = [f for f in _findings("collected/nccl_world1_allreduce") if f["rule"] == "elementwise-chain"]
    assert ch and not any("_foreach_" in o for f in ch for o in f["evidence"]["ops"])
    assert not any("multi_tensor_apply" in k for f in ch for k in f["evidence"]["kernels"])
