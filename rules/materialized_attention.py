"""TV205 materialized-attention: attention that writes its N_q x N_kv scores to HBM instead of one fused kernel.

## What it detects
Attention computed as separate kernels over a materialized score tensor: eager `softmax(Q·K^T)` (Hugging
Face `attn_implementation="eager"`, a hand-written attention) or SDPA running its math backend
(`aten::_scaled_dot_product_attention_math`). The score tensor is found from the launching ops' shapes
(`record_shapes`): the input of a softmax over a rank >= 3 tensor whose last dim is at least 64, produced or
read by a batched matmul; every op whose input has exactly that shape (scale, mask, softmax, dtype cast,
dropout, P·V, and their backward) is part of the attention (traceview/analyses/attention.py).

## Why it is slow
Each of those ops reads and writes the whole B·H·N_q·N_kv score tensor in HBM (in FP32 for the softmax), so the
attention's time grows with N² bytes moved by memory-bound kernels, and each op costs a launch and its host
dispatch. A fused kernel (FlashAttention, memory-efficient, cuDNN) keeps each score tile in on-chip memory:
the scores never reach HBM, and the time is the two matmuls' FLOPs at Tensor-Core rate (4·B·H·N_q·N_kv·d
forward, 2.5x that backward, where the scores are recomputed).

## How to fix
Use `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)` (Hugging Face:
`attn_implementation="sdpa"` or `"flash_attention_2"`); FlexAttention (`torch.nn.attention.flex_attention`)
for a custom mask or score modification. When SDPA already runs but falls back to its math backend, the
fused backends refused the inputs (FP32 inputs: flash needs fp16/bf16; an explicit float mask with
requires_grad; a head dim they do not support): `with torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION,
SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):` turns the fallback into an error that says why.
Grouped-query attention (fewer key/value heads than query heads, `enable_gqa=True`: Llama, Mistral, Qwen) runs
fused on flash, which needs 16-bit inputs; in FP32 torch 2.11 ran it on the math backend (HF Llama: 16 query heads
on 4): run under `torch.autocast`, or expand K and V to the query heads (`repeat_interleave`) for the
memory-efficient backend — the fix names the heads it read from the math calls' shapes (`math_sdpa_gqa`). An eager
attention that repeats K and V to the query heads first (Hugging Face's `repeat_kv`, `repeated_kv_heads`) is told
that SDPA takes the grouped heads without those copies (`enable_gqa=True`).

## Evidence
The score shape, bytes per materialized score tensor, score kernels per step and their time, what the ops are,
the attention calls (one per attention forward and one backward: the runs of consecutive score kernels between
two GEMMs of other work on one thread, `attention_calls` — Llama's eager forward is three runs, its K and V
repeated to the query heads, Q·K^T to softmax, and the probabilities' cast to P·V, split by autocast's casts of
Q, K and V, which SDPA runs as one call), their GEMM FLOPs, and the predicted fused time. Savings are replayed
(`fix_transform`): each attention call becomes one kernel of its GEMM FLOPs (x1.25 for a backward call: flash
recomputes Q·K^T) at `efficiency` of the
device's Tensor-Core peak for the width of the attention's inputs (FP32 inputs: `fp32_efficiency` of the FP32
peak; SDPA's math backend upcasts bf16/fp16 inputs to FP32 for its own GEMMs, and a fused backend runs on the
inputs' width), never below `FUSED_FLOOR_NS`, on the call's first score GEMM (filling its next longest kernels
where it outlasts that one: a transform never lengthens a kernel); the other kernels take no time (nor the
device's gap before each). The attention is
more than the ops on the scores (traceview/analyses/attention.py, `attention_extension`): the copies
`aten::matmul` makes of a transposed Q, K or V for the batched GEMM (a fused kernel reads them strided), the
forward's copies of the attention's own tensors around it (`relayout_copies`: the output put back in [B, N, H, d]
for the heads' merge, `.transpose(1, 2).contiguous()`, which a fused kernel's output layout makes a view; K and V
repeated to the query heads, `repeat_kv`, which `enable_gqa=True` does without — the fixed programs' own traces of
HF BERT, GPT-2 and Llama on an H100 run none of them), and in the backward every autograd node of the attention's forward ops (found by their sequence numbers: the copy
that makes the incoming gradient contiguous, the views' and expands' nodes) go too. On the host the fused call
replaces the whole eager attention: the op of the call's first score GEMM stays, as the call (its dispatch,
with its operand copies, costs about what SDPA's own call does), and its thread's time from each of the call's
runs' first op to the end of its last op leaves the host path (the views, reshapes, the mask's scalars and autograd's
view-backward nodes launch nothing but are the attention's), unless the launch of another kernel falls inside,
in which case only the run's own ops leave. The mask goes too (`attention_mask`): the outermost op that builds
the float mask the scores are masked with (a [B, 1, N_q, N_kv] input of a score op, taken by no score op
itself) and, between the last kernel launch before it and it, any op that blocks on the device (Hugging
Face's eager mask is `torch.where(causal, torch.tensor(0.0, device=...), min)`: the scalar's pageable copy
synchronises the stream once per forward, so the host cannot run ahead of the device across steps; its sdpa
path with `is_causal` builds no mask). Those calls no longer wait (`no_wait`), their ops leave the host path.

## Options
- `efficiency` (0.15): achieved share of the Tensor-Core peak of a fused attention call on 16-bit inputs, forward
  and backward together, on the FLOPs it computes (a causal call skips the blocks above the diagonal,
  `causal_share`): the median of 14 distinct training programs on an H200 (0.10 for BERT at 128 tokens, 0.14 for
  GPT-2 at 512, 0.20 for BERT at 512, 0.31 for 16 heads x 1024 without dropout; traceview/analyses/attention.py,
  `FUSED_EFFICIENCY`). FlashAttention-2 reports 50-73 % of A100 peak forward on long sequences without dropout.
- `fp32_efficiency` (0.34): the same for FP32 inputs, of the FP32 peak: the memory-efficient kernel SDPA runs
  them on (CUDA cores) gets nearer its peak, 0.20-0.55 over 12 FP32 shapes (ViT-B/16 0.30, BERT 0.32-0.41, GPT-2
  0.35-0.44; `FUSED_EFFICIENCY_FP32`).
  A call never takes less than 4.5 µs forward or 13 µs backward (`FUSED_FLOOR_NS`: a decode step's, BERT's
  smallest). Where a score op takes a mask over queries x keys (Hugging Face's [B, 1, N, N] causal mask, a [N, N]
  `masked_fill` mask) or SDPA's math backend runs `is_causal`, the fused call computes only the blocks on and below
  the diagonal, (nb + 1) / 2nb of them in tiles of 128 queries (`eager_causal`): an FP32 GPT-2's eager attention at
  1024 tokens was priced 4.8 ms against 7.0 measured without it, 6.6 with it.
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- Dao et al., FlashAttention (2022) and FlashAttention-2 (2023): IO-aware exact attention, achieved throughput.
- PyTorch docs, `torch.nn.functional.scaled_dot_product_attention`, `torch.nn.attention.sdpa_kernel`,
  `torch.nn.attention.flex_attention`.
- Measured on an H200 (unprofiled steps; replayed saving in brackets): HF GPT-2 (6 layers, seq 512, bf16) eager
  35.6 ms, SDPA 23.6 ms (4.48 ms predicted: the eager run's host is slower outside attention too; 6.82 against
  8.11 measured in the trace's own process, sample_traces/ab_traced); seq 1024 32.7 -> 24.0 ms (9.09; 8.88
  against 8.58 in one process); synthetic 16 heads x 2048 eager 40.2 and math backend (bf16 inputs, FP32
  GEMMs) 49.1 -> flash 6.9 ms (33.7 and 42.7 ms predicted): sample_traces/collected3, collected4,
  docs/predictions.md. Without the mask's construction the seq-1024 prediction reads 6.2 ms and the seq-512 one
  in its own process 3.8: its stream sync holds the host to the device once per step, so the host time the
  backward's device-bound stretch leaves idle cannot be spent on the next forward.
  cuDNN's and flash's fused kernels in the twins reach 22 % (512 tokens), 29 % (1024) and 35 % (2048) of the
  Tensor-Core peak on these FLOPs (the fixed twins' own traces): the `efficiency` default is their median.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.attention import (
    FUSED_EFFICIENCY,
    FUSED_EFFICIENCY_FP32,
    attention_mask,
    eager_causal,
    exclusive_tops,
    fused_attention,
    fused_attention_ns,
    math_sdpa_gqa,
    math_sdpa_input_bytes,
    repeated_kv_heads,
    score_kernels,
    score_op_ids,
    score_ops,
)
from traceview.analyses.replay import Transform, spans
from traceview.analyses.rowid import by_id
from traceview.analyses.tree import ancestor_ids
from traceview.evidence import Meta, OpTimePerStep
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

CODE = "TV205"
NAME = "materialized-attention"
CLASS = "gpu_memory"  # the score kernels are memory-bound: their time is what a fused kernel removes
SEVERITY = "warning"
TITLE = "Attention materializes its scores in HBM instead of one fused kernel"
OPTIONS = {
    "efficiency": Option(
        FUSED_EFFICIENCY,
        "achieved share of the Tensor-Core peak of a fused attention call on 16-bit inputs (H200 programs' median)",
    ),
    "fp32_efficiency": Option(
        FUSED_EFFICIENCY_FP32,
        "achieved share of the FP32 peak of the memory-efficient kernel on FP32 inputs (H200 programs' median)",
    ),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
FIX = (
    'Use torch.nn.functional.scaled_dot_product_attention (Hugging Face: attn_implementation="sdpa" or '
    '"flash_attention_2"), or FlexAttention for a custom mask: the fused kernel keeps the scores on chip.'
)
#: flash backward recomputes Q·K^T: 5 matmuls against eager backward's 4
BACKWARD_RECOMPUTE = 1.25


def _kernels(ctx: RuleContext) -> pl.DataFrame:
    def build() -> pl.DataFrame:
        # without a score op no kernel is a score kernel: the table of no kernels (its columns), not the frame of
        # every kernel in the steps filtered to none (at 10 M tiny events hundreds of MB)
        hi = ctx.hi if score_op_ids(ctx.trace).len() else ctx.lo
        return attention_calls(score_kernels(ctx.trace, ctx.lo, hi), ctx.kb, ctx.trace.gpu)

    return ctx.once("score_kernels", build)


def attention_calls(g: pl.DataFrame, kb: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """The score kernels of `g` (score_kernels' every kernel, in stream order) with `call`: the attention call each
    belongs to, the one fused call that replaces it. A call is one or more runs of score kernels on a stream: a
    run ends at any other kernel, but one eager attention can hold a few (Llama's K and V repeated to the query
    heads, then Q·K^T to softmax, then the probabilities cast to bf16 for P·V, with autocast's casts of Q, K and V
    between them), and SDPA replaces them all with one call. Calls are told apart by the GEMMs of other work
    between them (every attention call sits between projections: Q/K/V before, the output projection and the
    MLP after, in the backward too) and by the thread that launched them (the forward's last attention and the
    backward's first). `kb`: classify.kernel_bound's [i, category]; `launches`: the trace's gpu [i, launch_tid]."""
    other_gemm = (~pl.col("score")) & (pl.col("category") == "gemm").fill_null(False)
    lane = ("device", "stream")
    g = g.join(kb.select("i", "category"), on="i", how="left").with_columns(
        _gemms=other_gemm.cast(pl.Int64).cum_sum().over(*lane)
    )
    k = g.filter(pl.col("score")).join(launches.select("i", "launch_tid"), on="i", how="left")
    # a call only ever starts with a run (a run is never split); the thread that launched the run tells the
    # forward (the Python thread) from the backward (autograd's device thread)
    k = k.with_columns(_tid=pl.col("launch_tid").first().over("run"))
    brk = pl.col("run").ne_missing(pl.col("run").shift()) & (
        pl.col("_gemms").ne_missing(pl.col("_gemms").shift().over(*lane))
        | pl.col("_tid").ne_missing(pl.col("_tid").shift().over(*lane))
        | pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift()) for c in lane)
    )
    return k.with_columns(call=brk.cast(pl.Int64).cum_sum()).drop("_gemms", "_tid", "launch_tid", "category")


