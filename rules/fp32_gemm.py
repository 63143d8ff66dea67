"""TV202 fp32-gemm: FP32 matrix multiplies and convolutions on a Tensor-Core GPU run on the slow CUDA cores.

## What it detects
GEMM and convolution kernels that compute in full FP32 on the CUDA cores of a GPU with TF32 Tensor Cores
(NVIDIA compute capability 8.0 or newer, from the trace's `deviceProperties`): kernel names of the FP32
SIMT/FFMA paths (`sgemm`, `simt`, `_ffma_`, `f32f32_f32f32`), never a TF32, 16-bit or 8-bit kernel. Reported
when the time these kernels would save reaches `min_savings_pct` of the analysed steps.

## Why it is slow
With `torch.backends.cuda.matmul.allow_tf32 = False` (PyTorch's default float32 matmul precision "highest")
an FP32 matmul cannot use the Tensor Cores, whose peak on these GPUs is many times the CUDA-core FP32 peak
(H100/H200: 67 TFLOP/s FP32 against 494 TFLOP/s TF32 and 989 TFLOP/s BF16, dense). TF32 keeps FP32 range
and storage and rounds the multiplicands to a 10-bit mantissa, which training tolerates in practice.

## How to fix
Allow TF32 for FP32 matmuls with `torch.set_float32_matmul_precision("high")` (or
`torch.backends.cuda.matmul.allow_tf32 = True`; convolutions follow `torch.backends.cudnn.allow_tf32`), or
run the model under `torch.autocast("cuda", dtype=torch.bfloat16)` so the GEMMs run in BF16 at twice the
TF32 rate. Where autocast is already on, these GEMMs run outside its region or on tensors it does not cast.

## Evidence
The FP32 kernels (count, time, their ops), the achieved FP32 TFLOP/s against the device's FP32 peak when the
ops recorded shapes, and the predicted time with TF32 and with BF16. A kernel limited by its FP32 units
(reaching at least half the FP32 peak) is assumed to keep its share of peak: TF32 time = time × FP32 peak /
TF32 peak (TF32 peak = half the 16-bit Tensor-Core peak). A kernel reaching a share s below half of peak
shrinks only in the fraction 2·s of its time that the arithmetic explains (the rest is latency or memory);
never below its bytes at the memory bandwidth. Savings count only where the GPU was the critical
path: a busy run of kernels passes its savings on only when the work after it was already queued or the
host was blocked waiting for the GPU (a sync); when the host was late anyway (waiting for input, launching
slowly), a shorter kernel only lengthens the idle gap after it.

## Options
- `short_kernel_us` (10.0): a kernel without recorded shapes that is shorter than this is taken as latency-bound
  (no gain); TraceLens's short-kernel threshold.
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, `torch.set_float32_matmul_precision` and "TensorFloat-32 (TF32) on Ampere (and later) devices".
- NVIDIA H100/H200 and A100 datasheets (dense FP32, TF32 and BF16 peaks).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.attention import score_op_ids
from traceview.analyses.classify import sync_calls
from traceview.analyses.names import contains
from traceview.analyses.replay import Transform
from traceview.analyses.whatif import removed_per_step, shrink_kernels
from traceview.evidence import Meta, OpTime
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

CODE = "TV202"
NAME = "fp32-gemm"
SEVERITY = "warning"
CLASS = "gpu_compute"  # the classifier class whose time a fix of these findings removes
TITLE = "FP32 GEMMs run on CUDA cores instead of Tensor Cores"
OPTIONS = {
    "short_kernel_us": Option(10.0, "TraceLens short-kernel threshold: a shapeless kernel shorter than this is latency-bound"),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
FIX = ("These matrix multiplies run in full FP32 on the CUDA cores: with float32 matmul precision 'highest' "
       "(PyTorch's default) the Tensor Cores are not used, and their TF32 peak is several times the FP32 one. "
       "Call torch.set_float32_matmul_precision(\"high\") to allow TF32 (FP32 range and storage, 10-bit "
       "mantissa products), or run the model under torch.autocast(\"cuda\", dtype=torch.bfloat16).")
FIX_AUTOCAST = ("These matrix multiplies run in full FP32 on the CUDA cores while others in the trace already "
                "use 16-bit Tensor-Core kernels: they run outside the autocast region or on tensors it does not "
                "cast. Move them under torch.autocast, cast their inputs, or allow TF32 for what must stay FP32 "
                "with torch.set_float32_matmul_precision(\"high\").")
#: FP32 SIMT/FFMA GEMM and convolution kernels (cuBLAS, CUTLASS, cuDNN); never a Tensor-Core kernel
FP32_KERNEL_RE = r"(?i)sgemm|simt|_ffma|f32f32_f32f32"
TC_KERNEL_RE = r"(?i)tf32|bf16|f16|fp16|hmma|wgmma|imma|i8i8|e4m3|e5m2|s1688|s16816|_h\d{3,5}"
#: a GEMM limited by its FP32 units reaches at least this share of the FP32 peak (cuBLAS FP32 GEMMs of
#: compute-bound shapes reach 0.5-0.8 of it on H100/H200); below, the rest of its time is latency or memory
FULL_SHARE = 0.5
LOW_PRECISION_RE = r"(?i)bf16|f16|fp16|hmma|h1688|h16816|e4m3|e5m2"


def tensor_core_gpu(ctx: RuleContext) -> bool:
    """A CUDA GPU with TF32 Tensor Cores (compute capability >= 8.0)."""
    props = ctx.trace.meta.device_properties
    major = props[0].get("computeMajor") if props else None
    return ctx.trace.meta.backend == "cuda" and isinstance(major, int) and major >= 8


def fp32_kernels(ctx: RuleContext, short_us: float = 10.0) -> pl.DataFrame:
    """The FP32 GEMM/conv kernels in the analysed steps with their predicted TF32 / BF16 times:
    [i, name, op_name, ts, end, dur, flops, new_dur, bf16_dur]."""
    spec = ctx.spec
    g = ctx.trace.gpu.select("i", "name", "kind", "ts", "end", "dur")  # (a filter copies every column it has)
    k = g.filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi)
                 & contains(g, FP32_KERNEL_RE, unless=TC_KERNEL_RE))
    k = k.select("i", "name", "ts", "end", "dur").join(ctx.kb.select("i", "op", "op_name", "flops", "bytes", "bpe"),
                                                        on="i", how="left")
    # the Q·K^T and P·V matmuls of a materialized attention are the attention rule's (a fused kernel replaces them)
    k = k.filter(~pl.col("op").is_in(score_op_ids(ctx.trace).implode()).fill_null(False)).drop("op")
    # an op whose inputs are recorded as 16-bit is not an FP32 GEMM, whatever its kernel is called
    k = k.filter(pl.col("bpe").is_null() | (pl.col("bpe") >= 4))
    floor = (pl.col("bytes").fill_null(0) / spec.bw * 1e9)
    # the share of the kernel's time the FP32 units explain: achieved / (FULL_SHARE x FP32 peak), capped at 1;
    # without shapes, a kernel shorter than `short_us` is taken as latency-bound (nothing to gain)
    eff = pl.col("flops") / (spec.fp32_tflops * 1e12) / (pl.col("dur") / 1e9)
    share = pl.when(pl.col("flops").is_not_null() & (pl.col("dur") > 0)).then((eff / FULL_SHARE).clip(0.0, 1.0))
    share = share.otherwise(pl.when(pl.col("dur") >= short_us * 1000).then(1.0).otherwise(0.0))
    k = k.with_columns(_c=share)

    def scaled(ratio: float, fl: pl.Expr) -> pl.Expr:
        t = pl.col("dur") * (1 - pl.col("_c")) + pl.col("dur") * pl.col("_c") * ratio
        return pl.max_horizontal(t, fl).cast(pl.Int64)

    return k.with_columns(new_dur=scaled(spec.fp32_tflops / spec.tf32_tflops, floor),
                          bf16_dur=scaled(spec.fp32_tflops / spec.tc_tflops, floor / 2)).drop("_c")


def _count_low_precision_gemms(gpu: pl.DataFrame) -> int:
    """The compute kernels of `gpu` that are 16-bit/FP8 GEMMs or convolutions (the regexes on each distinct name
    once, with its count)."""
    names = gpu.select("kind", "name").filter(pl.col("kind") == "compute")["name"].value_counts()
    hit = pl.col("name").str.contains(LOW_PRECISION_RE) & pl.col("name").str.contains(r"(?i)gemm|xmma|cutlass|nvjet|conv")
    return int(names.filter(hit)["count"].sum())


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The kernel tails that TF32 removes (see the module doc); computed once (the check and the projection)."""
    return ctx.once("removes", lambda: shrink_kernels(ctx.trace, _kernels(ctx).select("i", "new_dur"),
                                                      sync_calls(ctx.trace)))


