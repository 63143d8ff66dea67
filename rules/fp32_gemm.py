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
Autocast is not free: each cast is an eager op (and its gradient's cast back an autograd node), so on a step the
host sets the pace of it can make the step slower.
Where its replay lengthens the step by 1 % or more (`autocast_slower_us`), the fix says so and by how much: of the
19 bundled precision twins, the six that ran slower in BF16 (batch-1 BERT, GPT-2 and ViT, Swin-T, EfficientNet-B0,
ResNet-50) replay slower, and none of the 13 that saved does (tests/test_predictions.py).

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

The replayed saving prices the fix the finding advises, and both ways to fix are priced (`fix_variants`). In
both, a GEMM whose rows are not a multiple of 16 bytes at the fix's width (a vocabulary of 50257 or 30522: 4
elements in TF32, 8 in BF16; the FP32 CUDA-core kernel does not care) runs on cuBLAS's fallback kernel, at
`MISALIGNED_SHARE` of the 16-bit peak in either width (unaligned-gemm's measurements): GPT-2's LM head is
predicted at 8.0 ms a step from its FP32 trace, and the same program ran it in 7.6 ms in TF32 and 7.9 in BF16
(their own traces). TF32: the GEMMs at their TF32 time. Autocast changes more than the GEMMs: they run in BF16
(the same share of the 16-bit peak, never below half their bytes over the bandwidth); SDPA's FP32
memory-efficient or cuDNN attention kernels become the 16-bit fused kernel autocast's inputs select (their FLOPs
at the share of the 16-bit peak fused attention reaches in the bundled H200 training programs, their median 0.15
on the FLOPs it computes (a causal call, SDPA's `is_causal`, skips the blocks above the diagonal): materialized-
attention's `efficiency`; ViT-B/16's 15.5 ms a step of FP32 `fmha_cutlass` kernels, 1.5 ms
predicted, 2.4 measured in its BF16 trace, whose cuDNN kernels reach 0.13 at 197 tokens); and the
host casts each GEMM's weight and bias on every call, each FP32 activation a GEMM reads (a layer norm's output: the
latest FP32 producer of that many elements on the thread, `FP32_PRODUCERS`; 19 a step on GPT-2, 24 on ViT-B/16, 50
on BERT, as their BF16 traces count), and their gradients back in the backward (an eager op each in the forward, an
autograd node each in the backward, at the trace's own one-kernel nodes' cost: HF GPT-2 runs 66 casts and 75
`ToCopyBackward0` a step under autocast); each cast is also a copy kernel on the device (6 bytes an
element at `CAST_SHARE` of the memory bandwidth, beside the GEMM that reads the cast tensor; the gradients' beside
the backward's GEMMs): 1.00 ms a step priced for GPT-2, where its BF16 trace runs those casts in 0.99 ms, and the
fixed step's device time then within 4 % of that trace's (8 % short when the casts cost the device nothing). Measured
on the H200
(`sample_traces/ab_traced`: the problem traced and both sides timed in one process), saving predicted against
measured: ViT-B/16 145.1 / 142.9 ms (121.9 when priced as TF32, which left the fixed step at 56 ms against 34);
ConvNeXt-T 67.7 / 65.5; HF BERT-base 35.6 / 39.8; HF GPT-2 34.4 / 32.2 (the LM head's three BF16 GEMMs on the
fallback kernel: 8 ms of the fixed step). Recorded after this model was set: GPT-2 at batch 32 131.5 / 127.0,
BERT at sequence 512 113.1 / 103.3, and ViT-B/16 at batch 16 21.4 / 14.7, a miss: its BF16 step is host-bound
(37.2 ms measured, 30.8 replayed), and a trace whose step sits at the device's floor bounds its host time only
from above. FP32 -> TF32, recorded after the TF32 variant priced misaligned GEMMs: GPT-2 29.8 / 28.9, ConvNeXt-T
32.6 / 29.6, BERT-base 46.3 / 37.3 (a miss of the same kind: its TF32 step is host-bound). (Those autocast figures
predate the casts' copy kernels, which took 1-3 % off each saving: docs/predictions.md has the current ones.) Not
modelled: the casts of ops autocast runs in FP32 on 16-bit inputs (GPT-2's `pow` in its tanh GELU, a `.float()` on
the logits: ~1 ms a step more in GPT-2's BF16 trace), and the memory-bound kernels that then run on 16-bit
activations (~1.3 ms a step less there).

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

import math
from typing import Annotated

import msgspec
import numpy as np
import polars as pl

from traceview.analyses.alignment import misaligned_calls_as
from traceview.analyses.attention import FUSED_ATTN_KERNEL_RE, fused_attention_ns, score_op_ids
from traceview.analyses.classify import sync_calls
from traceview.analyses.fixes import SLOWER_PCT, slower_by_us
from traceview.analyses.names import contains
from traceview.analyses.opshapes import decode
from traceview.analyses.overhead import backward_node_host_ns, eager_op_host_ns
from traceview.analyses.replay import Transform
from traceview.analyses.rowid import by_id
from traceview.analyses.tree import ancestor_ids, tree_positions
from traceview.analyses.whatif import removed_per_step, shrink_kernels
from traceview.engine import CHAIN
from traceview.evidence import Meta, OpTime
from traceview.frames import dropnull, filled, members, pick
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
FIX_PAD = (" Some of them have rows of {dims} elements, not a multiple of 16 bytes in TF32 or BF16: on the Tensor "
           "Cores those run on a fallback kernel several times slower (the saving counts it); pad to {pads} (a "
           "multiple of 64, e.g. the vocabulary) to get the rest.")
FIX_SLOWER = (" On this step autocast would cost time: replayed, it adds about {ms:.1f} ms a step, its casts (an eager "
              "op each, and an autograd node for each gradient cast back, on a host that sets the step's pace) "
              "outweighing faster GEMMs that are not on the critical path; TF32 adds no casts.")
#: FP32 SIMT/FFMA GEMM and convolution kernels (cuBLAS, CUTLASS, cuDNN); never a Tensor-Core kernel
FP32_KERNEL_RE = r"(?i)sgemm|simt|_ffma|f32f32_f32f32"
TC_KERNEL_RE = r"(?i)tf32|bf16|f16|fp16|hmma|wgmma|imma|i8i8|e4m3|e5m2|s1688|s16816|_h\d{3,5}"
#: a GEMM limited by its FP32 units reaches at least this share of the FP32 peak (cuBLAS FP32 GEMMs of
#: compute-bound shapes reach 0.5-0.8 of it on H100/H200); below, the rest of its time is latency or memory
FULL_SHARE = 0.5
LOW_PRECISION_RE = r"(?i)bf16|f16|fp16|hmma|h1688|h16816|e4m3|e5m2"
#: ops autocast runs in 16-bit that launch GEMM or attention kernels (CUDA's lower-precision list; convolutions
#: are fp32-conv's): it casts each FP32 floating input once, at the outermost such op (nested ones get 16-bit)
AUTOCAST_OPS = ["aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
                "aten::matmul", "aten::addmv", "aten::mv", "aten::einsum", "aten::scaled_dot_product_attention"]
#: the inputs of an outermost autocast op that are a module's parameters (its weight and bias), by position: autocast
#: casts these on every call and, in training, their gradients back (`_casts`); `linear(input, weight, bias)`,
#: `addmm(bias, input, weight)` (Hugging Face's Conv1D). An activation input is cast too when an FP32 op produced it
#: (a layer norm's output), not when a 16-bit GEMM did: `_activation_casts`
PARAM_INPUTS = {"aten::linear": (1, 2), "aten::addmm": (0, 2)}
#: the activation inputs of an outermost autocast op, by position (the rest are parameters or not tensors)
ACTIVATION_INPUTS = {"aten::linear": (0,), "aten::addmm": (1,), "aten::mm": (0, 1), "aten::bmm": (0, 1),
                     "aten::baddbmm": (1, 2), "aten::addbmm": (1, 2), "aten::matmul": (0, 1), "aten::addmv": (1, 2),
                     "aten::mv": (0, 1)}  # (SDPA's Q, K, V are projections' outputs, split: 16-bit already)
#: forward ops whose output stays FP32 under autocast (its float32 list: norms, softmax, pow, exp, … — Hugging Face
#: GPT-2's tanh GELU calls pow — and ops outside its lists on FP32 inputs, such as an embedding's FP32 table): an
#: autocast op that reads their output casts it, on every call
FP32_PRODUCERS = {"aten::layer_norm", "aten::group_norm", "aten::rms_norm", "aten::embedding", "aten::softmax",
                  "aten::log_softmax", "aten::pow", "aten::exp", "aten::log", "aten::rsqrt", "aten::reciprocal",
                  "aten::softplus", "aten::log1p", "aten::expm1", "aten::erfinv"}
#: the cast kernels autocast adds (`aten::_to_copy`, 6 bytes an element: FP32 read and BF16 written, or the reverse):
#: their share of the device's memory bandwidth, and the floor (ns) of the smallest. Measured in the BF16 twins' own
#: traces (H200, 4.8 TB/s): the casts of HF GPT-2's parameters and activations ran 1.5-4.6 TB/s (contiguous tensors on
#: the vectorised path; a transposed weight gradient, a channels_last weight on the strided one), together 0.94 ms a
#: step (collected3 gpt2_sdpa), ~0.55 of the peak; the smallest 1.2-2.9 µs (also resnet18_bf16_cl, resnet50_bf16_cl)
CAST_SHARE = 0.55
CAST_FLOOR_NS = 2000
#: share of the 16-bit peak a GEMM reaches on the fallback kernel that misaligned rows select, in BF16 and TF32
#: alike (H200, unaligned-gemm's measurements: GPT-2's LM head, [4096, 768] x [768, 50257] and its two gradients,
#: 949 GFLOP in 7.85 ms a step in BF16, 121 TFLOP/s; the micro-benchmark's LM-head shapes 95-154 TFLOP/s in BF16
#: and 104-123 in TF32, against 700+ and 200-365 padded)
MISALIGNED_SHARE = 0.12


def tensor_core_gpu(ctx: RuleContext) -> bool:
    """A CUDA GPU with TF32 Tensor Cores (compute capability >= 8.0)."""
    props = ctx.trace.meta.device_properties
    major = props[0].get("computeMajor") if props else None
    return ctx.trace.meta.backend == "cuda" and isinstance(major, int) and major >= 8


def fp32_kernels(ctx: RuleContext, short_us: float = 10.0) -> pl.DataFrame:
    """The FP32 GEMM/conv kernels in the analysed steps with their predicted TF32 / BF16 times:
    [i, name, op_name, ts, end, dur, flops, new_dur, bf16_dur]."""
    spec = ctx.spec
    g = pick(ctx.trace.gpu, "i", "name", "kind", "ts", "end", "dur")  # (a filter copies every column it has)
    # one query (a small trace's run is mostly polars' fixed cost per query)
    k = g.lazy().filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi)
                        & contains(g, FP32_KERNEL_RE, unless=TC_KERNEL_RE))
    k = k.select("i", "name", "ts", "end", "dur").join(
        pick(ctx.kb, "i", "op", "op_name", "flops", "bytes", "bpe").lazy(), on="i", how="left")
    # the Q·K^T and P·V matmuls of a materialized attention are the attention rule's (a fused kernel replaces them)
    k = k.filter(~pl.col("op").is_in(members(score_op_ids(ctx.trace))).fill_null(False)).drop("op")
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
                          bf16_dur=scaled(spec.fp32_tflops / spec.tc_tflops, floor / 2)).drop("_c").collect(**CHAIN)