def _runs(ctx: RuleContext) -> pl.DataFrame:
    """One row per attention call (`attention_calls`: a run of consecutive score kernels, or a few of one call):
    [call, first, kernels, time, gemm_flops, gemm_bpe, bpe, backward, fused_time]: `gemm_bpe` the width its GEMMs ran at, `bpe` the width a fused kernel runs at."""

    def build() -> pl.DataFrame:
        k = _kernels(ctx).join(ctx.kb.select("i", "flops", "bpe"), on="i", how="left")
        per = k.group_by("call", maintain_order=True).agg(
            pl.col("i").first().alias("first"),
            pl.len().alias("kernels"),
            pl.col("dur").sum().alias("time"),
            pl.col("flops").filter(pl.col("gemm")).sum().alias("gemm_flops"),
            pl.col("bpe").filter(pl.col("gemm")).min().alias("gemm_bpe"),
            pl.col("backward").any(),
        )
        # SDPA's math backend upcasts bf16/fp16 inputs to FP32 for its GEMMs: a fused backend runs on the inputs'
        # width, not on the upcast one
        inputs = math_sdpa_input_bytes(ctx.trace)
        bpe = pl.col("gemm_bpe")
        per = per.with_columns(
            bpe=bpe if inputs is None else pl.min_horizontal(bpe.fill_null(inputs), pl.lit(inputs))
        )
        spec = ctx.spec
        peak = pl.when(pl.col("bpe") <= 2).then(pl.lit(spec.tc_tflops)).otherwise(pl.lit(spec.fp32_tflops)) * 1e12
        # a causal mask: the fused call skips the blocks above the diagonal (`eager_causal`)
        flops = (pl.col("gemm_flops") * pl.when(pl.col("backward")).then(BACKWARD_RECOMPUTE).otherwise(1.0)
                 * eager_causal(ctx.trace))
        eff = pl.when(pl.col("bpe") <= 2).then(pl.lit(float(ctx.options["efficiency"]))).otherwise(
            pl.lit(float(ctx.options["fp32_efficiency"])))
        fused = fused_attention_ns(flops, pl.col("backward"), peak, eff)
        return per.with_columns(
            fused_time=pl.when(pl.col("gemm_flops") > 0).then(fused).otherwise(0).cast(pl.Int64)
            .clip(0, pl.col("time"))
        )

    return ctx.once("score_runs", build)


