"""Advice from what the kernels are (issue 31 item 4), over every bundled compiled, CUDA-graph and fused-optimizer
trace: a Triton/Inductor kernel is never called eager, an optimizer already fused or foreach is never told to
fuse or to switch to foreach/fused, and the single-tensor optimizer rule stays silent on multi-tensor updates."""

from __future__ import annotations

import functools
import gzip
import json
import re

import polars as pl
import pytest
from conftest import SAMPLES
from traceview.rules.elementwise_chain import fix_for

from traceview.analyses.features import Features
from traceview.analyses.fusible import kernel_class
from traceview.report import analyze

COMPILED = [
    "gpu_h200_compile/compile_graph_break.json.gz",
    "gpu_h200_compile/compile_no_break.json.gz",
    "gpu_h200_compile/compile_recompile_every_step.json.gz",
    "gpu_h200/elementwise_chain_compiled.json.gz",
    "gpu_h200/seed_fragmented_compiled.json.gz",
    "gpu_h200/cudagraph_reduce_overhead.json.gz",
    "collected/elementwise_chain_compiled",
    "collected2/compile_graph_break",
    "collected2/compile_no_break",
    "collected2/compile_recompile_every_step",
    "collected2/compile_stable_shape",
    "collected2/elementwise_chain_compiled",
    "collected2/fragmented_compiled",
    "collected2/tiny_ops_n64_cudagraph",
    "collected2/tiny_ops_n64_reduce_overhead",
]
FUSED = [  # multi-tensor optimizer updates: fused=True, foreach=True, apex-style multi_tensor_apply AdamFunctor
    "gpu_h200_compile/optimizer_fused.json.gz",
    "collected2/adamw_fused",
    "collected2/adamw_foreach",
    "gpu_h200_real/hf_gpt2_train_bf16.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "collected/nccl_world1_allreduce",
    "nccl_h200x2/ddp_balanced/rank0.1795959685011564177.pt.trace.json.gz",
    # every rank of the bundled multi-rank jobs (foreach AdamW), and the fused-AdamW twins of collected3
    "nccl_h200x2/ddp_rank1_slowed/rank1.1795960144111246697.pt.trace.json.gz",
    "nccl_h200x2/ddp_balanced_launch_bound/rank1.1795959485663184123.pt.trace.json.gz",
    "nccl_h200x2/fsdp_rank1_slowed/rank0.1795960169901840250.pt.trace.json.gz",
    "collected3/adamw_l12_fused",
    "collected3/gpt2_sdpa_fused",
    # apex / DeepSpeed FusedAdam on CPU-only traces: only the optimizer's `Optimizer.step#FusedAdam.step` span
    # says so (no kernel, no ATen op)
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz",
    "hta/rank_non_gpu/rank_non_gpu.json.gz",
]
#: a fix that calls the chain's kernels eager
CALLS_EAGER = re.compile(r"eager (ATen )?kernels|kernels are eager|are separate eager")
#: what "use a fused or foreach optimizer" looks like in a fix
FUSE_OPTIMIZER = re.compile(
    r"fused=True|foreach=True|fused/foreach optimizers|foreach/fused optimizers|use a fused optimizer|next step is a "
    r"fused optimizer"
)


def _file(rel: str):
    p = SAMPLES / rel
    return p if p.is_file() else next(p.glob("*.pt.trace.json.gz"))


@functools.cache
def findings(rel: str) -> list[dict]:
    (t,) = analyze([_file(rel)]).to_dict()["traces"]
    return t["findings"]


