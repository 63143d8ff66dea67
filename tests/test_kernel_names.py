"""kernel_names.short_kernel over the real kernel names of bundled traces that hold every family: ATen CUDA
templates, Triton/Inductor, cuDNN/CUTLASS (mangled and not), cuBLAS/cuDNN xmma, nvjet, Tensile (ROCm), NCCL."""

from __future__ import annotations

import functools
import gzip
import json
import re

import pytest
from conftest import SAMPLES

from traceview.formatters.kernel_names import short_kernel

FILES = [
    "gpu_h200_real/tv_resnet50_train_dataloader_nw0.json.gz",  # mangled cutlass, sm90_xmma, cudnn, nvjet
    "gpu_h200_real/hf_gpt2_train_bf16.json.gz",  # cudnn sdpa, nvjet, bf16 ATen templates
    "hta/nccl_parser_config/nccl_data.json.gz",  # mangled cutlass_cudnn_train, NCCL
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # Tensile Cijk_
    "gpu_h200_compile/compile_recompile_every_step.json.gz",  # Triton, sm80_xmma
    "gpu_h200_compile/optimizer_fused.json.gz",  # cutlass::Kernel<…>
]
_KERNEL = re.compile(rb'"cat":\s*"[Kk]ernel",\s*"name":\s*"((?:[^"\\]|\\.)*)"')


@functools.cache
def names() -> list[str]:
    """The distinct kernel names of FILES, straight from the JSON text."""
    out: set[str] = set()
    for rel in FILES:
        with gzip.open(SAMPLES / rel) as fh:
            out |= {json.loads(b'"' + m.group(1) + b'"') for m in _KERNEL.finditer(fh.read())}
    return sorted(out)


def test_every_real_name_is_short_and_readable() -> None:
    ns = names()
    assert len(ns) >= 150
    short = {n: short_kernel(n) for n in ns}
    for n, s in short.items():
        assert s and len(s) <= 64 and len(s) <= len(n), (n, s)
        assert not re.search(r"[()<>].*[()<>]", s) or s.count("<") == 1, (
            s
        )  # no signature left, one hint at most
        assert not s.startswith(("void ", "_Z")), s
    # names that differ only in template arguments may meet; different kernels stay apart (≥ 60 % distinct)
    assert len(set(short.values())) >= 0.6 * len(ns)


@pytest.mark.parametrize(
    ("start", "want"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::"
            "binary_internal::MulFunctor<float> >",
            "vectorized_elementwise_kernel<MulFunctor>",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native"
            "::sum_functor",
            "reduce_kernel<sum_functor>",
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda",
            "unrolled_elementwise_kernel<direct_copy_kernel_cuda>",
        ),
        ("triton_poi_fused_", "triton_poi_"),
        (
            "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolution",
            "cutlass__5x_cudnn ImplicitGemmConvolution ",
        ),
        (
            "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",
            "cutlass_cudnn_train ImplicitGemmConvolution ",
        ),
        (
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
            "sm90_xmma_fprop_implicit_gemm_bf16bf16 128x128x64",
        ),
        ("sm80_xmma_gemm_", "sm80_xmma_gemm_"),
        ("void cutlass::Kernel2<cutlass_80_", "cutlass_80_"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash", "cudnn_sdpa_sm90_flash"),
        ("Cijk_Ailk_Bjlk_", "Cijk_Ailk_Bjlk_"),
        ("ncclKernel_", "ncclKernel_"),
    ],
)
def test_family(start: str, want: str) -> None:
    """Each family, on the real names that start so: the short name keeps what identifies the kernel."""
    got = [(n, short_kernel(n)) for n in names() if n.startswith(start)]
    assert got, start
    for n, s in got:
        assert s.startswith(want), (n, s)
        if "(" in n and not n.startswith("_Z"):
            assert "(" not in s  # the argument list goes
        tile = re.search(r"tilesize(\d+x\d+x\d+)|_MT(\d+x\d+x\d+)|GemmShapeILi(\d+)ELi(\d+)ELi(\d+)E", n)
        if tile:  # a tile size in the name stays
            t = tile.group(1) or tile.group(2) or "x".join(tile.groups()[2:])
            assert t in s, (n, s)