def fix_for(ctx: RuleContext, shape: str, mib: float, fp32: bool, cost: str, heads: int = 0, n_kv: int = 0) -> str:
    """The fix, conditioned on what the trace already runs (SDPA's math backend, fused kernels elsewhere, key/value
    heads repeated to the query heads)."""
    have = fused_attention(ctx.trace)
    scores = (
        f"each attention call writes a {shape} score tensor ({mib:.0f} MiB) to HBM and reads it back in every "
        f"op ({cost})"
    )
    lowp = (
        ' Its inputs are FP32: flash attention needs fp16/bf16 (run under torch.autocast("cuda", '
        "dtype=torch.bfloat16)); the memory-efficient backend takes FP32."
        if fp32
        else ""
    )
    # bf16/fp16 inputs that the math backend upcast to FP32 for its GEMMs: not the dtype that kept flash away
    lowp_math = (
        " Its inputs are already 16-bit (the FP32 GEMMs are the math backend's own upcast), so the dtype is not "
        "why: check for a mask, the head dim, or a context that pins the math backend (sdpa_kernel(SDPBackend.MATH))."
    )
    gqa = math_sdpa_gqa(ctx.trace) if have["math_sdpa"] else None
    if gqa and fp32:  # grouped queries run fused only on flash, which needs 16-bit inputs
        lowp = (
            f" Its queries are grouped ({gqa[0]} query heads share {gqa[1]} key/value heads, enable_gqa=True) and "
            "its inputs are FP32: flash runs grouped queries fused but needs fp16/bf16 (run under "
            'torch.autocast("cuda", dtype=torch.bfloat16)), and this PyTorch\'s FP32 backends refused the grouped '
            f"call; to stay in FP32, expand K and V to the query heads (k.repeat_interleave({gqa[0] // gqa[1]}, "
            "dim=1), the same for v) so the memory-efficient backend takes them."
        )
    if have["math_sdpa"]:
        return (
            f"scaled_dot_product_attention runs its math backend: {scores}. The fused backends refused these "
            "inputs; wrap the call in `with torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION, "
            "SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):` to get the reason as an error (a "
            "float attn_mask, FP32 inputs, an unsupported head dim) and fix it; pass is_causal=True rather than "
            "a causal mask." + (lowp or lowp_math)
        )
    where = (
        " Other attention calls in this trace already run fused kernels: these do not (a layer left on "
        "the eager path)."
        if have["kernels"]
        else ""
    )
    kv = repeated_kv_heads(ctx.trace, heads, n_kv) if heads and n_kv else None
    grouped = (
        f" Its keys and values are repeated from {kv} heads to {heads} before the scores (grouped-query attention "
        "the eager way, Hugging Face's repeat_kv: a copy of each per layer); SDPA takes them grouped, without the "
        "copies (enable_gqa=True; Hugging Face's sdpa path passes it where it can)."
        if kv
        else ""
    )
    return (
        f"Attention computed op by op: {scores}, and every op is a launch.{where}{grouped} Call "
        "torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True for a causal mask, "
        "attn_mask= otherwise) (Hugging Face: "
        'attn_implementation="sdpa" or "flash_attention_2"), which picks the flash / memory-efficient / '
        "cuDNN backend (pin it with torch.nn.attention.sdpa_kernel); use FlexAttention "
        "(torch.nn.attention.flex_attention) for a custom mask or score modification." + lowp
    )


