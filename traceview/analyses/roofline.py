"""FLOPs and bytes of the ops that launch kernels, and a roofline bound per kernel.

Formulas follow TraceLens's perf models (github.com/AMD-AGI/TraceLens, `TraceLens/PerfModel/perf_model.py`), fed by the
launching op's `Input Dims` / `Input type` (record_shapes). bpe = bytes per element of each operand.

| category | ops | FLOPs | bytes |
|---|---|---|---|
| gemm | mm, addmm, _addmm_activation, bmm, baddbmm, matmul, linear, _scaled_mm | 2·M·N·K·batch (+M·N bias) | M·K·bpe_A + K·N·bpe_B + M·N·bpe_out (+bias) |
| conv | convolution, _convolution, cudnn_convolution, conv*d (+_backward ×2) | 2·N·C_out·H_out·W_out·C_in/g·k_h·k_w | (∏x + ∏w + ∏out)·bpe |
| attention | scaled_dot_product_*, _flash_attention_*, _efficient_attention_* (Q, K, V: [B, H, N, d]; [B, N, H, d] for `_flash_attention_*` and `_efficient_attention_*`; a backward op's after the gradient) | 4·B·H·N_q·N_kv·d (×2.5 backward; × the causal share of a causal call) | (Q + K + V + O)·bpe |
| reduction | sum, mean, amax, norm, softmax, layer/rms/batch/group norm, … | elements read | inputs + outputs (norm/softmax: out = in) |
| elementwise | everything else with tensor inputs | elements of the (broadcast) output | Σ inputs·bpe + out·bpe_out |

Indexing ops read only what they select, not the whole source tensor: `embedding` reads one row per index,
`gather`/`take` one element per index, `index_select` one slice per index (the dim from `Concrete Inputs`),
`nll_loss_forward`/`_backward` one logit per target (`NLL_OPS`).
bytes = rows read + indices + output; an index expanded along a dim (stride 0 in `Input Strides`, as
`embedding` builds for `gather`) counts its distinct values only. `fill_`/`zero_` write their output and
read nothing.

Convolution forward takes stride, padding and dilation from the op's `Concrete Inputs` (recorded by current
PyTorch with record_shapes; argument positions per op in `CONV_ARGS`): H_out = ⌊(H + 2p − d(k − 1) − 1)/s⌋ + 1.
Without them (older traces) it assumes a stride-1 "same" output (Kineto records no output shape).
Attention counts a causal call's FLOPs as the blocks it computes (`causal.causal_share`, from SDPA's recorded
`is_causal`; TraceLens halves them when known). Inputs with dims `[]` are scalars.

Kernel-name fallback (no shapes, e.g. `record_shapes=False` or an op-less CUDA-graph kernel): a kernel
whose name looks like a GEMM/convolution/attention library kernel (gemm, nvjet, cutlass, xmma, cudnn,
conv, flash, fmha, Cijk_, …) is `compute`; every other kernel (elementwise, reduce, copies, triton
pointwise) is `memory`. The roofline bound is `compute` when FLOPs/peak ≥ bytes/bandwidth, else `memory`;
the peak is the math unit's the op ran on (`peak_expr`): the 16-bit Tensor Cores for <= 2-byte operands, TF32
for FP32 operands of an op whose kernels are TF32 Tensor-Core kernels (cuDNN runs FP32 convolutions so by
default), FP32 otherwise.
"""

from __future__ import annotations

import math
import re

import msgspec
import polars as pl

from ..engine import CHAIN
from ..frames import dropnull, members, omit, pick
from ..model import Trace
from .causal import sdpa_causal
from .names import contains
from .rowid import by_id
from .specs import Spec, trace_spec

DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2, "bfloat16": 2, "long int": 8,
    "long": 8, "int": 4, "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "int8_t": 1, "uint8_t": 1,
}
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "aten::baddbmm", "aten::matmul",
            "aten::linear", "aten::_scaled_mm", "aten::addbmm"}
