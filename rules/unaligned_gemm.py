"""TV208 unaligned-gemm: Tensor-Core GEMMs whose rows are not a multiple of 16 bytes run on a slow fallback kernel.

## What it detects
On NVIDIA GPUs with Tensor Cores (compute capability 8.0 or newer, from the trace's `deviceProperties`): 16-bit,
8-bit and TF32 GEMM kernels (`aten::mm`, `addmm`, `bmm`, `baddbmm`, `linear`, …) in the analysed steps
whose operands' row strides are not a multiple of 16 bytes: 8 elements in bf16/fp16, 4 in FP32, 16 in FP8 —
the classic case is a vocabulary of 50257 (GPT-2) or 30522 (BERT) in the language-model head's three GEMMs. A
stride is read from the op's `Input Strides` (recorded with `record_shapes` by PyTorch ≥ 2.1); without them each
operand is taken as contiguous (its row stride is its last dimension). The output's rows are the second
operand's last dimension (`linear`: the weight's first). Reported when the replayed saving reaches
`min_savings_pct` of the step. FP32 GEMMs on the CUDA cores are fp32-gemm's (TF32 first), attention's score
GEMMs materialized-attention's.

## Why it is slow
The fast GEMM kernels load tiles of A, B and C with 16-byte vector loads (Hopper: the TMA unit, which requires
every stride to be a multiple of 16 bytes; Ampere: `cp.async` of 16 bytes). A row that starts at an odd element
breaks that, and cuBLAS falls back to a kernel that loads 2 or 4 bytes at a time (on an H200 an sm75-era
`cutlass_75_tensorop_bf16_s1688gemm` instead of an sm90 `nvjet` kernel). Measured on an H200
(`collectors/examples/gemm_alignment.py`, CUDA events): [4096, 768] × [768, 50257] in bf16 takes 2.5–3.3 ms
against 0.44 ms padded to 50304 (5.7–7.6×); 4096 × 8191 × 4096 5.4–8.2×; TF32 2.5–3.5×; a batch-8 decode
GEMV 2–3.4×. Only the strides count: M = 4095 with A row-major (its rows are K long) costs nothing, and a
dimension that is a multiple of 8 but not of 64 (1000) costs ≤ 6 %.

## How to fix
Pad the dimension to a multiple of 64 (16 bytes is the requirement, 64 keeps the tiles full): a vocabulary of
50257 → 50304, as nanoGPT does (the extra logits are never targets; mask them at sampling); in Hugging Face
`model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)`. A hidden, head or feature size: choose
a multiple of 64. A strided view of a larger tensor (a slice of a fused QKV projection): copy it into a
padded buffer or slice at a multiple of 8 elements. `torch.compile` pads such GEMMs itself (Inductor's
`shape_padding`, on by default), at the cost of a copy per call: where the trace is already compiled these
GEMMs run outside the compiled graph, or padding is turned off (`torch._inductor.config.shape_padding`).

## Evidence and the model
The unaligned GEMM kernels (count, time, ops), the dimensions whose rows are misaligned and their padded
values, the kernels' achieved TFLOP/s against the device's peak, and the predicted time aligned. The fix
(`fix_transform`) gives each such kernel its roofline time at what aligned cuBLAS GEMMs reach:
max(FLOPs / (`compute_share` × the Tensor-Core peak of its width), bytes / (`bandwidth_share` × HBM
bandwidth)), never longer than it took. Measured on the H200: aligned bf16/fp16 GEMMs of 19–316 GFLOP reach
0.67–0.79 of the 989 TFLOP/s peak, TF32 0.67–0.81 of 494.5, a memory-bound batch-8 GEMV 0.44 of the bandwidth;
the padded LM head's three GEMMs took 0.38–0.45 ms each (0.70–0.83). The twins (`sample_traces/ab_traced`,
one process each): the LM head alone 7.87 → 1.21 ms a step, HF GPT-2 (6 layers, batch 8 × 512, bf16) 23.59 →
16.95 ms with `vocab_size=50304`.

## Options
- `compute_share` (0.7): share of the Tensor-Core peak an aligned compute-bound GEMM reaches.
- `bandwidth_share` (0.45): share of the HBM bandwidth an aligned memory-bound GEMM reaches.
- `short_kernel_us` (5.0): a shorter kernel is launch latency, whatever its alignment.
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- NVIDIA, "Matrix Multiplication Background User's Guide" (Tensor Core requirements: dimensions and leading
  dimensions multiples of 8 for FP16, 16 bytes) and the cuBLAS docs on `cublasLt` alignment and TMA.
- Karpathy, nanoGPT `model.py`: "vocab_size 50304 (50257 padded up to nearest multiple of 64 for efficiency)".
- Hugging Face `PreTrainedModel.resize_token_embeddings(pad_to_multiple_of=...)`; PyTorch Inductor `pad_mm`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.alignment import misaligned_calls
from traceview.analyses.attention import score_op_ids
from traceview.analyses.names import contains
from traceview.analyses.replay import Transform
from traceview.analyses.windows import step_of
from traceview.evidence import Meta, OpTime
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

from .fp32_gemm import FP32_KERNEL_RE, TC_KERNEL_RE, tensor_core_gpu

CODE = "TV208"
NAME = "unaligned-gemm"
SEVERITY = "warning"
CLASS = "gpu_compute"  # the classifier class whose time a fix of these findings removes
TITLE = "GEMM rows not a multiple of 16 bytes: a slow fallback kernel"
OPTIONS = {
    "compute_share": Option(0.7, "share of the Tensor-Core peak an aligned compute-bound GEMM reaches (H200: 0.67-0.79)"),
    "bandwidth_share": Option(0.45, "share of HBM bandwidth an aligned memory-bound GEMM reaches (H200 GEMV: 0.44)"),
    "short_kernel_us": Option(5.0, "a shorter kernel is launch latency whatever its alignment"),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
FIX = ("These GEMMs' rows are not a multiple of 16 bytes (a dimension not a multiple of 8 in 16-bit, 4 in FP32): "
       "the Tensor Cores' 16-byte tile loads (Hopper's TMA) cannot be used and cuBLAS falls back to a kernel "
       "several times slower. Pad the dimension to a multiple of 64 — a vocabulary of 50257 to 50304 (Hugging "
       "Face: model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)), a hidden or feature size to "
       "a multiple of 64 — or let torch.compile pad them (Inductor's shape_padding).")
FIX_COMPILED = ("These GEMMs' rows are not a multiple of 16 bytes, so cuBLAS falls back to a kernel several times "
                "slower; the trace runs torch.compile, which pads such GEMMs itself (Inductor's shape_padding), so "
                "these run outside the compiled graph or with padding off. Pad the dimension to a multiple of 64 "
                "in the model (a vocabulary of 50257 to 50304; Hugging Face: resize_token_embeddings(..., "
                "pad_to_multiple_of=64)), or compile the code that runs them.")
#: the finding's own fix: what to pad here, then the mechanism and the APIs
FIX_HERE = "Pad {pads} (a multiple of 64). "


def _calls(ctx: RuleContext) -> pl.DataFrame:
    """[op, bpe_row, rows] of the GEMM ops with misaligned rows (per distinct shape, never per event)."""
    return ctx.once("unaligned_calls", lambda: misaligned_calls(
        ctx.trace.host, ctx.kb.filter(pl.col("category") == "gemm")["op"]))


def _peak(spec, bpe: int) -> float:
    """The Tensor-Core peak (TFLOP/s) of a GEMM whose elements are `bpe` bytes: 16-/8-bit, else TF32."""
    return spec.tc_tflops if bpe <= 2 else spec.tf32_tflops


def unaligned_kernels(ctx: RuleContext) -> pl.DataFrame:
    """The misaligned GEMM kernels of the analysed steps with their aligned time:
    [i, name, ts, dur, op, op_name, flops, bytes, bpe_row, rows, new_dur]."""
    def build() -> pl.DataFrame:
        calls = _calls(ctx)
        if calls.height == 0:
            return pl.DataFrame()
        spec, o = ctx.spec, ctx.options
        g = ctx.trace.gpu.select("i", "name", "kind", "ts", "dur", "op")
        k = g.filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi)
                     & pl.col("op").is_in(calls["op"].implode()))
        # FP32 on the CUDA cores is fp32-gemm's (TF32 first); the score GEMMs of a materialized attention are the
        # attention rule's (one fused kernel replaces them)
        k = k.filter(~(contains(k, FP32_KERNEL_RE, unless=TC_KERNEL_RE)))
        k = k.filter(~pl.col("op").is_in(score_op_ids(ctx.trace).implode()).fill_null(False))
        k = k.filter(pl.col("dur") >= o["short_kernel_us"] * 1000)
        k = (k.join(ctx.kb.select("i", "op_name", "flops", "bytes"), on="i", how="left")
             .join(calls, on="op", how="left").filter(pl.col("flops").is_not_null()))
        peak = pl.when(pl.col("bpe_row") <= 2).then(pl.lit(_peak(spec, 2))).otherwise(pl.lit(_peak(spec, 4)))
        t_c = pl.col("flops") / (peak * 1e12 * o["compute_share"]) * 1e9
        t_m = pl.col("bytes").fill_null(0) / (spec.bw * o["bandwidth_share"]) * 1e9
        new = pl.min_horizontal(pl.max_horizontal(t_c, t_m), pl.col("dur").cast(pl.Float64)).cast(pl.Int64)
        return k.with_columns(new_dur=new).select("i", "name", "ts", "dur", "op", "op_name", "flops", "bytes",
                                                   "bpe_row", "rows", "new_dur")
    return ctx.once("unaligned_kernels", build)


class Evidence(msgspec.Struct, kw_only=True):
    kernels: Annotated[int, Meta(description="misaligned GEMM kernels in the analysed steps")]
    kernel_time_us: Annotated[float, Meta(description="their device time (µs)")]
    predicted_aligned_time_us: Annotated[float, Meta(description="the same GEMMs aligned, predicted (µs)")]
    dims: Annotated[list[int], Meta(description="the misaligned row lengths (elements), longest-running first")]
    padded_dims: Annotated[list[int], Meta(description="each padded to a multiple of 64")]
    bytes_per_element: Annotated[int, Meta(description="element size of the longest-running ones (bytes)")]
    top_kernel: Annotated[str, Meta(description="the longest one's name (first 160 characters)")]
    ops: Annotated[list[OpTime], Meta(description="the 5 ops whose misaligned GEMMs take longest")]
    achieved_tflops: Annotated[float, Meta(description="their achieved TFLOP/s")]
    peak_tflops: Annotated[float, Meta(description="the device's Tensor-Core peak for their width (TFLOP/s)")]
    device: Annotated[str, Meta(description="the device the peak is of")]
    savings_per_step_us: Annotated[dict[str, float], Meta(description="kernel time the fix removes per step (µs), by step")]


def check(ctx: RuleContext) -> list[Finding]:
    if not tensor_core_gpu(ctx):
        return []
    k = unaligned_kernels(ctx)
    if k.height == 0:
        return []
    k = step_of(k, ctx.steps).filter(pl.col("step").is_not_null())
    per = k.group_by("step").agg((pl.col("dur") - pl.col("new_dur")).sum().alias("cut")).sort("step")
    savings = int(per["cut"].sum())
    if k.height == 0 or ctx.pct(savings) < ctx.options["min_savings_pct"]:
        return []
    spec, cost = ctx.spec, int(k["dur"].sum())
    dims = (k.explode("rows").group_by("rows").agg(pl.col("dur").sum())
            .sort(["dur", "rows"], descending=[True, False], maintain_order=True)["rows"].to_list())
    top = k.sort(["dur", "i"], descending=[True, False], maintain_order=True).row(0, named=True)
    ops = (k.group_by("op_name").agg(pl.len().alias("count"), pl.col("dur").sum())
           .sort(["dur", "op_name"], descending=[True, False], nulls_last=True, maintain_order=True).head(5))
    bpe = int(top["bpe_row"])
    evidence = Evidence(
        kernels=k.height, kernel_time_us=round(cost / 1000, 3),
        predicted_aligned_time_us=round(float(k["new_dur"].sum()) / 1000, 3),
        dims=[int(d) for d in dims], padded_dims=[-(-int(d) // 64) * 64 for d in dims], bytes_per_element=bpe,
        top_kernel=str(top["name"])[:160],
        ops=[OpTime(op=r["op_name"], count=r["count"], time_us=round(r["dur"] / 1000, 3)) for r in ops.to_dicts()],
        achieved_tflops=round(float(k["flops"].sum()) / (cost / 1e9) / 1e12, 1) if cost else 0.0,
        peak_tflops=_peak(spec, bpe), device=spec.name,
        savings_per_step_us={str(s): round(c / 1000, 3) for s, c in per.rows()},
    )
    compiled = ctx.features.compiled or bool(ctx.features.triton_kernels)
    pads = list(zip(evidence.dims, evidence.padded_dims, strict=True))
    return [ctx.finding(cost_ns=cost, savings_ns=savings, count=k.height,
                        steps=per.filter(pl.col("cut") > 0)["step"].to_list(), evidence=evidence,
                        title=f"{k.height} GEMM kernels with rows of {', '.join(str(d) for d in dims[:3])} elements "
                              f"(not a multiple of {16 // bpe}) run a slow fallback kernel",
                        fix=FIX_HERE.format(pads=", ".join(f"{d} to {p}" for d, p in pads[:3]))
                        + (FIX_COMPILED if compiled else FIX), kernel_ids=k["i"])]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each misaligned GEMM kernel takes its aligned roofline time
    (`unaligned_kernels`' new_dur: its FLOPs at `compute_share` of the peak, its bytes at `bandwidth_share` of
    the bandwidth, whichever is longer, never longer than it took)."""
    k = unaligned_kernels(ctx)
    if k.height == 0:
        return None
    return Transform(NAME, gpu_dur=dict(zip(k["i"].cast(pl.Int64).to_list(), k["new_dur"].to_list(), strict=True)))