def _kernels(ctx: RuleContext) -> pl.DataFrame:
    return ctx.once("fp32_kernels", lambda: fp32_kernels(ctx, ctx.options["short_kernel_us"]))


class Evidence(msgspec.Struct, kw_only=True):
    kernels: Annotated[int, Meta(description="FP32 (non-Tensor-Core) GEMM kernels in the analysed steps")]
    kernel_time_us: Annotated[float, Meta(description="their device time (µs)")]
    top_kernel: Annotated[str, Meta(description="the longest one's name (first 160 characters)")]
    ops: Annotated[list[OpTime], Meta(description="the 5 ops whose FP32 GEMMs take longest")]
    achieved_tflops: Annotated[float | None, Meta(description="their achieved TFLOP/s (kernels with FLOP counts)")]
    fp32_peak_tflops: Annotated[float | None, Meta(description="the device's FP32 peak (TFLOP/s)")]
    tf32_peak_tflops: Annotated[float | None, Meta(description="its TF32 Tensor-Core peak (TFLOP/s)")]
    bf16_peak_tflops: Annotated[float | None, Meta(description="its BF16 Tensor-Core peak (TFLOP/s)")]
    device: Annotated[str, Meta(description="the device the peaks are of")]
    predicted_tf32_time_us: Annotated[float, Meta(description="the same GEMMs on TF32 Tensor Cores, predicted (µs)")]
    predicted_bf16_time_us: Annotated[float, Meta(description="the same GEMMs in BF16, predicted (µs)")]
    savings_per_step_us: Annotated[dict[str, float], Meta(description="the fix's saving per step (µs), by step number")]
    bf16_gemms_in_trace: Annotated[int, Meta(description="GEMM kernels already in 16-bit in the trace")]