ATTN_KEYS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")
#: attention ops whose Q, K, V are [batch, sequence, heads, head dim] (the flash and memory-efficient kernels'
#: ATen ops, under SDPA's [batch, heads, sequence, head dim] `_scaled_dot_product_*` ops)
SEQ_FIRST_ATTN_RE = re.compile(r"^aten::_(flash|efficient)_attention_(forward|backward)$")
REDUCE_OPS = {"sum", "mean", "amax", "amin", "max", "min", "norm", "prod", "var", "std", "argmax", "argmin",
              "logsumexp", "cumsum", "any", "all", "topk", "sort", "linalg_vector_norm", "var_mean", "std_mean"}
REDUCE_KEYS = ("norm", "softmax", "_loss", "nll_loss", "cross_entropy")  # substrings of the base name
SAME_OUT_KEYS = ("softmax", "layer_norm", "rms_norm", "batch_norm", "group_norm", "cumsum", "sort")
COMPUTE_KERNEL_RE = (r"(?i)gemm|nvjet|cutlass|xmma|wgmma|hmma|cublas|cudnn|conv|winograd|implicit_|fmha|flash|"
                     r"attention|Cijk_|dgrad|wgrad|triton_tem|_mma_|sm\d\d_xmma")
ELEMENTWISE_KERNEL_RE = (r"(?i)elementwise|reduce_kernel|reduction|triton_poi|triton_red|triton_per|"
                         r"unrolled_|vectorized_|pointwise|softmax|layer_norm|batch_norm|fill|copy_kernel|"
                         r"index_elementwise|CatArrayBatched|multi_tensor_apply")

#: Tensor-Core kernels on FP32 data (TF32: cuBLAS/cuDNN/CUTLASS names carry `tf32`, Ampere CUTLASS's `s1688`/`s16816`
#: tensorop GEMMs). PyTorch lets cuDNN run FP32 convolutions so by default (`torch.backends.cudnn.allow_tf32`), and
#: GEMMs under `set_float32_matmul_precision("high")`: their FLOPs are measured against the TF32 peak, not FP32's
TF32_KERNEL_RE = r"(?i)tf32|tensorop_s\d{4}|_s1688|_s16816"

INDEX_OPS = {"aten::embedding", "aten::gather", "aten::index_select", "aten::take"}
#: the negative log-likelihood's own kernels touch one logit per target, not the [N, C] logits (a language model's
#: 50257-wide rows read whole would be 6x the bandwidth in the kernel's measured time); the backward's zeroed
#: gradient is a memset of its own. Position of (logits, target) among the op's tensors
NLL_OPS = {"aten::nll_loss_forward": (0, 1), "aten::nll_loss2d_forward": (0, 1),
           "aten::nll_loss_backward": (1, 2), "aten::nll_loss2d_backward": (1, 2)}
WRITE_ONLY_OPS = {"aten::fill_", "aten::zero_"}
#: elementwise ops whose output is bool (one byte an element) whatever their inputs' width: comparisons and
#: predicates (out of place; an in-place `eq_` writes its own dtype)
BOOL_OUT_OPS = {f"aten::{n}" for n in ("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isneginf", "isposinf",
                                       "isfinite", "signbit", "logical_and", "logical_or", "logical_xor",
                                       "logical_not")}


def _out_bpe(name: str, ts: list) -> int:
    """Bytes per element of an elementwise op's output: bool for `BOOL_OUT_OPS`; `where(condition, a, b)` writes
    its values' width (the condition is bool); else the first tensor input's."""
    if name in BOOL_OUT_OPS:
        return 1
    if name == "aten::where" and len(ts) >= 2:
        return max(b for _, b in ts[1:])
    return ts[0][1]

_dims_dec = msgspec.json.Decoder()