def _count_low_precision_gemms(gpu: pl.DataFrame) -> int:
    """The compute kernels of `gpu` that are 16-bit/FP8 GEMMs or convolutions (the regexes on each distinct name
    once, with its count)."""
    hit = pl.col("name").str.contains(LOW_PRECISION_RE) & pl.col("name").str.contains(r"(?i)gemm|xmma|cutlass|nvjet|conv")
    return int(pick(gpu, "kind", "name").lazy().filter(pl.col("kind") == "compute").group_by("name").len()
               .filter(hit).select(pl.col("len").sum()).collect(**CHAIN).item())


def _low_precision_gemms(ctx: RuleContext) -> int:
    """`_count_low_precision_gemms` of the trace, once (the check and the fix both read it)."""
    return ctx.once("low_precision_gemms", lambda: _count_low_precision_gemms(ctx.trace.gpu))


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
    savings_per_step_us: Annotated[dict[str, float], Meta(
        description="GEMM time the fix removes per step (µs, kernels at their TF32 time), by step number: the "
                    "finding's saving is what that gives the step when replayed (nothing where the GEMMs are off the "
                    "critical path)")]
    bf16_gemms_in_trace: Annotated[int, Meta(description="GEMM kernels already in 16-bit in the trace")]
    autocast_slower_us: Annotated[float, Meta(
        description="how much the autocast variant lengthens the replayed step (µs per step, unprofiled; 0 where it "
                    "does not): its casts on a host-bound step")]


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
    ops = (k.lazy().group_by("op_name").agg(pl.len().alias("count"), pl.col("dur").sum())
           .sort(["dur", "op_name"], descending=[True, False], nulls_last=True, maintain_order=True).head(5).collect(**CHAIN))
    low = _low_precision_gemms(ctx)
    evidence = Evidence(
        kernels=k.height, kernel_time_us=round(cost / 1000, 3),
        top_kernel=str(k.sort(["dur", "i"], descending=[True, False], maintain_order=True)["name"][0])[:160],
        ops=[OpTime(op=r["op_name"], count=r["count"], time_us=round(r["dur"] / 1000, 3)) for r in ops.to_dicts()],
        achieved_tflops=round(achieved / 1e12, 1) if achieved else None,
        fp32_peak_tflops=spec.fp32_tflops, tf32_peak_tflops=spec.tf32_tflops, bf16_peak_tflops=spec.tc_tflops,
        device=spec.name,
        predicted_tf32_time_us=round(float(k["new_dur"].sum()) / 1000, 3),
        predicted_bf16_time_us=round(float(k["bf16_dur"].sum()) / 1000, 3),
        savings_per_step_us={str(s): round(r / 1000, 3) for s, r in per.rows()},
        bf16_gemms_in_trace=low,
        autocast_slower_us=round(_autocast_slower_us(ctx), 3),
    )
    steps = per.filter(pl.col("removed") > 0)["step"].to_list()
    fix = FIX_AUTOCAST if low else FIX
    rows = _fallback(ctx, as_bf16=False)["rows"]
    if rows.len():  # the fix's kernels would fall back on these: say so, with the padding unaligned-gemm advises
        dims = sorted({int(r) for rs in rows.to_list() for r in rs})[:3]
        fix += FIX_PAD.format(dims=", ".join(map(str, dims)), pads=", ".join(str(-(-d // 64) * 64) for d in dims))
    if ctx.pct(evidence.autocast_slower_us * 1000 * max(ctx.steps.height, 1)) >= SLOWER_PCT:  # (per step)
        fix += FIX_SLOWER.format(ms=evidence.autocast_slower_us / 1000)
    return [ctx.finding(cost_ns=cost, savings_ns=savings, count=k.height, steps=steps, evidence=evidence,
                        fix=fix, kernel_ids=k["i"])]


def _autocast_variant(ctx: RuleContext) -> Transform | None:
    """`_autocast`, once per trace: the check (`_autocast_slower_us`), the fix and the fix variants share it."""
    return ctx.once("autocast", lambda: _autocast(ctx))


def _autocast_slower_us(ctx: RuleContext) -> float:
    """`fixes.slower_by_us` of the autocast variant."""
    t = _autocast_variant(ctx)
    return slower_by_us(ctx, [t]) if t is not None else 0.0


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation, the one the finding advises: where the trace already runs 16-bit GEMMs
    (the advice is autocast: `FIX_AUTOCAST`) the autocast variant, else TF32 (`fix_variants`)."""
    if not tensor_core_gpu(ctx):
        return None
    if _low_precision_gemms(ctx):
        return _autocast_variant(ctx)
    return _tf32(ctx)


def fix_variants(ctx: RuleContext) -> dict[str, Transform]:
    """Both ways to fix, as replay transformations.

    - tf32: each FP32 GEMM/conv kernel takes its TF32 time from the device's throughput table (`fp32_kernels`'
      new_dur: the FP32-explained share scaled by FP32 / TF32 peak, never below its bytes over the bandwidth).
    - autocast: each takes its BF16 time instead (bf16_dur: the same share at the 16-bit peak, never below half
      its bytes over the bandwidth); each FP32 fused attention kernel (SDPA's memory-efficient or cuDNN backend
      on FP32 inputs) runs as the 16-bit fused kernel autocast's inputs select: its FLOPs at
      `attention.FUSED_EFFICIENCY` of the 16-bit peak (`fused_attention_ns`), never below half its bytes over the
      bandwidth; and autocast's casts are paid, on the host and, as copy kernels, on the device (`_casts`).
      Not modelled: the casts of ops autocast runs in FP32 on 16-bit inputs (Hugging Face GPT-2's `pow` in its
      tanh GELU, a `.float()` on the logits), and the memory-bound kernels that run on 16-bit activations afterwards
      (fp32-conv prices those of convolutional networks)."""
    if not tensor_core_gpu(ctx):
        return {}
    return {v: t for v, t in (("tf32", _tf32(ctx)), ("autocast", _autocast_variant(ctx)))
            if t is not None}


def _tf32(ctx: RuleContext) -> Transform | None:
    k = _kernels(ctx)
    if k.height == 0:
        return None
    k = _on_fallback(ctx, k, "new_dur", as_bf16=False)
    return Transform(NAME, gpu_dur=dict(zip(k["i"].cast(pl.Int64).to_list(), k["new_dur"].to_list(), strict=True)))


def _on_fallback(ctx: RuleContext, k: pl.DataFrame, col: str, as_bf16: bool) -> pl.DataFrame:
    """`k` (fp32_kernels) with `col` raised, for each GEMM whose rows are misaligned at the fix's width
    (`_fallback`), to its FLOPs at `MISALIGNED_SHARE` of the 16-bit peak (cuBLAS's fallback kernel), never above
    the time it took; `k` gains the kernels' op."""
    bad = _fallback(ctx, as_bf16)["op"]
    slow = (pl.col("flops") / (MISALIGNED_SHARE * ctx.spec.tc_tflops * 1e12) * 1e9).fill_null(0)
    # (one query: a small trace's run is mostly polars' fixed cost per query)
    return (k.lazy().join(pick(ctx.kb, "i", "op").lazy(), on="i", how="left")
            .with_columns(pl.when(pl.col("op").is_in(members(bad)))
                          .then(pl.min_horizontal(pl.max_horizontal(pl.col(col), slow), pl.col("dur")))
                          .otherwise(pl.col(col)).cast(pl.Int64).alias(col)).collect(**CHAIN))


def _fp32_attention(ctx: RuleContext) -> pl.DataFrame:
    """FP32 fused attention kernels of the analysed steps with their 16-bit flash time: [i, op, new_dur]."""
    spec = ctx.spec
    g = pick(ctx.trace.gpu, "i", "name", "kind", "ts", "dur")
    a = g.lazy().filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi)
                        & contains(ctx.trace.gpu, FUSED_ATTN_KERNEL_RE))  # (on the distinct names)
    a = a.join(pick(ctx.kb, "i", "op", "op_name", "flops", "bytes", "bpe").lazy(), on="i", how="left")
    a = a.filter((pl.col("bpe") >= 4) & pl.col("flops").is_not_null())
    back = pl.col("op_name").str.contains("backward")
    # (a causal call's FLOPs are the blocks it computes, in 16 bits as in FP32: `roofline.kernel_bound`)
    fused = pl.max_horizontal(fused_attention_ns(pl.col("flops"), back, spec.tc_tflops * 1e12),
                              pl.col("bytes").fill_null(0) / 2 / spec.bw * 1e9)
    return a.select("i", "op", new_dur=fused.clip(0, pl.col("dur")).cast(pl.Int64)).collect(**CHAIN)


def _casts(ctx: RuleContext, ops: pl.Series, kernels: pl.DataFrame) -> tuple[dict[int, int], dict[int, int]]:
    """What autocast's casts add, for the ops (host row ids) that launched the FP32 GEMM and attention kernels it
    changes (`kernels`: [i, op] of those kernels): (host time as `Transform.host_cut`, negative: time added; device
    time as `Transform.gpu_add`). In the forward, the outermost `AUTOCAST_OPS` op above each casts its FP32
    parameters (`PARAM_INPUTS`, by its `Input type`: `aten::to` -> `_to_copy` -> a copy kernel each) and each FP32
    activation it reads (`_activation_casts`: a layer norm's output, not the previous linear's); in a training step
    each cast's gradient is cast back in the backward (`ToCopyBackward0`), spread over the backward's GEMM ops. On
    the host each forward cast costs one eager op that launches one elementwise kernel (`overhead.eager_op_host_ns`)
    and each gradient cast one autograd node that does (`overhead.backward_node_host_ns`: 38 µs traced in GPT-2's
    BF16 trace, where a forward cast took 18-27); on the
    device its copy of the tensor's elements (`cast_ns`), beside the first kernel of the op that casts it (the
    backward's gradient casts spread over the backward GEMM ops' first kernels, as on the host). Measured on HF
    GPT-2 (6 layers, bf16 autocast): 66 casts a step under its 24 forward `addmm`s (48 of them parameters: the rest
    are activations from layer norms) and 75 `ToCopyBackward0`; their copy kernels priced 1.00 ms a step, 0.99 in the
    same program's BF16 trace (H200)."""
    h = ctx.trace.host
    if ops.len() == 0 or "input_type" not in h.columns:
        return {}, {}
    ops = dropnull(ops).unique().cast(pl.UInt32)
    name = pl.col("name")
    back, ac = h.select(  # (one query: a small trace's run is mostly polars' fixed cost per query)
        name.str.starts_with("autograd::engine::evaluate_function") | name.str.ends_with("Backward0"),
        name.is_in(AUTOCAST_OPS).alias("_ac")).get_columns()
    tree = tree_positions(h)  # (the row positions, once for the climbs below)
    is_back = ancestor_ids(h, ops, filled(back, False).to_numpy(), include_self=True, tree=tree) >= 0
    fwd, bwd = ops.filter(pl.Series(~is_back)), ops.filter(pl.Series(is_back))
    ac = filled(ac, False).to_numpy()
    top = ancestor_ids(h, fwd, ac, include_self=True, tree=tree)
    for _ in range(3):  # climb to the outermost (linear -> matmul -> mm)
        up = ancestor_ids(h, pl.Series(np.where(top >= 0, top, fwd.to_numpy()), dtype=pl.UInt32), ac, tree=tree)
        if not (up >= 0).any():
            break
        top = np.where((top >= 0) & (up >= 0), up, top)
    outer = pl.Series(np.unique(top[top >= 0]), dtype=pl.UInt32)
    if outer.len() == 0:
        return {}, {}
    rows = by_id(h, outer, "name", "input_dims", "input_type")
    params: dict[tuple, list[int]] = {}  # decoded once per distinct (op, shapes): a model repeats a few
    for key in pick(rows, "name", "input_dims", "input_type").unique().iter_rows():
        op, dims, types = key
        params[key] = [math.prod(d) for j, (d, t) in enumerate(decode(dims, types))
                       if t == "float" and d and j in PARAM_INPUTS.get(op, ())]
    elems = [list(params[key]) for key in pick(rows, "name", "input_dims", "input_type").iter_rows()]
    act = _activation_casts(ctx, outer)
    outer_ids = outer.to_list()  # (ints: the ids' dict keys below)
    elems = [e + act.get(op, []) for op, e in zip(outer_ids, elems, strict=True)]
    one = eager_op_host_ns(ctx.trace)
    cut = {op: -int(len(e) * one) for op, e in zip(outer_ids, elems, strict=True) if e}
    bwd_ids = bwd.to_list()
    if bwd_ids and cut:  # each gradient cast is an autograd node (`ToCopyBackward0`), at the trace's own nodes' cost
        each = -int(sum(len(e) for e in elems) * backward_node_host_ns(ctx.trace) / len(bwd_ids))
        for op in bwd_ids:
            cut[op] = cut.get(op, 0) + each
    # the device: each outer op's casts beside the first kernel it launches (the earliest of its launching ops'); the
    # gradients' beside the backward's
    lfirst = (kernels.lazy().select(pl.col("i").cast(pl.Int64), pl.col("op").cast(pl.Int64)).drop_nulls()
              .group_by("op").agg(pl.col("i").min()))
    owner = pl.DataFrame({"op": fwd.cast(pl.Int64), "outer": pl.Series(top, dtype=pl.Int64)})
    first = lfirst.collect(**CHAIN)  # (collected once: the query below reads it too)
    at = (first.lazy().join(owner.lazy().filter(pl.col("outer") >= 0), on="op").group_by("outer").agg(pl.col("i").min())
          .collect(**CHAIN))
    at = dict(zip(at["outer"].to_list(), at["i"].to_list(), strict=True))
    first = dict(zip(first["op"].to_list(), first["i"].to_list(), strict=True))
    bw = ctx.spec.bw
    ns = {x: cast_ns(x, bw) for x in {x for e in elems for x in e}}  # (each distinct size once: a model repeats few)
    per_op = [sum(ns[x] for x in e) for e in elems]
    add: dict[int, int] = {}
    for op, e, c in zip(outer_ids, elems, per_op, strict=True):
        if e and op in at:
            add[at[op]] = add.get(at[op], 0) + c
    ks = [first[op] for op in bwd_ids if op in first]
    if ks:
        share = int(sum(per_op) / len(ks))
        for k in ks:
            add[k] = add.get(k, 0) + share
    return cut, add


def cast_ns(elements: int, bw: float) -> int:
    """Device time (ns) of one autocast cast of `elements`: 6 bytes an element at `CAST_SHARE` of the memory
    bandwidth `bw` (bytes/s), never below `CAST_FLOOR_NS`."""
    return int(max(CAST_FLOOR_NS, elements * 6 / (bw * CAST_SHARE) * 1e9))


def _out_elements(name: str, ts: list[tuple[list[int], str]]) -> int | None:
    """Elements of the output of an autocast op (its 16-bit result) or an FP32 producer, from its inputs' dims."""
    d = [x for x, _ in ts]
    try:
        if name == "aten::linear":
            return math.prod(d[0][:-1]) * d[1][0]
        if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm"):
            return math.prod(d[1][:-1]) * d[2][-1] // (d[1][0] if name == "aten::addbmm" else 1)
        if name in ("aten::mm", "aten::bmm", "aten::matmul"):
            return math.prod(d[0][:-1]) * d[1][-1]
        if name == "aten::scaled_dot_product_attention":
            return math.prod(d[0][:-1]) * d[2][-1]
        if name == "aten::embedding":
            return math.prod(d[1]) * d[0][-1]
        if name in FP32_PRODUCERS:
            return math.prod(d[0])
    except (IndexError, TypeError):
        return None
    return None


def _activation_casts(ctx: RuleContext, outer: pl.Series) -> dict[int, list[int]]:
    """Activation inputs autocast casts, per outermost autocast op (host row id -> each cast's elements): an FP32
    input is cast
    when the latest forward op on its thread that produced that many elements stays FP32 under autocast
    (`FP32_PRODUCERS`: a layer norm's output, an embedding's) rather than an autocast op (a 16-bit result, as the
    previous linear's for the next one in an MLP). Consecutive autocast ops reading inputs of the same dims read the
    same tensor (Q, K and V after one layer norm: three casts). Kineto records no tensor identity; the element count
    and the order stand in for it. Measured: ViT-B/16 casts 24 activations a step under autocast (a layer norm
    before each of its 2 x 12 blocks' first linear), BERT 50 (Q, K, V and the MLP's first linear per layer)."""
    h = ctx.trace.host
    prod_ids = h.filter(pl.col("name").is_in(list(FP32_PRODUCERS)))["i"]  # (host time: not the device's window)
    if prod_ids.len() == 0:  # no op that produces an FP32 activation: nothing is cast (no query more)
        return {}
    rows = by_id(h, pl.concat([outer, prod_ids.cast(pl.UInt32)]).unique().sort(), "i", "name", "tid", "ts", "end",
                 "input_dims", "input_type")
    key = ["name", "input_dims", "input_type"]
    u = pick(rows, *key).unique()
    e_out, e_in, dims = [], [], []
    for name, d, t in u.iter_rows():  # distinct (name, shapes), not events
        ts = decode(d, t)
        ins = [] if name in FP32_PRODUCERS else [
            (math.prod(x), str(x)) for j, (x, ty) in enumerate(ts)
            if ty == "float" and x and j in ACTIVATION_INPUTS.get(name, ())]
        e_out.append(_out_elements(name, ts))
        e_in.append([n for n, _ in ins])
        dims.append([x for _, x in ins])
    if not any(e_in):  # no FP32 activation input: no consumer
        return {}
    u = u.with_columns(pl.Series("e_out", e_out, pl.Int64), pl.Series("e_in", e_in, pl.List(pl.Int64)),
                       pl.Series("dims", dims, pl.List(pl.String)))
    r = rows.join(u, on=key, how="left", nulls_equal=True)
    prod = r.filter(pl.col("e_out").is_not_null()).select(
        pl.col("tid").cast(pl.Int64), pl.col("end").cast(pl.Int64), e="e_out",
        fp32=pl.col("name").is_in(list(FP32_PRODUCERS))).sort("end")
    cons = (r.filter(pl.col("e_in").list.len() > 0)
            .select(pl.col("i").cast(pl.Int64), pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64),
                    e="e_in", dims="dims")
            .explode("e", "dims").sort("ts"))
    if cons.height == 0 or prod.height == 0:
        return {}
    # (both sides sorted on the key above: polars cannot check it within the by groups)
    got = cons.join_asof(prod, left_on="ts", right_on="end", by=["tid", "e"], strategy="backward",
                         check_sortedness=False)
    # the outputs produced before each op, counted: siblings (Q, K, V) see only each other's in between
    seen = pick(prod, "tid", "end").with_columns(k=pl.int_range(pl.len()).over("tid"))
    got = got.sort("ts").join_asof(seen, left_on="ts", right_on="end", by="tid", strategy="backward",
                                   check_sortedness=False)
    # siblings: an op whose input dims are the previous autocast op's on the thread, with no output produced
    # between but that op's own, reads that op's input
    new = ((pl.col("dims") != pl.col("dims").shift(1).over("tid"))
           | (pl.col("k").fill_null(-1) - pl.col("k").shift(1).over("tid").fill_null(-1) > 1))
    got = got.sort("tid", "ts", maintain_order=True).with_columns(run=new.fill_null(True).cum_sum().over("tid"))
    got = got.with_columns(cast=pl.col("fp32").first().over("tid", "run").fill_null(False))
    per = got.filter("cast").group_by("i", maintain_order=True).agg(pl.col("e"))
    return {int(i): [int(x) for x in e] for i, e in per.iter_rows()}


def _fallback(ctx: RuleContext, as_bf16: bool) -> pl.DataFrame:
    """[op, bpe_row, rows] of the FP32 GEMMs (`_kernels`' ops) whose rows are not a multiple of 16 bytes at the
    fix's width (`alignment.misaligned_calls`; `as_bf16`: their FP32 inputs read as BF16, as autocast casts them,
    else as TF32 reads them, 4 bytes): the FP32 CUDA-core kernel does not care, the Tensor-Core kernels do (a
    vocabulary of 50257: 4 or 8 elements per 16 bytes). Both widths at once, once (the check reads both: the
    calls and their shapes are looked up once)."""
    both = ctx.once("fallback", lambda: misaligned_calls_as(
        ctx.trace.host, _kernels(ctx).join(pick(ctx.kb, "i", "op"), on="i", how="left")["op"],
        (None, "c10::BFloat16")))
    return both["c10::BFloat16" if as_bf16 else None]


def _autocast(ctx: RuleContext) -> Transform | None:
    k, a = _kernels(ctx), _fp32_attention(ctx)
    if k.height == 0 and a.height == 0:
        return None
    k = _on_fallback(ctx, k, "bf16_dur", as_bf16=True)
    gpu = dict(zip(k["i"].cast(pl.Int64).to_list(), k["bf16_dur"].to_list(), strict=True))
    gpu.update(zip(a["i"].cast(pl.Int64).to_list(), a["new_dur"].to_list(), strict=True))
    ops = pl.concat([k["op"].cast(pl.UInt32), a["op"].cast(pl.UInt32)])
    both = pl.concat([k.select(pl.col("i").cast(pl.Int64), pl.col("op").cast(pl.Int64)),
                      a.select(pl.col("i").cast(pl.Int64), pl.col("op").cast(pl.Int64))])
    cut, add = _casts(ctx, ops, both)
    return Transform(NAME, gpu_dur=gpu, gpu_add=add, host_cut=cut)