class ScoreShape(msgspec.Struct, kw_only=True):
    """The shape of the largest score matrix (per batch element)."""

    heads: Annotated[int, Meta(description="attention heads")]
    n_q: Annotated[int, Meta(description="query length")]
    n_kv: Annotated[int, Meta(description="key/value length")]


class Evidence(msgspec.Struct, kw_only=True):
    score_shape: Annotated[ScoreShape, Meta(description="the largest score matrix")]
    score_tensor_mib: Annotated[float, Meta(description="its size (MiB)")]
    score_kernels_per_step: Annotated[
        float, Meta(description="kernels per step that read or write score matrices")
    ]
    score_time_per_step_us: Annotated[float, Meta(description="their device time per step (µs)")]
    attention_runs_per_step: Annotated[float, Meta(description="unfused attention computations per step")]
    backward_runs_per_step: Annotated[float, Meta(description="of which in the backward pass")]
    gemm_gflops_per_step: Annotated[float, Meta(description="GFLOP per step of their QK^T and PV GEMMs")]
    predicted_fused_time_per_step_us: Annotated[
        float, Meta(description="the same attention fused (SDPA), predicted (µs)")
    ]
    fp32_scores_gemms: Annotated[bool, Meta(description="the score GEMMs run in FP32")]
    ops: Annotated[list[OpTimePerStep], Meta(description="the 8 ops with the most score-matrix time")]
    sdpa_math_backend: Annotated[bool, Meta(description="SDPA ran its unfused math backend")]
    fused_attention_kernels_in_trace: Annotated[
        int, Meta(description="fused attention kernels already in the trace")
    ]
    device: Annotated[str, Meta(description="the device the prediction is for")]