#: convolution forward ops: positions of (stride, padding, dilation) in their arguments (Concrete Inputs)
CONV_ARGS = {
    "aten::convolution": (3, 4, 5), "aten::_convolution": (3, 4, 5), "aten::conv1d": (3, 4, 5),
    "aten::conv2d": (3, 4, 5), "aten::conv3d": (3, 4, 5), "aten::cudnn_convolution": (3, 2, 4),
    "aten::miopen_convolution": (4, 3, 5), "aten::mkldnn_convolution": (3, 2, 4),
}


def _conv_out(spatial: list, kernel: list, concrete: list | None, name: str) -> list:
    """Output spatial sizes of a convolution forward from its Concrete Inputs; the input sizes (stride-1
    "same") when they are missing or unreadable."""
    pos = CONV_ARGS.get(name)
    if not pos or not concrete or len(concrete) <= max(pos):
        return list(spatial)
    try:
        s, p, d = (_dims_dec.decode(concrete[i]) for i in pos)
    except (msgspec.DecodeError, TypeError):
        return list(spatial)
    nd = len(spatial)

    def per_dim(v) -> list:
        return [v] * nd if isinstance(v, int) else list(v) if isinstance(v, list) and len(v) in (1, nd) else []

    s, p, d = per_dim(s), per_dim(p), per_dim(d)
    if not (s and p and d) or not all(isinstance(x, int) for x in (*s, *p, *d)):
        return list(spatial)
    s, p, d = ([x[0]] * nd if len(x) == 1 else x for x in (s, p, d))
    return [max((h + 2 * pp - dd * (k - 1) - 1) // ss + 1, 0)
            for h, k, ss, pp, dd in zip(spatial, kernel, s, p, d, strict=True)]


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs) if xs else 1


def _is_tensor(d, t) -> bool:
    # a 0-dim tensor (a step counter, BatchNorm's num_batches_tracked) is `[]` with a dtype: one element
    return isinstance(d, list) and all(isinstance(x, int) for x in d) and t in DTYPE_BYTES


def index_io(name: str, dims: list, types: list, concrete: list | None = None,
             strides: list | None = None) -> tuple[float, float, float, float] | None:
    """(elements selected, source bytes read, index bytes, output bytes) of an indexing op (INDEX_OPS), or
    None for other ops or unreadable shapes. Only the selected rows/elements of the source are read."""
    if name not in INDEX_OPS:
        return None
    ts = [(k, d, DTYPE_BYTES[t]) for k, (d, t) in enumerate(zip(dims, types, strict=False)) if _is_tensor(d, t)]
    if len(ts) < 2:
        return None
    (_, src, b_src), (k_idx, idx, b_idx) = ts[0], ts[1]

    def distinct(k: int, d: list) -> int:  # an expanded (stride-0) dim repeats the same index values
        st = strides[k] if isinstance(strides, list) and k < len(strides) else None
        if isinstance(st, list) and len(st) == len(d):
            return _prod([x for x, s in zip(d, st, strict=True) if s != 0])
        return _prod(d)

    n_idx = _prod(idx)
    if name == "aten::embedding":
        elems = n_idx * _prod(src[1:])
    elif name == "aten::index_select":
        dim = 0
        if concrete and len(concrete) > 1:
            try:
                dim = int(_dims_dec.decode(concrete[1]))
            except (msgspec.DecodeError, TypeError, ValueError):
                dim = 0
        if not -len(src) <= dim < len(src) or not src[dim]:
            return None
        elems = _prod(src) // src[dim] * n_idx
    else:  # gather, take: one element per index
        elems = n_idx
    return (float(elems), float(elems * b_src), float(distinct(k_idx, idx) * b_idx), float(elems * b_src))