def check(ctx: RuleContext) -> list[Finding]:
    if not tensor_core_gpu(ctx):
        return []
    k = _kernels(ctx)
    if k.height == 0:
        return []
    per = removed_per_step(removes(ctx), ctx.steps)
    savings = int(per["removed"].sum())
    if ctx.pct(savings) < ctx.options["min_savings_pct"]:
        return []
    spec, cost = ctx.spec, int(k["dur"].sum())
    flops = k.filter(pl.col("flops").is_not_null())
    achieved = float(flops["flops"].sum()) / (float(flops["dur"].sum()) / 1e9) if flops.height else None
    ops = (k.group_by("op_name").agg(pl.len().alias("count"), pl.col("dur").sum())
           .sort(["dur", "op_name"], descending=[True, False], nulls_last=True).head(5))
    low = _count_low_precision_gemms(ctx.trace.gpu)
    evidence = Evidence(
        kernels=k.height, kernel_time_us=round(cost / 1000, 3),
        top_kernel=str(k.sort(["dur", "i"], descending=[True, False])["name"][0])[:160],
        ops=[OpTime(op=r["op_name"], count=r["count"], time_us=round(r["dur"] / 1000, 3)) for r in ops.to_dicts()],
        achieved_tflops=round(achieved / 1e12, 1) if achieved else None,
        fp32_peak_tflops=spec.fp32_tflops, tf32_peak_tflops=spec.tf32_tflops, bf16_peak_tflops=spec.tc_tflops,
        device=spec.name,
        predicted_tf32_time_us=round(float(k["new_dur"].sum()) / 1000, 3),
        predicted_bf16_time_us=round(float(k["bf16_dur"].sum()) / 1000, 3),
        savings_per_step_us={str(s): round(r / 1000, 3) for s, r in per.rows()},
        bf16_gemms_in_trace=low,
    )
    steps = per.filter(pl.col("removed") > 0)["step"].to_list()
    return [ctx.finding(cost_ns=cost, savings_ns=savings, count=k.height, steps=steps, evidence=evidence,
                        fix=FIX_AUTOCAST if low else FIX, kernel_ids=k["i"])]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each FP32 GEMM/conv kernel takes its TF32 time from the device's
    throughput table (`fp32_kernels`' new_dur: the FP32-explained share scaled by FP32 / TF32 peak, never below
    its bytes over the bandwidth)."""
    k = _kernels(ctx)
    if k.height == 0:
        return None
    return Transform(NAME, gpu_dur=dict(zip(k["i"].cast(pl.Int64).to_list(), k["new_dur"].to_list(), strict=True)))