@functools.cache
def raw_names(rel: str) -> tuple[set[str], set[str]]:
    """(op names, kernel names) of the trace, decoded with the stdlib: the independent view of what runs."""
    with gzip.open(_file(rel), "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    ops = {e.get("name", "") for e in ev if e.get("cat") in ("cpu_op", "user_annotation")}
    kernels = {e.get("name", "") for e in ev if e.get("cat") == "kernel"}
    return ops, kernels


def _eager(op: str, kernel: str) -> bool:
    """A kernel one eager op launched: not Triton, not a compiled graph's, not multi-tensor (plain regexes)."""
    return not (
        kernel.startswith("triton_")
        or op.startswith(("triton_", "CompiledFunction"))
        or op.startswith(("aten::_foreach_", "aten::_fused_"))
        or "multi_tensor_apply" in kernel
        or re.search(r"(?i)fused_?adam", kernel)
    )


@pytest.mark.parametrize("rel", COMPILED + FUSED)
def test_chain_advice_matches_the_kernels(rel: str) -> None:
    chains = [f for f in findings(rel) if f["code"] == "TV201"]
    for f in chains:
        ev = f["evidence"]
        ops, kernels = ev["ops"], ev["kernels"]
        assert len(ops) == len(kernels) == ev["kernels_per_chain"]
        eager = sum(_eager(o, k) for o, k in zip(ops, kernels, strict=True))
        if eager == 0:  # all compiled or already multi-tensor: nothing to apply, never "eager"
            assert f["severity"] == "info" and not CALLS_EAGER.search(f["fix"]), f
        elif "eager" in f["fix"] and eager < len(ops):  # a mixed chain names how many are eager
            assert (
                f"{eager} of these {len(ops)} kernels are eager" in f["fix"] or f"other {eager}" in f["fix"]
            ), f
        if all(k.startswith("triton_") for k in kernels):
            assert "already compiled" in f["fix"]


@pytest.mark.parametrize("rel", FUSED)
def test_fused_optimizer_is_never_told_to_fuse(rel: str) -> None:
    ops, kernels = raw_names(rel)
    # the trace really runs a multi-tensor update (stdlib view)
    assert any(o.startswith(("aten::_fused_adam", "aten::_foreach_", "Optimizer.step#Fused")) for o in ops) or any(
        "multi_tensor_apply" in k for k in kernels
    )
    for f in findings(rel):
        assert not FUSE_OPTIMIZER.search(f["fix"]), (f["code"], f["fix"])
        assert f["code"] != "TV203", f  # the single-tensor optimizer rule: not on a multi-tensor update


def test_optimizer_twins() -> None:
    """The single-tensor twin is flagged; its fused and foreach twins are not (same model, same steps)."""
    assert [f["code"] for f in findings("collected2/adamw_single_tensor") if f["code"] == "TV203"] == [
        "TV203"
    ]
    assert "TV203" not in {
        f["code"] for f in findings("collected2/adamw_fused") + findings("collected2/adamw_foreach")
    }


def test_fix_for_reads_kernel_names_when_ops_are_unknown() -> None:
    """A CUDA-graph replay or a compiled graph links no op: the kernel names still say what the chain is."""
    f = Features(compiled=True, triton_kernels=12, cuda_graphs=True)
    tri = fix_for(
        f, "? → ? → ?", ["triton_red_fused_sum_1", "triton_poi_fused_add_0", "triton_per_fused_gt_2"]
    )
    assert "already compiled" in tri and not CALLS_EAGER.search(tri)
    # a fused optimizer's update kernels are never in a chain (one launch over many tensors already): the chain
    # beside them is eager kernels only, and its fix never asks for a fused optimizer
    opt_kernels = pl.DataFrame(
        {
            "kind": ["compute"] * 2,
            "name": ["void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>", "fused_adam_kernel"],
            "op_name": [None, "aten::_fused_adamw_"],
            "category": [None, "elementwise"],
        },
        schema={"kind": pl.String, "name": pl.String, "op_name": pl.String, "category": pl.String},
    )
    assert opt_kernels.select(kernel_class(opt_kernels))["literal"].to_list() == ["other", "other"]
    opt = fix_for(
        Features(fused_optimizer=True),
        "aten::mul → aten::add",
        ["void at::native::vectorized_elementwise_kernel<4, at::native::mul>"] * 2,
    )
    assert not FUSE_OPTIMIZER.search(opt)
    mixed = fix_for(
        Features(compiled=True, fused_optimizer=True),
        "triton_poi_fused_0 → aten::add → aten::mul",
        [
            "triton_poi_fused_0",
            "void at::native::vectorized_elementwise_kernel<4>",
            "void at::native::vectorized_elementwise_kernel<4>",
        ],
    )
    assert (
        "2 of these 3 kernels are eager" in mixed
        and "(add, mul" in mixed
        and not FUSE_OPTIMIZER.search(mixed)
    )