def op_cost(name: str, dims: list, types: list, concrete: list | None = None,
            strides: list | None = None) -> tuple[str, float | None, float | None, float | None]:
    """(category, flops, bytes, bpe of the first tensor) for one (name, Input Dims, Input type) combo;
    `concrete` (the op's Concrete Inputs) gives a convolution's stride/padding/dilation and the dim of an
    index_select, `strides` (Input Strides) the expanded dims of an index."""
    ts = [(d, DTYPE_BYTES[t]) for d, t in zip(dims, types, strict=False) if _is_tensor(d, t)]
    if not ts:
        return ("other", None, None, None)
    bpe = ts[0][1]
    low = name.lower()
    idx = index_io(name, dims, types, concrete, strides)
    if idx is not None:
        elems, read, ind, out = idx
        return ("elementwise", elems, read + ind + out, bpe)
    if name in WRITE_ONLY_OPS:
        return ("elementwise", float(_prod(ts[0][0])), float(_prod(ts[0][0]) * bpe), bpe)
    if name in NLL_OPS and len(ts) > max(NLL_OPS[name]):
        (_, b_x), (tgt, b_t) = ts[NLL_OPS[name][0]], ts[NLL_OPS[name][1]]
        n = _prod(tgt)  # one logit read (forward) or gradient written (backward) per target, plus the target
        return ("reduction", float(n), float(n * (2 * b_x + b_t)), b_x)
    try:
        if name in GEMM_OPS:
            bias = None
            mats = ts
            if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm", "aten::addbmm") and len(ts) >= 3:
                bias, mats = ts[0], ts[1:3]
            if name == "aten::linear":
                (x, bx), (w, bw) = ts[0], ts[1]
                m, k, n = _prod(x[:-1]), x[-1], w[0]
                bias = ts[2] if len(ts) > 2 else None
                flops = 2.0 * m * n * k
                byts = m * k * bx + k * n * bw + m * n * bx
            else:
                (a, ba), (b, bb) = mats[0], mats[1]
                if len(a) == 1:
                    a = [1, a[0]]
                if len(b) == 1:
                    b = [b[0], 1]
                m, k, n = a[-2], a[-1], b[-1]
                batch = max(_prod(a[:-2]), _prod(b[:-2]))
                flops = 2.0 * batch * m * n * k
                byts = batch * (m * k * ba + k * n * bb + m * n * ba)
            if bias is not None:
                flops += _prod(bias[0]) if name == "aten::linear" else 0
                byts += _prod(bias[0]) * bias[1]
                if name != "aten::linear":
                    flops += m * n * (batch if name != "aten::addmm" else 1)
            return ("gemm", float(flops), float(byts), bpe)
        if "convolution" in low or low.startswith("aten::conv") or "cudnn_conv" in low:
            if low.endswith("_backward_weight"):
                # PyTorch <= 1.x's split op (weight_size, grad_output, input, …): the weight's size is an int list
                # the trace does not record, so neither is its kernel's size nor its FLOPs (read as a forward
                # convolution of grad_output by input, ResNet-50's weight gradients came out 500x the V100's peak)
                (go, _), (x, _) = ts[0], ts[1]
                return ("conv", None, float((_prod(go) + _prod(x)) * bpe), bpe)
            if low.endswith("_backward_input") and len(ts) >= 2:  # (input_size, grad_output, weight, …): dgrad only
                (go, _), (w, _) = ts[0], ts[1]
                return ("conv", 2.0 * _prod(go) * _prod(w[1:]), float((2 * _prod(go) + _prod(w)) * bpe), bpe)
            if "backward" in low and len(ts) >= 3:
                (go, _), (x, _), (w, _) = ts[0], ts[1], ts[2]
                out_elems = _prod(go)
                flops = 2.0 * 2.0 * out_elems * _prod(w[1:])  # dgrad + wgrad
                byts = (2 * _prod(go) + 2 * _prod(x) + 2 * _prod(w)) * bpe
            else:
                (x, _), (w, _) = ts[0], ts[1]
                n, spatial = x[0], x[2:]
                out_elems = n * w[0] * _prod(_conv_out(spatial, w[2:], concrete, name))
                flops = 2.0 * out_elems * _prod(w[1:])
                byts = (_prod(x) + _prod(w) + out_elems) * bpe
            return ("conv", flops, float(byts), bpe)
        if any(k in low for k in ATTN_KEYS) and len(ts) >= 3:
            back = "backward" in low
            # a backward op's first tensor is the output's gradient: Q, K, V follow it
            (q, _), (k_, _), (v, _) = ts[1:4] if back and len(ts) >= 4 else ts[:3]
            if SEQ_FIRST_ATTN_RE.search(name):  # [B, S, H, D]: the flash / memory-efficient kernels' own ops
                b_h, nq, nkv = _prod(q[:-3]) * q[-2], q[-3], k_[-3]
            else:  # [B, H, S, D]: SDPA and cuDNN's ops
                b_h, nq, nkv = _prod(q[:-2]), q[-2], k_[-2]
            d, dv = q[-1], v[-1]
            flops = 2.0 * b_h * nq * nkv * (d + dv)
            byts = (_prod(q) + _prod(k_) + _prod(v) + b_h * nq * dv) * bpe
            if back:
                flops, byts = 2.5 * flops, 2.0 * byts
            return ("attention", flops, float(byts), bpe)
    except (IndexError, TypeError, ValueError):
        return ("other", None, None, bpe)
    sizes = [_prod(d) for d, _ in ts]
    in_bytes = sum(_prod(d) * b for d, b in ts)
    big = max(sizes)
    if name == "aten::copy_" and len(ts) >= 2:  # copy_(self, src): src read, self written, never read
        return ("elementwise", float(big), float(_prod(ts[1][0]) * ts[1][1] + _prod(ts[0][0]) * bpe), bpe)
    base = low.split("::")[-1].strip("_")
    if base in REDUCE_OPS or any(k in base for k in REDUCE_KEYS):
        out = big if any(k in low for k in SAME_OUT_KEYS) else 0
        return ("reduction", float(big), float(in_bytes + out * bpe), bpe)
    return ("elementwise", float(big), float(in_bytes + big * _out_bpe(name, ts)), bpe)