def check(ctx: RuleContext) -> list[Finding]:
    if score_op_ids(ctx.trace).len() == 0:  # no score op, so no score kernel: `_kernels` would build none
        return []
    k = _kernels(ctx)
    if k.height == 0:
        return []
    runs = _runs(ctx)
    cost, fused = int(runs["time"].sum()), int(runs["fused_time"].sum())
    savings = cost - fused
    if ctx.pct(savings) < ctx.options["min_savings_pct"]:
        return []
    n = max(ctx.steps.height, 1)
    top = k.sort("score_bytes", descending=True, nulls_last=True).row(0, named=True)
    shape = f"[{top['heads']} heads x {top['n_q']} x {top['n_kv']}]"
    mib = (top["score_bytes"] or 0) / 2**20
    gemms = runs.filter(pl.col("gemm_flops") > 0)
    fp32 = bool((gemms["bpe"].fill_null(4) >= 4).any())  # the inputs are FP32 (a fused kernel would be too)
    ops = (
        k.group_by("op_name")
        .agg(pl.len().alias("count"), pl.col("dur").sum())
        .sort(["dur", "op_name"], descending=[True, False], nulls_last=True, maintain_order=True)
    )
    evidence = Evidence(
        score_shape=ScoreShape(heads=top["heads"], n_q=top["n_q"], n_kv=top["n_kv"]),
        score_tensor_mib=round(mib, 2),
        score_kernels_per_step=round(k.height / n, 2),
        score_time_per_step_us=round(cost / n / 1000, 3),
        attention_runs_per_step=round(runs.height / n, 2),
        backward_runs_per_step=round(int(runs["backward"].sum()) / n, 2),
        gemm_gflops_per_step=round(float(runs["gemm_flops"].fill_null(0).sum()) / n / 1e9, 3),
        predicted_fused_time_per_step_us=round(fused / n / 1000, 3),
        fp32_scores_gemms=bool((gemms["gemm_bpe"].fill_null(4) >= 4).any()),
        ops=[
            OpTimePerStep(op=r["op_name"], count=r["count"], time_per_step_us=round(r["dur"] / n / 1000, 3))
            for r in ops.head(8).to_dicts()
        ],
        sdpa_math_backend=fused_attention(ctx.trace)["math_sdpa"],
        fused_attention_kernels_in_trace=fused_attention(ctx.trace)["kernels"],
        device=ctx.spec.name,
    )
    cost_text = (
        f"{k.height / n:.0f} kernels, {cost / n / 1e6:.2f} ms per step; one fused kernel per call: about "
        f"{fused / n / 1e6:.2f} ms"
    )
    steps = sorted(int(s) for s in ctx.steps["step"].to_list())
    return [
        ctx.finding(
            cost_ns=cost,
            savings_ns=savings,
            count=runs.height,
            steps=steps,
            evidence=evidence,
            fix=fix_for(ctx, shape, mib, fp32, cost_text, top["heads"], top["n_kv"]),
            kernel_ids=k["i"],
        )
    ]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each attention call (`attention_calls`) becomes one fused kernel (its
    GEMM FLOPs at `efficiency` of the Tensor-Core peak) on the call's first score GEMM (and, where it outlasts that
    kernel, on the call's next longest ones in turn); its other kernels take no time. On the host the fused call
    replaces the whole eager attention (`host_extents`): the op of the call's first score GEMM stays, as the fused
    call, and everything else its thread does from each of its runs' first op to the end of its last op leaves
    the host path. The mask's construction goes too (`attention.attention_mask`): its kernels
    take no time, its ops leave the host path and its blocking calls no longer wait."""
    k = _kernels(ctx)
    if k.height == 0:
        return None
    runs = _runs(ctx).select("call", "fused_time")
    # the fused kernel sits on the call's first score GEMM (the op that stays, `host_extents`), else its first;
    # a transform never lengthens a kernel, so a fused time longer than that kernel fills the call's next longest
    # ones in turn (an FP32 run's fused call can outlast its first GEMM: GPT-2 at 1024 tokens, 400 against 212 µs)
    first = k.sort("call", pl.col("gemm").not_(), "run", "pos", maintain_order=True).group_by("call", maintain_order=True).first()["i"]
    fill = (k.join(runs, on="call", how="left")
            .sort("call", pl.col("i").is_in(first.implode()).not_(), pl.col("dur"), "run", "pos",
                  descending=[False, False, True, False, False], maintain_order=True)
            .with_columns(before=pl.col("dur").cum_sum().over("call") - pl.col("dur"))
            .select("i", new=(pl.col("fused_time") - pl.col("before")).clip(0, pl.col("dur")).cast(pl.Int64)))
    k = k.join(fill, on="i", how="left")
    gpu = dict(zip(k["i"].cast(pl.Int64).to_list(), k["new"].to_list(), strict=True))
    mask = attention_mask(ctx.trace)
    h = ctx.trace.host
    if mask["ops"].len():  # the mask's construction goes with the eager attention (`attention_mask`)
        g = ctx.trace.gpu.filter(pl.col("op").is_not_null()).select("i", "op")
        under = ancestor_ids(h, g["op"], h["i"].is_in(mask["ops"].implode()).to_numpy(), include_self=True) >= 0
        gpu.update(dict.fromkeys(g.filter(pl.Series(under))["i"].cast(pl.Int64).to_list(), 0))
    return Transform(
        NAME,
        gpu_dur=gpu,
        host_spans=host_extents(ctx, k) + spans(by_id(h, mask["ops"], "tid", "ts", "end")),
        no_wait=mask["calls"].cast(pl.Int64).to_list(),
    )


def host_extents(ctx: RuleContext, k: pl.DataFrame) -> list[tuple[int, int, int]]:
    """The host time one fused attention call replaces, as `Transform.host_spans`: per run of the attention call
    (`attention_calls`), on the thread of the op that launched the call's first score GEMM (the call, which stays
    once per attention call: SDPA is one op), from the start of the run's first op to the end of its last op,
    less the call. Eager attention is more
    than the ops that launch its kernels: the views and reshapes between them (`aten::expand`,
    `aten::_unsafe_view`, the transposes), the mask's scalar `full`, the dtype bookkeeping of autocast, the
    Python between the calls, and in the backward every autograd node of those ops (`UnsafeViewBackward0`,
    `ExpandBackward0`, …) launch nothing, yet all of it is the attention's and SDPA runs none of it. Each op is
    taken as its outermost op that launched only attention kernels (`exclusive_tops`: `aten::matmul` around its
    operand copy and `aten::bmm`, the autograd node around a backward op). A run whose extent holds the launch
    of any other kernel (other work interleaved with the attention) keeps that work: only its own ops but the
    call leave."""
    inside = score_ops(ctx.trace).filter(pl.col("score"))["op"]
    k = k.with_columns(top=exclusive_tops(ctx.trace, k["op"], inside))
    tops = by_id(ctx.trace.host, k["top"].clip(0).cast(pl.UInt32), "tid", "ts", "end")
    k = k.with_columns(
        tops.select(pl.col("tid").alias("_tid"), pl.col("ts").alias("_ts"), pl.col("end").alias("_end"))
    )
    k = k.filter(pl.col("top") >= 0)
    # the call: the top op of the attention call's first score GEMM (the first kernel's where it has none); the
    # call's other runs keep no op of their own (Llama's repeat_kv copies, its P·V matmul)
    call = (
        k.sort("call", pl.col("gemm").not_(), "run", "pos", maintain_order=True)
        .group_by("call", maintain_order=True)
        .first()
        .select("call", pl.col("top").alias("call_op"), pl.col("_tid").alias("tid"), pl.col("_ts").alias("cts"),
                pl.col("_end").alias("cend"))
    )
    ext = (
        k.join(call, on="call")
        .filter(pl.col("_tid") == pl.col("tid"))
        .group_by("run", maintain_order=True)
        .agg(
            pl.col("tid").first(), pl.col("cts").first(), pl.col("cend").first(), pl.col("call_op").first(),
            pl.col("_ts").min().alias("lo"), pl.col("_end").max().alias("hi"),
        )
    )
    # the launches on that thread inside each extent: only of score ops (their kernels, cuBLAS's memsets), else
    # other work is interleaved with the attention
    g = ctx.trace.gpu
    other = g.filter(~pl.col("op").is_in(inside.implode()).fill_null(True))
    ext = ext.with_columns(
        held=_count_in(other.select(pl.col("launch_tid").alias("tid"), pl.col("launch_ts").alias("t")), ext)
    )
    clean = ext.filter(pl.col("held") == 0)
    spans_out = [
        (int(t), int(a), int(b))
        for t, lo, hi, cts, cend in clean.select("tid", "lo", "hi", "cts", "cend").iter_rows()
        for a, b in ((lo, min(hi, cts)), (max(lo, cend), hi))  # a run without the call: all of it
        if b > a
    ]
    # a shared extent: the run's own ops, but the call
    rest = k.join(ext.filter(pl.col("held") > 0).select("run", "call_op"), on="run")
    gone = rest.filter(pl.col("top") != pl.col("call_op"))["top"].unique()
    return spans_out + spans(by_id(ctx.trace.host, gone.cast(pl.UInt32), "tid", "ts", "end"))


def _count_in(points: pl.DataFrame, windows: pl.DataFrame) -> pl.Series:
    """For each window [lo, hi] of `windows` (tid, lo, hi), how many of `points` (tid, t) fall in it (lo, hi]."""
    import numpy as np

    p = points.select(pl.col("tid").cast(pl.Int64), pl.col("t").cast(pl.Int64)).drop_nulls().sort("tid", "t", maintain_order=True)
    key = p["tid"].to_numpy() * (1 << 42) + p["t"].to_numpy()
    w_tid = windows["tid"].cast(pl.Int64).to_numpy() * (1 << 42)
    lo = np.searchsorted(key, w_tid + windows["lo"].cast(pl.Int64).to_numpy(), side="right")
    hi = np.searchsorted(key, w_tid + windows["hi"].cast(pl.Int64).to_numpy(), side="right")
    return pl.Series(hi - lo, dtype=pl.Int64)
