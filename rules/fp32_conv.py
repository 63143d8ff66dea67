"""TV206 fp32-conv: convolutions (and the activations around them) computed in FP32 on a Tensor-Core GPU.

## What it detects
Convolution kernels (launched by `aten::cudnn_convolution`, `aten::convolution_backward` and the other
convolution ops, or named as cuDNN/CUTLASS convolution kernels) whose operands are FP32 (the ops' `Input type`,
or kernel names `f32f32`, `tf32`, `<float` without a 16-bit type), on a GPU with Tensor Cores (compute capability
>= 8.0), together with cuDNN's NCHW <-> NHWC layout transforms (`nchwToNhwcKernel`, `nhwcToNchwKernel`) that an
NCHW (contiguous) model pays around each convolution. Reported when the replayed saving reaches `min_savings_pct`.

## Why it is slow
Without autocast a convolution runs on TF32 Tensor Cores at best (cuDNN's default `allow_tf32`, kernels named
`tf32`), at half the BF16 rate, or on the CUDA cores (`ffma` kernels) when TF32 is off; it reads and writes FP32
activations, twice the bytes of BF16, and so does every memory-bound kernel on them (batch norm, ReLU, residual
adds, pooling). cuDNN's Tensor-Core kernels work in NHWC: an NCHW tensor is transposed before and after each
convolution, kernels that `channels_last` removes. Where batch norm runs PyTorch's own kernels (a BF16 model:
PyTorch does not call cuDNN's batch norm on BF16 inputs) on NCHW tensors, its statistics and backward kernels give each channel one
thread block, so a layer of few channels on a large image leaves most of the GPU idle (ResNet-50 BF16 at batch 64
on an H100: 15.0 ms a step of batch norm, half its step); their channels_last kernels split each channel over the
GPU.

## How to fix
Run forward and loss under `torch.autocast("cuda", dtype=torch.bfloat16)` (convolutions and their activations in
BF16, the weights kept FP32 by the optimizer), and store the model and inputs in `channels_last`
(`model.to(memory_format=torch.channels_last)`, `x.to(memory_format=torch.channels_last)`) so cuDNN runs its
NHWC kernels without transposes. When the convolutions are already 16-bit and only the transposes remain,
`channels_last` alone is the fix. On a step the host sets the pace of, the casts and the channels_last batch norms'
host work can make it slower: where the fix's replay lengthens the step by 1 % or more (`fix_slower_us`), the fix
says so and by how much (EfficientNet-B0 at batch 64: 4.0 ms replayed, 1.9 measured slower).

## Evidence
Convolution kernels per step and their time, the FP32 and TF32 shares, the layout-transform time, the
activation kernels on FP32 4-D/5-D tensors, and the predicted time after the fix. Savings are replayed
(`fix_transform`): a TF32 convolution kernel takes TF32 / BF16 peak of its time (0.5), an FP32 CUDA-core one FP32
/ BF16 peak (never below its BF16 bytes over the bandwidth), a layout transform no time
(with `channels_last`), a memory-bound kernel on an FP32 activation half its time (BF16 halves its bytes), and
PyTorch's NCHW batch-norm kernels (`NCHW_BN_RE`) the time of their layer's activation bytes at the rate the same op's
NCHW kernels reach on their fastest layer shape in the trace (the layers whose channels fill the GPU), the rate their
channels_last kernels run every layer at (`_channels_last_bn`; BF16 bytes for an FP32 input). ResNet-50 BF16 NCHW at
batch 64 on an H100 (sample_traces/user_programs4_h100/resnet_bf16_nchw): 15.0 ms a step of batch norm priced 8.3.
A 16-bit convolution cuDNN runs on NCHW tensors without transposing them (a stride-1 1x1 convolution: a GEMM per
image over its H·W columns, short and oddly aligned rows), in a trace whose forward convolutions' recorded strides
are NCHW, takes its FLOPs at the median rate the trace's transposed convolutions of the same op reach in cuDNN's
NHWC kernels, never below its bytes at the memory bandwidth (`_nhwc_convs`: one GEMM over N·H·W rows in
channels_last): ResNet-50's 43 a step, 2.38 ms priced 1.52 (at batch 32 on an H200 its channels_last convolutions
all take 2.76 ms a step, sample_traces/collected4/resnet50_bf16_cl). Predicted for channels_last: 11.4 ms, 12.4
measured (3.85 when only the transposes were priced); not modelled: max pooling's NCHW kernels (0.1 ms).
What the fix changes on the host (measured in the BF16 + channels_last twins' traces of ResNet-18 and
EfficientNet-B0, against their FP32 problems): channels_last removes the transposes and their launch calls with them
(each transpose's `cudaLaunchKernel` leaves the host path); autocast casts every FP32 convolution's weight, whatever
its kernel (a 1x1 convolution runs as a cuDNN GEMM), three casts per convolution (`CASTS_PER_CONV`: its weight to
BF16, `ToCopyBackward0` of its gradient, and one `aten::to` inside `convolution_backward`; a bias adds two more, not
counted here), each at the trace's median host time of an op that launches one elementwise kernel, and its wrapper
dispatches the convolution again on the cast inputs into cuDNN's BF16 NHWC engine: the forward convolution's host
time about doubles (ResNet-18 88 -> 167 µs profiled, EfficientNet-B0 68 -> 157, the cast included), priced as one
more of the cuDNN op's own host time; a BF16 channels_last batch norm leaves cuDNN for PyTorch's native kernels
(`NATIVE_BN`: the forward's host time about doubles, 57 -> 138 and 74 -> 128 µs; the backward adds a launch). Each
less the profiler's fitted share. A step that runs near its host bound therefore gains little or nothing (ResNet-50
and EfficientNet-B0 below). Not modelled: cuDNN's choice of BF16 NHWC kernels, and the host work autocast adds to
other ops.

## Options
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs: "Automatic Mixed Precision" (`torch.autocast`), "Channels Last Memory Format in PyTorch",
  `torch.backends.cudnn.allow_tf32`.
- NVIDIA cuDNN developer guide: Tensor-Core convolutions require NHWC; NCHW inputs are transformed.
- Measured on an H200 (unprofiled steps; replayed saving in brackets): torchvision ResNet-18, batch 64, FP32
  13.5 -> 11.0 ms with BF16 autocast + channels_last in two processes (1.64 ms predicted: its 161 transposes'
  launches leave a host-bound step), 4.79 ms saved in the process that took the trace (4.83); a synthetic conv net
  10.6 -> 4.3 ms; torchvision ResNet-50, batch 32, 20.7 -> 32.9 ms, SLOWER (0.00 ms predicted: its twin's host ran
  about twice as slow per unchanged op): sample_traces/collected3, collected4, ab_traced. torchvision
  EfficientNet-B0, batch 64: kernels 33.5 -> 16.1 ms (CUDA-graph runs), but the eager step 33.8 -> 35.7-49 ms,
  SLOWER: autocast and the native batch norms raise its host time (26 -> 40 ms at batch 1) above its kernels';
  predicted 0.00 ms on one recording, and 6.4 (warning) and 13.0 ms (error) on two others whose measured step sits
  at the device's floor, where the measurement pins the host time only from above (a known miss:
  sample_traces/ab_traced, docs/predictions.md).
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.fixes import SLOWER_PCT, slower_by_us
from traceview.analyses.names import contains
from traceview.analyses.opshapes import decode, first_input
from traceview.analyses.overhead import backward_node_host_ns, eager_op_host_ns, host_share
from traceview.analyses.replay import Transform
from traceview.analyses.rowid import by_id
from traceview.engine import CHAIN, SMALL_ROWS
from traceview.evidence import Meta
from traceview.frames import omit, pick
from traceview.ruleapi import XPROF_SEVERITY, Finding, RuleContext, min_savings

from .fp32_gemm import cast_ns, tensor_core_gpu

CODE = "TV206"
NAME = "fp32-conv"
CLASS = "gpu_compute"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "Convolutions run in FP32 (no autocast) and NCHW"
OPTIONS = {**min_savings(2.0), **XPROF_SEVERITY}
FIX = (
    'Run forward and loss under torch.autocast("cuda", dtype=torch.bfloat16) and store model and inputs '
    "in channels_last (model.to(memory_format=torch.channels_last))."
)
#: what the estimate leaves out, said with every FP32 finding
CAVEAT = (
    " The estimate counts the host time of the casts autocast adds (one per weight per forward and its backward), "
    "of channels_last batch norm's native kernels and of the transposes' launches it removes, but not cuDNN's "
    "choice of BF16 NHWC kernels: on a step whose "
    "host is close to the bound, measure after the change, and with "
    "fixed input shapes set torch.backends.cudnn.benchmark = True so cuDNN times its kernels instead of guessing."
)
#: convolution kernels by name (cuDNN, CUTLASS), for kernels whose op recorded no shapes
CONV_KERNEL_RE = r"(?i)fprop|dgrad|wgrad|conv|nchwToNhwc|nhwcToNchw"
LAYOUT_RE = r"nchwToNhwcKernel|nhwcToNchwKernel"
#: the main work kernels of a convolution (implicit GEMM / Winograd / FFT), not its helpers
CONV_WORK_RE = r"(?i)fprop|dgrad|wgrad|implicit_gemm|implicitgemm|convolve|winograd|fft|_conv|conv_"
#: the forward convolution ops autocast casts the weight of (cuDNN's, and ATen's depthwise kernels)
FORWARD_OPS = ("aten::cudnn_convolution", "aten::_conv_depthwise2d", "aten::conv_depthwise3d")
LOW_RE = r"(?i)bf16|f16|fp16|half|bfloat|e4m3|e5m2|h1688|h16816|s16816"
TF32_RE = r"(?i)tf32"
_dec = msgspec.json.Decoder()
FFMA_RE = r"(?i)ffma|simt|sgemm|<float"
#: PyTorch's batch-norm kernels for a contiguous (NCHW) input: one thread block per channel in the reductions (the
#: statistics, the backward), so a layer of few channels on a large image leaves most of the GPU idle; a channels_last
#: input runs the `*_channels_last_kernel`s instead, which split each channel's reduction over the whole GPU
NCHW_BN_RE = r"batch_norm_(collect_statistics|transform_input|backward)_kernel<"
NATIVE_BN_OPS = ("aten::native_batch_norm", "aten::native_batch_norm_backward")


def _kernels(ctx: RuleContext) -> pl.DataFrame:
    """Compute kernels in the analysed steps with their role: [i, name, dur, op, op_name, kind, new_dur] where
    kind is conv_tf32 | conv_fp32 | conv_low | layout | conv_other | bn_nchw | act_fp32 | other."""

    def build() -> pl.DataFrame:
        k = omit(
            pick(ctx.trace.gpu, "i", "name", "kind", "ts", "dur")
            .filter((pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi)),
            "kind", "ts",
        )
        g = k  # (the name tests below read the kernels' names: the joins keep the rows)
        # the rest in one query (a small trace's run is mostly polars' fixed cost per query)
        lg = k.lazy().join(pick(ctx.kb, "i", "op", "op_name", "category", "bpe", "bytes", "flops").lazy(), on="i", how="left")
        lg = lg.join(first_input(ctx.trace).lazy().rename({"rank": "_rank", "dtype": "_dtype", "numel": "_numel"}),
                     on="op", how="left")
        conv = (pl.col("category") == "conv") | (pl.col("category").is_null() & contains(g, CONV_KERNEL_RE))
        low = contains(g, LOW_RE) | (pl.col("bpe") <= 2).fill_null(False)
        work = contains(g, CONV_WORK_RE)
        act = (
            ~conv
            & pl.col("category").is_in(["elementwise", "reduction"])
            & (pl.col("_dtype") == "float")
            & pl.col("_rank").is_in([4, 5])
        )
        bn = ~conv & pl.col("op_name").is_in(NATIVE_BN_OPS) & contains(g, NCHW_BN_RE) & pl.col("_rank").is_in([4, 5])
        kind = (
            pl.when(conv & contains(g, LAYOUT_RE))
            .then(pl.lit("layout"))
            .when(conv & low)
            .then(pl.lit("conv_low"))
            .when(conv & work & contains(g, TF32_RE))
            .then(pl.lit("conv_tf32"))
            .when(conv & work)
            .then(pl.lit("conv_fp32"))
            .when(conv)
            .then(pl.lit("conv_other"))
            .when(bn.fill_null(False))
            .then(pl.lit("bn_nchw"))
            .when(act.fill_null(False))
            .then(pl.lit("act_fp32"))
            .otherwise(pl.lit("other"))
        )
        lg = lg.with_columns(kind=kind)
        spec = ctx.spec
        floor = pl.col("bytes").fill_null(0) / 2 / spec.bw * 1e9
        new = (
            pl.when(pl.col("kind") == "conv_tf32")
            .then(pl.col("dur") * (spec.tf32_tflops / spec.tc_tflops))
            .when(pl.col("kind") == "conv_fp32")
            .then(pl.max_horizontal(pl.col("dur") * (spec.fp32_tflops / spec.tc_tflops), floor))
            .when(pl.col("kind") == "layout")
            .then(0)
            .when(pl.col("kind") == "act_fp32")
            .then(pl.col("dur") * 0.5)
            .otherwise(pl.col("dur"))
        )
        out = lg.with_columns(new_dur=pl.min_horizontal(new, pl.col("dur")).cast(pl.Int64)).collect(**CHAIN)
        return _nhwc_convs(ctx, _channels_last_bn(ctx, out)).drop("_rank", "_dtype", "_numel", "flops")

    return ctx.once("conv_kernels", build)


def _channels_last_bn(ctx: RuleContext, k: pl.DataFrame) -> pl.DataFrame:
    """`new_dur` of the NCHW batch-norm kernels (kind `bn_nchw`) in channels_last: each layer's forward (or
    backward) at the rate, in its activation's bytes per ns, that the NCHW kernels of the same op reach on their
    fastest layer shape in this trace — the layers whose channels fill the GPU, where one block per channel costs
    nothing; the channels_last kernels, which split every channel over the GPU, run every layer so. A layer's
    kernels share its time in proportion to their own; an FP32 input counts its BF16 bytes (autocast's, half);
    never above the traced time. ResNet-50 BF16 at batch 64 on an H100 runs its NCHW batch norms in 15.0 ms a step,
    priced 8.3 in channels_last; the channels_last kernels of the same layers take 3.8 ms a step at batch 32 on an
    H200 (sample_traces/collected4/resnet50_bf16_cl: 7.5 at batch 64, on faster memory)."""
    bn = k.filter(pl.col("kind") == "bn_nchw")
    if bn.height == 0:
        return k
    size = pl.col("_numel").cast(pl.Float64) * pl.col("bpe").fill_null(2.0)  # (its bytes as traced)
    after = pl.when(pl.col("_dtype") == "float").then(0.5).otherwise(1.0)  # (autocast's BF16 halves an FP32 input's)
    per_op = bn.group_by("op").agg(pl.col("op_name").first(), size.first().alias("size"), after.first().alias("after"),
                                   pl.col("dur").sum().alias("op_dur")).sort("op")
    # (a layer shape: the op's recorded input dims, not its size: [64, 2048, 7, 7] and [64, 128, 28, 28] are as large)
    per_op = per_op.with_columns(shape=by_id(ctx.trace.host, per_op["op"].cast(pl.UInt32), "input_dims")["input_dims"])
    rate = per_op.group_by("op_name", "shape").agg((pl.col("size").sum() / pl.col("op_dur").sum()).alias("rate"))
    best = rate.group_by("op_name").agg(pl.col("rate").max().alias("best"))
    scale = per_op.join(best, on="op_name").select(
        "op", pl.min_horizontal(pl.col("size") * pl.col("after") / pl.col("best") / pl.col("op_dur"), pl.lit(1.0))
        .alias("_scale"))
    k = k.join(scale, on="op", how="left")
    return k.with_columns(
        new_dur=pl.when(pl.col("kind") == "bn_nchw")
        .then((pl.col("dur") * pl.col("_scale").fill_null(1.0)).cast(pl.Int64))
        .otherwise("new_dur")
    ).drop("_scale")


#: the convolution ops cuDNN runs, forward and backward (not ATen's depthwise kernels)
CUDNN_CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward")


def _nhwc_convs(ctx: RuleContext, k: pl.DataFrame) -> pl.DataFrame:
    """`new_dur` of the 16-bit convolutions cuDNN runs on NCHW tensors untransposed (an op of the trace's NCHW
    convolutions with no layout transform of its own: a stride-1 1x1 convolution is a GEMM per image over its H·W
    columns, [C_out, C_in] x [C_in, H·W], whose short, oddly aligned rows (49, 196, 784 elements) run at a third to
    half the Tensor-Core rate), in channels_last: one GEMM over N·H·W rows in cuDNN's NHWC kernels, at the median
    rate (FLOPs per ns) the trace's own transposed convolutions of the same op reach in those kernels, never below
    its bytes at the memory bandwidth, never above the traced time. Only where the trace transposes (`layout`)."""
    lay = k.filter(pl.col("kind") == "layout")["op"].drop_nulls().unique()
    conv = k.filter(pl.col("kind").is_in(["conv_low", "conv_other"]) & pl.col("op_name").is_in(CUDNN_CONV_OPS)
                    & pl.col("op").is_not_null())
    if lay.len() == 0 or conv.height == 0 or not _nchw_inputs(ctx, conv):
        return k
    # (an op's FLOPs and bytes are shared among its kernels, its transposes' included)
    whole = k.filter(pl.col("op").is_in(conv["op"].unique().implode())).group_by("op").agg(
        pl.col("flops").sum(), pl.col("bytes").sum())
    per_op = conv.group_by("op").agg(
        pl.col("op_name").first(), pl.col("dur").sum().alias("work"), (pl.col("kind") == "conv_low").any().alias("low"),
    ).join(whole, on="op").with_columns(transposed=pl.col("op").is_in(lay.implode()))
    rate = per_op.filter(pl.col("transposed") & (pl.col("flops") > 0) & (pl.col("work") > 0)).group_by("op_name").agg(
        (pl.col("flops") / pl.col("work")).median().alias("rate"))
    floor = pl.col("bytes").fill_null(0) / ctx.spec.bw * 1e9
    scale = per_op.filter(~pl.col("transposed") & pl.col("low")).join(rate, on="op_name").select(
        "op", pl.min_horizontal(pl.max_horizontal(pl.col("flops") / pl.col("rate"), floor) / pl.col("work"),
                                pl.lit(1.0)).alias("_scale"))
    if scale.height == 0:
        return k
    k = k.join(scale, on="op", how="left")
    return k.with_columns(
        new_dur=pl.when(pl.col("kind").is_in(["conv_low", "conv_other"]) & pl.col("_scale").is_not_null())
        .then((pl.col("dur") * pl.col("_scale")).cast(pl.Int64))
        .otherwise("new_dur")
    ).drop("_scale")


def _nchw_inputs(ctx: RuleContext, conv: pl.DataFrame) -> bool:
    """Whether the forward convolutions' inputs are NCHW-contiguous, every one whose strides the trace recorded (the
    channel stride H·W; channels_last's is 1), and at least one recorded: a channels_last model whose only NCHW
    convolution is its first (the image) transposes there too, and its other convolutions are NHWC already. Without
    recorded strides, unknown: False. The backward ops record no strides; they follow their forwards' layout."""
    fwd = conv.filter(pl.col("op_name") == "aten::cudnn_convolution")["op"].unique().sort().cast(pl.UInt32)
    if "strides" not in ctx.trace.host.columns or fwd.len() == 0:
        return False
    rows = pick(by_id(ctx.trace.host, fwd, "input_dims", "strides"), "input_dims", "strides").unique()
    seen = False
    for dims_b, strides_b in rows.iter_rows():  # distinct shapes, not calls
        try:
            dims, strides = _dec.decode(dims_b or "null"), _dec.decode(strides_b or "null")
        except msgspec.DecodeError:
            continue
        if not (isinstance(dims, list) and isinstance(strides, list) and dims and strides
                and isinstance(dims[0], list) and isinstance(strides[0], list)
                and len(dims[0]) >= 4 and len(strides[0]) == len(dims[0])):
            continue
        x, st = dims[0], strides[0]
        if x[1] <= 1 or math.prod(x[2:]) <= 1:  # (one channel, or one pixel: either layout)
            continue
        if st[1] != math.prod(x[2:]):
            return False
        seen = True
    return seen


def _no_convolution(ctx: RuleContext) -> bool:
    """Whether no compute kernel can be a convolution (`_kernels`' `conv`: its op's category `conv`, or no category
    and a convolution's name), told without the kernel table (a tiny trace's run: ~4 ms, most of this rule's): then
    no kernel is an FP32 convolution or a transpose, and `_changed` is empty. Tested on every GPU row's name (a
    superset of the kernels in the steps) on a small trace only; a larger one builds the table."""
    kb, gpu = ctx.kb, ctx.trace.gpu
    if gpu.height >= SMALL_ROWS or (kb["category"] == "conv").any():
        return False
    return not gpu.select(pl.col("name").str.contains(CONV_KERNEL_RE).any()).item()


def _changed(ctx: RuleContext) -> pl.DataFrame:
    k = _kernels(ctx)
    fp32 = k.filter(pl.col("kind").is_in(["conv_tf32", "conv_fp32"]))
    layout = k.filter(pl.col("kind") == "layout")
    if fp32.height == 0 and layout.height == 0:
        return k.head(0)
    # the activations halve only with autocast: when the convolutions are 16-bit already, only the transposes go
    kinds = ["conv_tf32", "conv_fp32", "layout", "bn_nchw", "act_fp32"] if fp32.height else ["layout", "bn_nchw"]
    kinds += ["conv_low", "conv_other"]  # (16-bit convolutions cuDNN runs untransposed: `_nhwc_convs`)
    return k.filter(pl.col("kind").is_in(kinds) & (pl.col("new_dur") < pl.col("dur")))


class Evidence(msgspec.Struct, kw_only=True):
    fp32_conv_kernels_per_step: Annotated[float, Meta(description="FP32/TF32 convolution kernels per step")]
    fp32_conv_time_per_step_us: Annotated[float, Meta(description="their time per step (µs)")]
    tf32_conv_time_per_step_us: Annotated[float, Meta(description="of which TF32 Tensor-Core kernels (µs)")]
    ffma_conv_time_per_step_us: Annotated[float, Meta(description="of which FFMA (CUDA-core) kernels (µs)")]
    bf16_conv_kernels_per_step: Annotated[
        float, Meta(description="convolution kernels per step already in 16-bit")
    ]
    layout_transform_time_per_step_us: Annotated[
        float, Meta(description="cuDNN's NCHW<->NHWC transposes per step (µs)")
    ]
    nchw_batch_norm_time_per_step_us: Annotated[float, Meta(
        description="PyTorch's NCHW batch-norm kernels per step (µs), which channels_last replaces")]
    nchw_conv_time_per_step_us: Annotated[float, Meta(
        description="16-bit convolution kernels per step cuDNN runs on NCHW tensors untransposed (µs)")]
    fp32_activation_kernel_time_per_step_us: Annotated[
        float, Meta(description="FP32 elementwise kernels around the convolutions per step (µs)")
    ]
    predicted_time_per_step_us: Annotated[
        float, Meta(description="the changed kernels' time after the fix, predicted (µs)")
    ]
    changed_time_per_step_us: Annotated[float, Meta(description="the changed kernels' time today (µs)")]
    device: Annotated[str, Meta(description="the device the prediction is for")]
    fix_slower_us: Annotated[float, Meta(
        description="how much the fix lengthens the replayed step (µs per step, unprofiled; 0 where it does not): "
                    "its casts and batch norms' host time on a host-bound step")]


FIX_SLOWER = (" On this step the change would cost time: replayed, it adds about {ms:.1f} ms a step, its casts and "
              "batch norms' host work (on a host that sets the step's pace) outweighing faster convolutions that are "
              "not on the critical path.")


def check(ctx: RuleContext) -> list[Finding]:
    if not tensor_core_gpu(ctx) or _no_convolution(ctx):
        return []
    c = _changed(ctx)
    if c.height == 0:
        return []
    k = _kernels(ctx)
    n = max(ctx.steps.height, 1)
    savings = int((c["dur"] - c["new_dur"]).sum())
    if ctx.pct(savings) < ctx.options["min_savings_pct"]:
        return []

    def per_step(kind: str, col: str = "dur") -> float:
        return round(float(k.filter(pl.col("kind") == kind)[col].sum()) / n / 1000, 3)

    n_fp32 = k.filter(pl.col("kind").is_in(["conv_tf32", "conv_fp32"])).height
    n_low = k.filter(pl.col("kind") == "conv_low").height
    layout_us = per_step("layout")
    bn_us = per_step("bn_nchw")
    bn_new = per_step("bn_nchw", "new_dur")
    # what channels_last does to the batch norms, said where it applies
    bn_text = (
        f" PyTorch's batch norms run their NCHW kernels ({bn_us / 1000:.2f} ms per step), one thread block per "
        f"channel in their reductions; its channels_last kernels split each channel over the GPU "
        f"(about {bn_new / 1000:.2f} ms)."
        if bn_us > 0 and bn_new < bn_us
        else ""
    )
    # the 16-bit convolutions cuDNN runs untransposed on NCHW (`_nhwc_convs`): those whose time the fix changes
    gemm = k.filter(pl.col("kind").is_in(["conv_low", "conv_other"]) & (pl.col("new_dur") < pl.col("dur")))
    gemm_us, gemm_new = (round(float(gemm[col].sum()) / n / 1000, 3) for col in ("dur", "new_dur"))
    if gemm.height:
        bn_text += (
            f" cuDNN runs {gemm['op'].n_unique() / n:.0f} convolutions per step on the NCHW tensors untransposed "
            f"({gemm_us / 1000:.2f} ms: a 1x1 convolution as a GEMM per image over its H·W columns); in channels_last "
            f"they are one GEMM over all N·H·W rows in its NHWC kernels (about {gemm_new / 1000:.2f} ms)."
        )
    conv_us = per_step("conv_tf32") + per_step("conv_fp32")
    evidence = Evidence(
        fp32_conv_kernels_per_step=round(n_fp32 / n, 2),
        fp32_conv_time_per_step_us=round(conv_us, 3),
        tf32_conv_time_per_step_us=per_step("conv_tf32"),
        ffma_conv_time_per_step_us=per_step("conv_fp32"),
        bf16_conv_kernels_per_step=round(n_low / n, 2),
        layout_transform_time_per_step_us=layout_us,
        nchw_batch_norm_time_per_step_us=bn_us,
        nchw_conv_time_per_step_us=gemm_us,
        fp32_activation_kernel_time_per_step_us=per_step("act_fp32") if n_fp32 else 0.0,
        predicted_time_per_step_us=round(float(c["new_dur"].sum()) / n / 1000, 3),
        changed_time_per_step_us=round(float(c["dur"].sum()) / n / 1000, 3),
        device=ctx.spec.name,
        fix_slower_us=round(_slower_us(ctx), 3),
    )
    if n_fp32:
        tf32 = per_step("conv_tf32") >= per_step("conv_fp32")
        how = (
            "already on TF32 Tensor Cores (cuDNN's default allow_tf32), half the BF16 rate"
            if tf32
            else "on the CUDA cores (ffma kernels: TF32 is off), a fraction of the Tensor-Core rate"
        )
        mixed = (
            f" {round(n_low / n)} convolution kernels per step already run in 16-bit: these run outside the "
            "autocast region or on tensors it does not cast."
            if n_low
            else ""
        )
        layout = (
            f" cuDNN also transposes NCHW to NHWC and back around them ({layout_us / 1000:.2f} ms per step): "
            "store model and inputs in channels_last (model.to(memory_format=torch.channels_last), "
            "x.to(memory_format=torch.channels_last))."
            if layout_us > 0
            else " The tensors are channels_last already (no layout transforms)."
        ) + bn_text
        fix = (
            f"{round(n_fp32 / n)} convolution kernels per step ({conv_us / 1000:.2f} ms) compute in FP32, {how}, "
            "and read and write FP32 activations, as do the batch norms, ReLUs and adds around them. Run "
            'forward and loss under torch.autocast("cuda", dtype=torch.bfloat16): BF16 convolutions at twice '
            f"the TF32 rate and half the activation bytes.{mixed}{layout}{CAVEAT}"
        )
        title = TITLE
    else:
        fix = (
            f"The convolutions run in 16-bit, but cuDNN transposes NCHW tensors to NHWC and back around them "
            f"({layout_us / 1000:.2f} ms per step): store model and inputs in channels_last "
            "(model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last))."
            f"{bn_text}"
        )
        title = "cuDNN transposes NCHW tensors around each convolution (no channels_last)"
    if ctx.pct(evidence.fix_slower_us * 1000 * max(ctx.steps.height, 1)) >= SLOWER_PCT:  # (per step)
        fix += FIX_SLOWER.format(ms=evidence.fix_slower_us / 1000)
    steps = sorted(int(s) for s in ctx.steps["step"].to_list())
    # where: the convolutions' layer (or the transposes' when the convolutions are 16-bit already), not the most
    # common layer of every kernel the fix changes: the FP32 activation kernels outnumber the convolutions (a
    # ViT's patch embedding is one convolution a step beside thousands of attention and MLP kernels)
    subject = c.filter(pl.col("kind").is_in(["conv_tf32", "conv_fp32"] if n_fp32 else ["layout"]))["i"]
    return [
        ctx.finding(
            cost_ns=int(c["dur"].sum()),
            savings_ns=savings,
            count=c.height,
            steps=steps,
            evidence=evidence,
            fix=fix,
            title=title,
            kernel_ids=subject if subject.len() else c["i"],
        )
    ]


#: the casts autocast adds per FP32 convolution: its weight to BF16 (forward), `ToCopyBackward0` (the weight's
#: gradient back to FP32) and an `aten::to` in `convolution_backward` — counted in the BF16 twins' traces (ResNet-18:
#: 21, 23 and 20 a step for 20 convolutions; EfficientNet-B0: 82, 81 + 32 and 81 for 81, its 32 biases adding one
#: each way); on the host two are eager ops (`overhead.eager_op_host_ns`) and the gradient's `ToCopyBackward0` an autograd
#: node (`overhead.backward_node_host_ns`: 41-46 µs traced in the BF16 twins, twice a forward cast)
CASTS_PER_CONV = 3


def _slower_us(ctx: RuleContext) -> float:
    """`fixes.slower_by_us` of the fix (`fix_transform`)."""
    t = fix_transform(ctx)
    return slower_by_us(ctx, [t]) if t is not None else 0.0


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each changed kernel takes its predicted time (see the module doc); each
    FP32 forward convolution pays the host time of the casts autocast adds (`CASTS_PER_CONV`; their copy kernels on
    the device, `_cast_kernels_ns`) and its own host time
    once more (autocast's second dispatch into cuDNN's BF16 NHWC engine), before the convolution's launch; each
    cuDNN batch norm pays what the native one adds (`NATIVE_BN`); each transpose's launch call leaves the host."""
    if not tensor_core_gpu(ctx) or _no_convolution(ctx):
        return None
    c = _changed(ctx)
    if c.height == 0:
        return None
    share = host_share(ctx.trace)
    # one cast autocast adds: an eager op launching one elementwise kernel (`aten::to` -> `_to_copy` -> a copy)
    one = eager_op_host_ns(ctx.trace)
    cut: dict[int, int] = {}
    add: dict[int, int] = {}
    if c.filter(pl.col("kind").is_in(["conv_tf32", "conv_fp32"])).height:  # autocast's work, where it casts
        # every FP32 forward convolution, whatever its kernel (a 1x1 one runs as a cuDNN GEMM)
        fwd = _kernels(ctx).filter(pl.col("kind").is_in(["conv_tf32", "conv_fp32", "conv_other"])
                                   & pl.col("op_name").is_in(FORWARD_OPS) & pl.col("op").is_not_null())
        ops = fwd["op"].unique().cast(pl.UInt32)
        own = by_id(ctx.trace.host, ops, "dur")["dur"].fill_null(0).to_numpy() * (1.0 - share)
        # (the weight gradient's `ToCopyBackward0` is an autograd node: at the trace's own nodes' cost)
        casts = (CASTS_PER_CONV - 1) * one + backward_node_host_ns(ctx.trace)
        cut = {int(op): -int(casts + d) for op, d in zip(ops.to_list(), own.tolist(), strict=True)}
        for op, extra in _native_bn_host_ns(ctx, share).items():
            cut[op] = cut.get(op, 0) - extra
        add = _cast_kernels_ns(ctx, fwd)
    # channels_last removes the transposes, their launches with them: each one's launch call leaves the host
    layout = c.filter(pl.col("kind") == "layout")["i"].cast(pl.UInt32)
    launches = by_id(ctx.trace.gpu, layout, "launch")["launch"].drop_nulls().unique()
    return Transform(
        NAME,
        gpu_dur=dict(zip(c["i"].cast(pl.Int64).to_list(), c["new_dur"].to_list(), strict=True)),
        gpu_add=add,
        host_cut=cut,
        host_removed=launches.cast(pl.Int64).to_list(),
    )


def _cast_kernels_ns(ctx: RuleContext, fwd: pl.DataFrame) -> dict[int, int]:
    """The device time of autocast's casts per FP32 forward convolution (`fwd`: its kernels, [i, op]), as
    `Transform.gpu_add` on its first kernel: `CASTS_PER_CONV` copies of its weight's elements (the op's second
    input), each at fp32-gemm's cast pricing (`fp32_gemm.cast_ns`); the BF16 twins' traces run them in 144 µs a step
    (ResNet-18: 21 forward casts, 23 gradient casts, the strided backward ones slower) and 302 (ResNet-50), priced
    152 and 362. Where they run (the weight's gradient cast in the backward) is not placed: the casts' host time is
    charged to the forward convolution too."""
    ops = fwd["op"].unique().cast(pl.UInt32)
    rows = by_id(ctx.trace.host, ops, "input_dims", "input_type")
    first = dict(fwd.group_by("op").agg(pl.col("i").min()).select(pl.col("op").cast(pl.Int64), pl.col("i").cast(pl.Int64))
                 .iter_rows())
    out: dict[int, int] = {}
    for op, dims, types in zip(ops.to_list(), rows["input_dims"].to_list(), rows["input_type"].to_list(), strict=True):
        ins = decode(dims, types)
        if len(ins) > 1 and ins[1][0] and ins[1][1] == "float" and int(op) in first:
            out[first[int(op)]] = CASTS_PER_CONV * cast_ns(math.prod(ins[1][0]), ctx.spec.bw)
    return out


#: what PyTorch's native batch norm adds per layer where a channels_last BF16 input leaves cuDNN's, by the cuDNN op it
#: replaces: (its own host time's multiple, launches). Measured in the BF16 twins' traces: the forward (statistics
#: and normalization in three kernels, a zeroed buffer) about doubles the host time of cuDNN's op (ResNet-18 57 ->
#: 138 µs profiled, EfficientNet-B0 74 -> 128); the backward adds about a launch (77 -> 90, 64 -> 74)
NATIVE_BN = {"aten::cudnn_batch_norm": (1.0, 0), "aten::cudnn_batch_norm_backward": (0.0, 1)}


def _native_bn_host_ns(ctx: RuleContext, share: float) -> dict[int, int]:
    """cuDNN batch-norm op (host row) -> the unprofiled host time (ns) PyTorch's native batch norm adds in its
    place (`NATIVE_BN`): a multiple of the op's own host time and launches at the trace's median launch call, less
    the profiler's share (`share`: `overhead.host_share`)."""
    k = _kernels(ctx).filter(pl.col("op_name").is_in(list(NATIVE_BN)) & pl.col("op").is_not_null())
    if k.height == 0:
        return {}
    g = ctx.trace.gpu.filter(
        (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi) & pl.col("launch").is_not_null()
    )
    launch = by_id(ctx.trace.host, g["launch"].unique().cast(pl.UInt32), "dur")["dur"]
    launch_ns = float(launch.median() or 0.0) * (1.0 - share)
    ops = k.group_by("op").agg(pl.col("op_name").first())
    own = by_id(ctx.trace.host, ops["op"].cast(pl.UInt32), "dur")["dur"].fill_null(0).to_numpy() * (1.0 - share)
    return {
        int(op): int(NATIVE_BN[name][0] * d + NATIVE_BN[name][1] * launch_ns)
        for op, name, d in zip(ops["op"].to_list(), ops["op_name"].to_list(), own.tolist(), strict=True)
    }