def io_bytes(dims: list, types: list, name: str = "", concrete: list | None = None,
             strides: list | None = None) -> tuple[float | None, float | None, float | None]:
    """(first tensor input, other tensor inputs, output) bytes: the elementwise-chain fusion accounting.

    The output has the first input's dtype (`_out_bpe`: bool for a comparison, the values' for `where`) and the
    largest input's element count (broadcast); an indexing op's first input is the part of its source it reads."""
    idx = index_io(name, dims, types, concrete, strides)
    if idx is not None:
        return (idx[1], idx[2], idx[3])
    ts = [(_prod(d), DTYPE_BYTES[t]) for d, t in zip(dims, types, strict=False) if _is_tensor(d, t)]
    if not ts:
        return (None, None, None)
    if name == "aten::copy_" and len(ts) >= 2:  # copy_(self, src): the input is src, self the output
        return (float(ts[1][0] * ts[1][1]), 0.0, float(ts[0][0] * ts[0][1]))
    first = float(ts[0][0] * ts[0][1])
    extra = float(sum(n * b for n, b in ts[1:]))
    out = float(max(n for n, _ in ts) * _out_bpe(name, ts))
    return (first, extra, out)


def op_costs(trace: Trace, op_ids: pl.Series | None = None) -> pl.DataFrame:
    """[op, category, flops, bytes, bpe] for the cpu_ops that launched GPU work.

    Input Dims are decoded with msgspec once per distinct (name, Input Dims, Input type) combo, never
    per event."""
    ids = trace.gpu["op"].drop_nulls().unique() if op_ids is None else op_ids
    def raw(col: str) -> pl.Expr:
        return pl.col(col) if col in trace.host.columns else pl.lit(None, pl.Categorical).alias(col)

    # the ops' rows by id (host order: ids ascending), not an is_in over every host event
    ops = by_id(trace.host, ids.unique().sort(), pl.col("i").alias("op"), "name", "input_dims", "input_type",
                raw("concrete"), raw("strides"))
    ops = ops.filter(pl.col("op").is_not_null()) if ops["op"].null_count() else ops
    ops = ops.with_columns(concrete=pl.when(pl.col("name").is_in([*CONV_ARGS, *INDEX_OPS])).then("concrete"),
                           strides=pl.when(pl.col("name").is_in(list(INDEX_OPS))).then("strides"))
    key = ["name", "input_dims", "input_type", "concrete", "strides"]
    combos = pick(ops, *key).unique()
    rows = []
    for name, dims_b, types_b, conc_b, str_b in combos.iter_rows():  # distinct shapes, not events
        try:
            dims = _dims_dec.decode(dims_b) if dims_b else []
            types = _dims_dec.decode(types_b) if types_b else []
            concrete = _dims_dec.decode(conc_b) if conc_b else None
            strides = _dims_dec.decode(str_b) if str_b else None
        except msgspec.DecodeError:
            dims, types, concrete, strides = [], [], None, None
        # each value the shape a profiler writes, else left out: lists, dtype names as strings
        dims = dims if isinstance(dims, list) else []
        types = [t if isinstance(t, str) else None for t in types] if isinstance(types, list) else []
        concrete = concrete if isinstance(concrete, list) else None
        strides = strides if isinstance(strides, list) else None
        try:
            cost = (*op_cost(name, dims, types, concrete, strides), *io_bytes(dims, types, name, concrete, strides))
        except (TypeError, ValueError, KeyError, IndexError, OverflowError, msgspec.DecodeError):
            # a value of an odd shape deeper in the args (a scalar for a list, a 5000-digit size): no estimate
            cost = (None, None, None, None, None, None, None)
        rows.append((name, dims_b, types_b, conc_b, str_b, *cost))
    raw = pl.Categorical  # (the model's raw-text columns: the join below matches their codes)
    costs = pl.DataFrame(rows, schema={"name": pl.String, "input_dims": raw, "input_type": raw,
                                       "concrete": raw, "strides": raw, "category": pl.String,
                                       "flops": pl.Float64,
                                       "bytes": pl.Float64, "bpe": pl.Float64, "in0_bytes": pl.Float64,
                                       "extra_bytes": pl.Float64, "out_bytes": pl.Float64}, orient="row")
    return ops.join(costs, on=key, how="left", nulls_equal=True).select(
        "op", pl.col("name").alias("op_name"), "category", "flops", "bytes", "bpe", "in0_bytes", "extra_bytes",
        "out_bytes")


