"""What a GPU kernel is for kernel fusion: pointwise, reduction, or work a fuser cannot merge with its neighbours.

A fuser (Inductor) merges pointwise ops, and pointwise producers into one reduction, into one generated kernel.
It does not fuse across a sort or scan of a library (cub), a scatter that accumulates with atomics (embedding
backward, `index_put_(accumulate=True)`, `scatter_add_`), a multi-tensor launch (foreach ops, fused optimizers: one
kernel over many tensors already), a GEMM / convolution / attention library kernel, a collective, a copy or a
memset engine operation. A kernel's class comes from its name (the library's kernel families) and from the ATen op
that launched it (the roofline's op category), the non-fusible families first.
"""

from __future__ import annotations

import polars as pl

from .features import FUSED_OPT_KERNEL_RE, MULTI_TENSOR_KERNEL_RE
from .names import contains
from .roofline import COMPUTE_KERNEL_RE

POINTWISE, REDUCTION, OTHER = "pointwise", "reduction", "other"

#: sorts, scans, selections and unique of a library (cub, thrust, ATen's sort kernels): a different algorithm,
#: never part of a generated pointwise/reduction kernel
SORT_KERNEL_RE = (
    r"(?i)cub::|thrust::|radix_?sort|RadixSort|DeviceScan|DeviceSelect|DeviceSegmented|unique_by_key|"
    r"bitonic|segmented_?sort|sort_kernel|sortKeyValue"
)
#: scatters that accumulate with atomics, and the embedding-backward kernels built around a sort
SCATTER_KERNEL_RE = (
    r"(?i)indexing_backward|index_put|scatter_add|embedding_backward|krn_partial|compute_grad_weight|"
    r"sum_and_scatter|compute_num_of_partial|atomic"
)
#: ops whose kernels are sorts or accumulating scatters whatever their names (their zero-fill kernel included)
NON_FUSIBLE_OP_RE = (
    r"^aten::(embedding_dense_backward|embedding_backward|_embedding_bag|_?sort|argsort|msort|topk|"
    r"_?unique|unique_consecutive|_unique2|index_put_|_index_put_impl_|index_add_|index_reduce|"
    r"scatter_add_?$|scatter_reduce|put_|bincount|histc|nonzero|masked_select|randperm|multinomial|"
    r"_foreach_|_fused_|_amp_)"
)
#: scans Inductor generates itself (`tl.associative_scan`): a cub scan kernel of these ops is a reduction
SCAN_OP_RE = r"^aten::(cumsum|cumprod|logcumsumexp|_logcumsumexp)$"
MULTI_TENSOR_RE = f"{MULTI_TENSOR_KERNEL_RE}|{FUSED_OPT_KERNEL_RE}"
#: reduction kernel families (ATen, cuDNN batch norm, Inductor's reduction / persistent-reduction kernels)
REDUCTION_KERNEL_RE = (
    r"(?i)reduce_kernel|ReduceOp|triton_red_|triton_per_|softmax|layer_?norm|GammaBeta|batch_?norm|"
    r"bn_fw|bn_bw|group_?norm|rms_?norm|nll_loss|welford|_pool_|pool2d|pool3d"
)
#: normalizations whose statistics span the batch (and the spatial extent) of each channel or group — batch, group
#: and instance norm in training, forward and backward: more elements than one block holds, so a fused kernel
#: reads its inputs twice (Inductor: a reduction kernel for the statistics, then a pointwise one); their inference
#: kernels (running statistics: pointwise) are not
TWO_PASS_NORM_OP_RE = r"(?i)batch_norm|group_norm|instance_norm"
TWO_PASS_NORM_INFERENCE_RE = r"(?i)infer|_inf_|no_training"
#: pointwise kernel families (ATen TensorIterator kernels, cat, gathers, RNG, Inductor's pointwise kernels)
POINTWISE_KERNEL_RE = (
    r"(?i)elementwise|vectorized_|unrolled_|triton_poi_|pointwise|fill|copy_kernel|CatArrayBatched|"
    r"gather_kernel|indexSelect|triu_tril|dropout|distribution_"
)


def kernel_class(g: pl.DataFrame) -> pl.Expr:
    """`pointwise`, `reduction` or `other` per row of `g` (columns `kind`, `name`: the kernel's, `op_name`: the
    launching op's or null, `category`: the roofline's op category or null). Non-fusible kernels (sorts, scans
    outside cumsum, accumulating scatters, multi-tensor, GEMM/conv/attention, collectives, copies, memsets, and
    kernels of no known family launched by no ATen op) are `other`."""
    cat = pl.col("category").fill_null("")
    op = pl.col("op_name").cast(pl.String).fill_null("")
    scan_op = op.str.contains(SCAN_OP_RE)
    non_fusible = (
        (pl.col("kind") != "compute")
        | cat.is_in(["gemm", "conv", "attention"])
        | op.str.contains(NON_FUSIBLE_OP_RE)
        | (contains(g, SORT_KERNEL_RE) & ~scan_op)
        | contains(g, SCATTER_KERNEL_RE)
        | contains(g, MULTI_TENSOR_RE)
        # a library compute kernel (cuBLAS split-K reduce, cuDNN) unless its op is a norm (cuDNN batch norm)
        | (contains(g, COMPUTE_KERNEL_RE) & (cat != "reduction"))
    ).fill_null(True)
    aten = op.str.starts_with("aten::")
    triton_poi = pl.col("name").str.starts_with("triton_poi_").fill_null(False)  # its name may hold "softmax"
    reduction = (contains(g, REDUCTION_KERNEL_RE) | (cat == "reduction") | scan_op).fill_null(False)
    pointwise = (contains(g, POINTWISE_KERNEL_RE) | ((cat == "elementwise") & aten)).fill_null(False)
    return (
        pl.when(non_fusible)
        .then(pl.lit(OTHER))
        .when(triton_poi)
        .then(pl.lit(POINTWISE))
        .when(reduction)
        .then(pl.lit(REDUCTION))
        .when(pointwise)
        .then(pl.lit(POINTWISE))
        .otherwise(pl.lit(OTHER))
    )