def peak_expr(spec: Spec) -> pl.Expr:
    """FLOP/s of the math unit a `kernel_bound` row's FLOPs ran on: the 16-bit Tensor-Core peak for <= 2-byte
    operands, TF32's for FP32 operands of an op that launched a TF32 kernel (`tf32`), else FP32's."""
    return (pl.when(pl.col("bpe") <= 2).then(pl.lit(spec.peak_flops(2))).when(pl.col("tf32").fill_null(False))
            .then(pl.lit(spec.tf32_tflops * 1e12)).otherwise(pl.lit(spec.peak_flops(4))))


def kernel_bound(trace: Trace, spec: Spec | None = None) -> pl.DataFrame:
    """One row per compute kernel: [i, op, op_name, category, flops, bytes, bpe, intensity, bound, source,
    in0_bytes, extra_bytes, out_bytes, tf32].

    An op's FLOPs and bytes are split over the kernels it launched by duration. `bound` is 'compute' or
    'memory' (roofline when shapes exist, `source = 'shapes'`; kernel name otherwise, `source = 'name'`).
    `tf32`: the op launched a TF32 Tensor-Core kernel (`TF32_KERNEL_RE`; every kernel of the op, its layout
    transforms included), so its FP32 FLOPs ran at the TF32 peak (`peak_expr`).
    """
    spec = spec or trace_spec(trace.meta)
    k = omit(pick(trace.gpu, "i", "name", "op", "dur", "kind").filter(pl.col("kind") == "compute"), "kind")
    if k.height == 0:
        return pl.DataFrame(schema={"i": pl.UInt32, "op": pl.UInt32, "op_name": pl.String, "category": pl.String,
                                    "flops": pl.Float64, "bytes": pl.Float64, "bpe": pl.Float64,
                                    "intensity": pl.Float64, "bound": pl.String, "source": pl.String,
                                    "in0_bytes": pl.Float64, "extra_bytes": pl.Float64, "out_bytes": pl.Float64,
                                    "tf32": pl.Boolean})
    costs = op_costs(trace, dropnull(k["op"]).unique())
    causal = sdpa_causal(trace)
    if causal != 1.0:  # a causal SDPA call computes only the blocks on and below the diagonal
        costs = costs.with_columns(flops=pl.when(pl.col("category") == "attention").then(pl.col("flops") * causal)
                                   .otherwise(pl.col("flops")))
    nums = ("flops", "bytes", "bpe", "in0_bytes", "extra_bytes", "out_bytes")
    if all(costs[c].null_count() == costs.height for c in nums):
        # no op with shapes (record_shapes off): the costs are null literals, not a column of nulls per kernel
        # held with the cached frame (10 M tiny events: 180 MB), and nothing to split over the kernels
        k = k.join(costs.select("op", "op_name", "category"), on="op", how="left").with_columns(
            [pl.lit(None, pl.Float64).alias(c) for c in nums])
    else:
        share = (pl.col("dur").cast(pl.Float64) / pl.col("dur").sum().over("op").cast(pl.Float64)).fill_nan(None)
        nker = pl.len().over("op").cast(pl.Float64)
        share = pl.when(pl.col("op").is_null()).then(None).otherwise(share.fill_null(1.0 / nker))
        k = k.lazy().join(costs.lazy(), on="op", how="left").with_columns(_share=share).with_columns(
            *[pl.col(c) * pl.col("_share") for c in ("flops", "bytes", "in0_bytes", "extra_bytes", "out_bytes")]
        ).collect(**CHAIN)
    bw = spec.bw
    tf32 = contains(k, TF32_KERNEL_RE).fill_null(False)
    # (the ops that launched one, looked up: no window over every kernel)
    ops = k.lazy().filter(tf32 & pl.col("op").is_not_null()).select(pl.col("op").unique()).collect(**CHAIN)["op"]
    peak = peak_expr(spec)
    by_shape = pl.when(pl.col("flops") / peak >= pl.col("bytes") / bw).then(pl.lit("compute")).otherwise(pl.lit("memory"))
    by_name = pl.when(contains(k, COMPUTE_KERNEL_RE)).then(pl.lit("compute")).otherwise(pl.lit("memory"))
    has = pl.col("flops").is_not_null() & pl.col("bytes").is_not_null() & (pl.col("bytes") > 0)
    return k.lazy().with_columns(tf32=tf32 | pl.col("op").is_in(members(ops)).fill_null(False)).with_columns(
        intensity=pl.when(has).then(pl.col("flops") / pl.col("bytes")),
        bound=pl.when(has).then(by_shape).otherwise(by_name),
        source=pl.when(has).then(pl.lit("shapes")).otherwise(pl.lit("name")),
    ).select("i", "op", "op_name", "category", "flops", "bytes", "bpe", "intensity", "bound", "source",
             "in0_bytes", "extra_bytes", "out_bytes", "tf32").collect(**CHAIN).pipe(_nulls_as_constants)


def _nulls_as_constants(k: pl.DataFrame) -> pl.DataFrame:
    """`k` with each all-null column a null literal (no buffer): the costs of kernels whose ops have no shapes
    beside some that have (on the 10 M tiny-event trace `bpe`: 26 MiB, held with the cached frame to the layer
    table)."""
    floats = [c for c, t in k.schema.items() if t.is_float()]
    # (counted by a query: reading a constant column by name would fill it, `frames.column`)
    nulls = k.select(pl.col(floats).null_count()).row(0) if floats and k.height else ()
    lits = [pl.lit(None, k.schema[c]).alias(c) for c, n in zip(floats, nulls, strict=True) if n == k.height]
    return k.with_columns(lits) if lits else k
