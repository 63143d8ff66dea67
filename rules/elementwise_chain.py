"""TV201 elementwise-chain: runs of memory-bound pointwise kernels (and the reduction they feed) that could be one kernel.

## What it detects
Runs of >= `min_kernels` consecutive kernels on one stream within one step that a fuser (Inductor) can turn into
one generated kernel. Each kernel has a class, from its name (the library's kernel family) and from the ATen op
that launched it (`traceview/analyses/fusible.py`):

| class | kernels | in a chain |
|---|---|---|
| pointwise | ATen `elementwise_kernel` / `vectorized_elementwise_kernel` / `unrolled_elementwise_kernel` (arithmetic, casts and copies, `fill_`), `cat`, gathers (`index`, `index_select`, `gather`, `embedding`), RNG, Inductor `triton_poi_*` | yes |
| reduction | `reduce_kernel` (sum, mean, max, norms), softmax / log_softmax, layer / batch / group / RMS norm, `nll_loss`, pooling, `cumsum`'s scan, Inductor `triton_red_*` / `triton_per_*` | yes, as its last kernel |
| sort | cub / thrust radix sort, scan, select, unique (embedding backward, `sort`, `unique`, `nonzero`) | no: splits the run |
| scatter | accumulating scatters and their helpers (`embedding_dense_backward`, `index_put_`, `index_add_`, `scatter_add_`) | no |
| multi-tensor | `multi_tensor_apply_kernel`, foreach and fused optimizers (`_foreach_*`, `_fused_*`): one launch over many tensors already, the unfused-optimizer rule's business | no |
| optimizer step | any kernel launched inside an `Optimizer.step#…` span, single-tensor updates included: the unfused-optimizer rule's (its fix is a fused or foreach optimizer, not a compiled chain) | no |
| DDP reducer | kernels launched inside DDP's reducer ops (`torch::distributed::reducer::mul_out`, `…ddp.reducer::copy_bucket_to_grad`: the gradient bucket copies and the division by the world size), launched from C++ in DDP's autograd hooks: no compiler fuses them with the model's kernels (accumulation-sync's, when they repeat per micro-batch) | no |
| library compute | GEMM / convolution / attention (cuBLAS incl. its split-K reduce, cuDNN, CUTLASS, flash), collectives (NCCL), memcpy / memset | no |
| unknown | a kernel of no known family launched by no ATen op (a custom extension: opaque to a fuser) | no |

Runs split at every kernel not in a chain class. A reduction ends its chain: Inductor fuses a reduction's
pointwise producers into it, but two reductions in a row (log_softmax then nll_loss) are two kernels compiled
too, so the kernels after a reduction start the next chain. Kernels of a materialized attention (the
materialized-attention rule's) split a run too. Chains with the same op sequence on the same stream are one
finding; `count` is the number of chains.

## Why it is slow
Each eager elementwise op reads its whole input from HBM and writes its whole output back. A chain of k
such kernels on a tensor of B bytes moves about 2·k·B; one fused kernel reads the first input once (plus any
distinct extra inputs) and writes the last output once, about 2·B (for `relu(x + b)` on an M x N tensor of
s-byte elements: 4·M·N·s bytes eager, 2·M·N·s fused). The kernels are bandwidth-bound, so time scales with
bytes moved.

## How to fix
Let the compiler fuse the chain: `torch.compile` (Inductor emits one Triton kernel per chain: pointwise ops
and the reduction they feed). Use fused or epilogue forms: `F.linear(x, w, b)` / `addmm` folds the bias into
the GEMM epilogue, fused activations (`_addmm_activation`), fused norms/softmax. Hand-write a Triton kernel
for a hot custom chain. A chain of kernels that are already Triton kernels is info: something (a graph break,
a fallback op) keeps them apart.

The saving prices the chains' fusion: their kernels, and the launches of the ops fused away. Compiling the whole
model does more on the host: the eager dispatch and Python of every op Inductor compiles go, and its wrapper
launches each kernel it keeps (about 1.5 eager ops' host time a kernel, measured: `compile_blocks_h100.ndjson`);
Inductor keeps 0.54-0.77 times the kernels the chains leave (its fusion reaches into reductions, norms and GEMM
epilogues). Where the host holds part of the step (the GPU busy for less than `fixes.DEVICE_HELD` of the
unprofiled step) the fix text says so, with what the whole model compiled saved against this estimate on eight
training models (`COMPILE_RATIO`: 0.74 to 2.18 times, 1.34 at the median; docs/predictions.md).

## Evidence
Per chain pattern: the kernels and ops in order, kernels per chain, bytes moved per chain (from the
launching ops' `Input Dims`/`Input type`: Σ inputs + output per kernel, TraceLens formulas), the fused
bytes (first input + distinct extra inputs + last output; for a chain that ends in a reduction the last output is
counted at its input's size, an upper bound: the saving is a lower one), the achieved bandwidth vs the device's peak
(spec table by `deviceProperties` name), the costliest occurrence's time window and stream. Savings =
chain time − fused time, where fused time = chain time × fused bytes / chain bytes, but at least the
shortest kernel of the chain (a fused kernel still costs one launch). A kernel reads an earlier kernel's output
(one of the `LINK_WINDOW`, 16, before it) only where its first input and that output are within a dtype change of
each other in bytes (`LINK_BYTES_RATIO`, 8: one to eight bytes an element; checked where the kernels are their ops'
only ones, so the bytes are their own tensors'): otherwise (BatchNorm's `num_batches_tracked += 1`, a 0-dim tensor,
before its normalization) the fused kernel still reads that input, and writes an output no later kernel reads. A chain that ends in a batch, group or
instance norm in training reads its inputs twice fused (the statistics span the whole batch of each channel, more
than one block holds: Inductor emits a reduction kernel, then a pointwise one), so its fused bytes are
2 × (inputs) + output: `silu_backward → cudnn_batch_norm_backward` saves nothing (EfficientNet-B0, batch 64,
torch.compile'd: the step measured 2.8 ms *slower*, where counting one pass predicted 13 ms saved). Without shapes
the fallback keeps the chain's longest kernel (k equal kernels: (k − 1)/k of the chain time saved). Reported when the pattern's savings reach `min_savings_pct`.
The eager kernels' bandwidth is their own, not an L2 effect a fused kernel would lose: on an H200 ATen's kernels
ran at 4.1 TB/s with 32 MiB intermediates (which fit its L2) as with 128 MiB ones; Inductor's fused kernel ran at
3.0–3.3 TB/s, so the fused time is a low estimate by up to a quarter. `fix_transform` also takes the launches of
the 2nd..kth ops off the host and keeps the first op as the fused kernel's launch, and pays torch.compile's own
call, which no eager trace shows (`COMPILED_CALL_OPS`, measured on an H200 host by
`collectors/examples/compile_call_cost.py`: Dynamo's guards, the AOT and Inductor wrappers and a launch cost 5.3
eager pointwise ops a forward call, 38.8 µs against 7.3; a training graph's backward call 40 more): once a step
on the step's thread (the forward graph) and once on another thread holding chains (autograd's backward), in
units of the trace's own eager op (`overhead.eager_op_host_ns`). On a host-bound step that call decides the
saving: the 8-op chain on 8 MiB saves 0.011 ms compiled (0.033 replayed), on 32 MiB 0.034 (0.063); on 128 MiB,
device-bound, 0.376 (0.395). Nothing is added where the trace already runs compiled regions.

## Options
- `min_kernels` (2): shortest run reported (two consecutive kernels are already one round trip too many).
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding — TraceLens agent MIN_IMPACT_SCORE (2 %).
- `moderate_pct` (3.0): savings share at which a finding is a warning — XProf moderate threshold.
- `high_pct` (15.0): savings share at which it is an error — XProf high threshold.

## References
- TraceLens perf models (unary/binary elementwise bytes) and `kernel_fusion_analysis.py` (fused ≈ first input + last output) — https://github.com/AMD-AGI/TraceLens.
- HTA frequent CUDA kernel sequences (fusion hints) — https://github.com/facebookresearch/HolisticTraceAnalysis.
- Measured on an H200: `torch.compile` ran an 8-op elementwise chain 5.2× faster than eager (one Triton kernel).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np
import polars as pl

from traceview.analyses.attention import score_op_ids
from traceview.analyses.classify import sync_calls
from traceview.analyses.features import Features
from traceview.analyses.fixes import DEVICE_HELD
from traceview.analyses.fusible import (
    MULTI_TENSOR_RE,
    OTHER,
    REDUCTION,
    TWO_PASS_NORM_INFERENCE_RE,
    TWO_PASS_NORM_OP_RE,
    kernel_class,
)
from traceview.analyses.intervals import merge
from traceview.analyses.overhead import eager_op_host_ns
from traceview.analyses.param_work import param_sized
from traceview.analyses.replay import Transform
from traceview.analyses.rowid import join_by_id
from traceview.analyses.whatif import EMPTY, shrink_kernels
from traceview.analyses.windows import host_step_of, step_of
from traceview.engine import SMALL_ROWS
from traceview.evidence import Meta, StepSpan
from traceview.frames import dropnull, members, omit, pick
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, gpu_busy_per_step_ns

CODE = "TV201"
NAME = "elementwise-chain"
CLASS = "gpu_memory"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "Chain of memory-bound elementwise kernels could be fused"
OPTIONS = {
    "min_kernels": Option(2, "shortest chain reported (kernels)"),
    "min_savings_pct": Option(2.0, "TraceLens agent MIN_IMPACT_SCORE: smallest savings worth a finding (% of step time)"),
    **XPROF_SEVERITY,
}
FIX = ("Each kernel of this chain reads its whole input from HBM and writes its whole output back, so the chain "
       "moves about 2·k times the tensor while one fused kernel would read it once and write it once. Fuse it: "
       "torch.compile emits one Triton kernel per chain; use epilogue/fused forms (F.linear with bias instead of "
       "mm + add, fused activations, fused norms); or write a Triton kernel.")


#: kernels Inductor/Triton generated (by kernel name, or by the op name a compiled graph gives them), and kernels a
#: compiled graph runs (AOTAutograd's CompiledFunction: ATen kernels Inductor left inside the graph)
COMPILED_RE = r"^triton_|^CompiledFunction"
#: multi-tensor kernels (foreach ops, fused optimizers): never in a chain (analyses/fusible.py); the unfused-optimizer
#: rule's business
MULTI_TENSOR_KERNEL_RE = MULTI_TENSOR_RE


def kernel_kinds(ops: list[str], kernels: list[str]) -> dict[str, list[int]]:
    """The positions of a chain's kernels by what they are: `compiled` (Triton, or a compiled graph's), `eager` (the
    rest: one ATen kernel per op). `ops[i]` is the op that launched `kernels[i]` ("?" when unknown)."""
    ser_k, ser_o = pl.Series(kernels, dtype=pl.String), pl.Series(ops, dtype=pl.String)
    compiled = (ser_k.str.contains(COMPILED_RE) | ser_o.str.contains(COMPILED_RE)).to_list()
    return {"compiled": [i for i, v in enumerate(compiled) if v], "eager": [i for i, v in enumerate(compiled) if not v]}


def _names(ops: list[str], idx: list[int], n: int = 4) -> str:
    seen = list(dict.fromkeys(ops[i].replace("aten::", "") for i in idx if ops[i] != "?"))
    return ", ".join(seen[:n]) + (" …" if len(seen) > n else "")


def fix_for(f: Features, ops: str, kernels: list[str] | None = None, note: str = "") -> str:
    """The fix, conditioned on what the chain's kernels are and what the trace already does: Triton kernels are
    already compiled, and only the others are eager kernels. `note` (`compile_note`) follows the advice to compile
    eager kernels, and only it."""
    op_list = ops.split(" → ")
    kinds = kernel_kinds(op_list, kernels if kernels is not None else op_list)
    k = len(op_list)
    if len(kinds["compiled"]) == k:
        return ("These kernels are already compiled (Triton kernels, or kernels of a compiled graph), but Inductor "
                "emitted them separately: something "
                "between them stops fusion — a graph break, a reduction or a mutation Inductor will not fuse "
                "across, or an op it falls back to eager for. Check TORCH_LOGS=graph_breaks,fusion (or "
                "torch._dynamo.explain) and remove the break, or write the fused kernel by hand (Triton).")
    if kinds["compiled"] or f.compiled or f.triton_kernels:
        n_eager = len(kinds["eager"])
        which = "these eager kernels run" if n_eager == k else f"{n_eager} of these {k} kernels are eager and run"
        return (f"The step already uses torch.compile, but {which} outside the compiled regions "
                f"({_names(op_list, kinds['eager'])}: a graph break, or code left uncompiled): extend the compiled "
                "region over them (remove the graph break, compile the enclosing function), or use fused forms "
                "(F.linear with bias instead of mm + add, fused activations, fused norms).")
    return FIX + note


#: measured saving of `torch.compile(model)` over elementwise-chain's priced saving, on the training twins compiled
#: whole whose fix is compile alone (sample_traces/ab_traced: GPT-2 at batch 8 with a padded vocabulary and at
#: batch 1, BERT at 512 and at 64 tokens, GPT-NeoX, ELECTRA, Qwen2, Llama; docs/predictions.md): lowest, median,
#: highest
COMPILE_RATIO = (0.74, 1.34, 2.18)


def compile_note(ctx: RuleContext) -> str:
    """What the saving leaves out where the host holds part of the step: compiled whole, the model also loses the
    eager dispatch of the ops Inductor does not fuse and launches each kernel it keeps from its wrapper, which the
    chains' fusion does not price (docs/predictions.md, "The compiled whole model"). Empty where the GPU is busy for
    DEVICE_HELD of the unprofiled step or more (the host's cost is then off the critical path); `fix_for` adds it to
    the eager advice only (a trace that compiles already gets its own)."""
    busy = gpu_busy_per_step_ns(ctx.profiler)
    step = float(ctx.profiler.get("unprofiled_step_ns") or 0.0)
    if busy <= 0 or step <= 0 or busy >= DEVICE_HELD * step:
        return ""
    lo, mid, hi = COMPILE_RATIO
    return (f" This saving prices the chains' fusion alone. Compiled whole, the model also loses the eager dispatch "
            f"and Python of every op Inductor compiles, and its wrapper launches each kernel it keeps: with the GPU "
            f"idle {100 * (1 - busy / step):.0f} % of this step without the profiler, that moves the saving either "
            f"way (on eight training models compiled whole, {lo:g} to {hi:g} times this estimate, {mid:g} at the "
            f"median).")


def info_only(ops: str, kernels: list[str]) -> bool:
    """A chain whose kernels are all compiled already (no eager kernel left to fuse): nothing to apply here, so the
    finding is info."""
    op_list = ops.split(" → ")
    return not kernel_kinds(op_list, kernels)["eager"]


#: GPU rows from which `chains` counts the fusible kernels first, from a few columns (below, the frame of every
#: kernel is small, and the count would be a second pass over it)
PRECOUNT_ROWS = 1 << 18


def _fusible_expr(cls: pl.Expr, opt: pl.Expr | pl.Series, scores: pl.Series) -> pl.Expr:
    """Whether a kernel is fusible into a chain: of a chain class (`cls`, `fusible.kernel_class`), not a
    materialized attention's (its op among `scores`), not an optimizer's per-parameter update (`opt`)."""
    return ((cls != OTHER) & ~pl.col("op").is_in(members(scores)).fill_null(False) & ~opt).fill_null(False)


def _fusible(trace, kb: pl.DataFrame, scores: pl.Series, lo: int, hi: int) -> int:
    """How many kernels in [lo, hi) `chains` takes as fusible (its `_elem`), from the columns that decide it alone
    (a host-bound trace's millions of kernels, none of them fusible, build no frame of every kernel's columns)."""
    g = trace.gpu[["i", "name", "kind", "ts", "launch_ts", "launch_tid"]].filter(
        pl.col("kind").is_in(["compute", "comm", "memcpy", "memset"]) & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
    g = g.join(kb.select("i", "op", "op_name", "category"), on="i", how="left")
    return int(g.select(_fusible_expr(kernel_class(g), param_sized(trace, g), scores).sum()).item())


def _candidates(g: pl.DataFrame) -> int:
    """How many rows of `g` (`kind`, the roofline's `category`) `kernel_class` could class other than `other`:
    compute kernels outside GEMM, conv and attention ops (a bound on `chains`' fusible kernels from two columns,
    without the class regexes)."""
    maybe = (pl.col("kind") == "compute") & ~pl.col("category").fill_null("").is_in(["gemm", "conv", "attention"])
    return int(g.select(maybe.fill_null(False).sum()).item())


def _no_chain(g: pl.DataFrame) -> pl.DataFrame:
    """`chains`' frame of no kernel (its columns, from `g`'s)."""
    return g.head(0).select(
        pl.lit(None, pl.UInt32).alias("chain"), pl.lit(None, pl.Int64).alias("step"), "device", "stream", "i",
        "name", "op_name", "ts", "end", "dur", "bytes", "in0_bytes", "extra_bytes", "out_bytes", "sole",
        pl.lit(None, pl.Int64).alias("pos"), pl.lit(None, pl.UInt32).alias("k"))


def chains(trace, steps: pl.DataFrame, kb: pl.DataFrame, min_kernels: int = 2) -> pl.DataFrame:
    """One row per kernel that belongs to a chain: [chain, step, stream, i, name, op_name, ts, end, dur, bytes,
    in0_bytes, extra_bytes, out_bytes, sole, pos, k]."""
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    scores = score_op_ids(trace)
    if trace.gpu.height >= PRECOUNT_ROWS and _fusible(trace, kb, scores, lo, hi) < min_kernels:
        hi = lo  # fewer fusible kernels than one chain needs: no chain (the frame below of no kernel: its columns)
    g = trace.gpu[["i", "name", "kind", "ts", "end", "dur", "launch_ts", "launch_tid", "device", "stream",
                   "bytes"]].filter(
        pl.col("kind").is_in(["compute", "comm", "memcpy", "memset"]) & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
    # `bytes` of the gpu frame is the memcpy size: take the roofline's bytes instead
    # `sole`: the kernel is its op's only one, so its in/out bytes are its own tensors' (an op's bytes are shared
    # over its kernels by duration otherwise)
    g = omit(g, "bytes").join(kb.select("i", "op", "op_name", "category", "bytes", "in0_bytes", "extra_bytes",
                                       "out_bytes", sole=pl.len().over("op") == 1), on="i", how="left")
    if trace.gpu.height < SMALL_ROWS and _candidates(g) < min_kernels:  # (no kernel class's regex compiled)
        return _no_chain(g)
    # the kernels of a materialized attention are the attention rule's: one fused attention kernel replaces
    # them, not a fused elementwise kernel (they break a chain like a GEMM)
    g = g.with_columns(_cls=kernel_class(g), _opt=param_sized(trace, g))
    g = g.with_columns(_elem=_fusible_expr(pl.col("_cls"), pl.col("_opt"), scores), _red=pl.col("_cls") == REDUCTION)
    if int(g["_elem"].sum()) < min_kernels:  # fewer fusible kernels than one chain needs: no chain
        return _no_chain(g)
    with_launch = host_step_of(g.filter(pl.col("launch_ts").is_not_null()), steps, "launch_ts")
    no_launch = step_of(g.filter(pl.col("launch_ts").is_null()), steps)
    g = pl.concat([with_launch, no_launch], how="diagonal_relaxed").filter(pl.col("step").is_not_null())
    g = g.sort("device", "stream", "ts", maintain_order=True)  # (stable: 5x faster here, ties in input order)
    # runs numbered along the whole frame (a new stream starts a run: the rows come grouped by stream), so each
    # run is one integer key and the chains are numbered by it, in (device, stream, time) order
    new_stream = pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift()) for c in ("device", "stream"))
    # a reduction ends its chain: its pointwise producers fuse into it, the kernels after it start another
    brk = (~pl.col("_elem") | (pl.col("step") != pl.col("step").shift()).fill_null(True) | new_stream
           | pl.col("_red").shift().fill_null(False))
    g = g.with_columns(_run=brk.cast(pl.Int64).cum_sum()).filter(pl.col("_elem"))
    g = g.with_columns(_run_lengths_positions(g["_run"].to_numpy())).filter(pl.col("k") >= min_kernels)
    g = g.with_columns(chain=pl.col("_run").rank("dense"))
    return g.select("chain", "step", "device", "stream", "i", "name", "op_name", "ts", "end", "dur", "bytes",
                    "in0_bytes", "extra_bytes", "out_bytes", "sole", "pos", "k")


def _run_lengths_positions(run: np.ndarray) -> list[pl.Series]:
    """[k, pos]: the length of each row's run and its position in it, for run keys that come in contiguous runs
    (as `pl.len().over(run)` and `pl.int_range(pl.len()).over(run)`, without a per-group evaluation: ~15x)."""
    n = run.size
    starts = np.flatnonzero(np.r_[True, run[1:] != run[:-1]]) if n else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, n])
    return [pl.Series("k", np.repeat(lengths, lengths), pl.UInt32),
            pl.Series("pos", np.arange(n) - np.repeat(starts, lengths), pl.Int64)]


#: how far apart (in bytes) a kernel's first input and the previous kernel's output can be and still be one tensor:
#: a dtype change (1 to 8 bytes an element) at most; further apart, they are different tensors
LINK_BYTES_RATIO = 8.0
#: how many kernels back a consumer's producer is looked for
LINK_WINDOW = 16


def per_chain(ch: pl.DataFrame) -> pl.DataFrame:
    """One row per chain with its time, bytes, fused time and savings (see the module doc). `ch` as `chains`
    gives it: each chain's kernels together and in order, chains in order (a group keeps its rows' order: no
    sort by `pos` inside each group, no sort of the groups). A link is checked only between kernels whose bytes
    are their own (`sole`, where `ch` has it)."""
    own = pl.col("sole").fill_null(False) if "sole" in ch.columns else pl.lit(False)
    # checkable: this kernel and the one before it each their op's only one (their bytes their own tensors')
    ch = ch.with_columns(_chk=(own & own.shift().fill_null(False) & (pl.col("pos") > 0)))
    # a kernel reads an earlier kernel's output where its first input is within a dtype change of that output in
    # bytes: any of the LINK_WINDOW kernels before it (an unrelated small kernel may run between producer and
    # consumer; a window, not every pair: a chain of k kernels costs k x LINK_WINDOW comparisons, never k^2)
    read, used = pl.lit(False), pl.lit(False)
    for d in range(1, LINK_WINDOW + 1):
        prev = pl.col("out_bytes").shift(d)
        hit = ((pl.col("pos") >= d) & own & own.shift(d).fill_null(False)
               & (pl.max_horizontal(prev, "in0_bytes") <= LINK_BYTES_RATIO * pl.min_horizontal(prev, "in0_bytes"))
               ).fill_null(False)
        read, used = read | hit, used | hit.shift(-d).fill_null(False)  # (the producer: d rows up)
    ch = ch.with_columns(_read=read, _used=used)
    nxt_chk = pl.col("_chk").shift(-1).fill_null(False) & (pl.col("pos") < pl.col("k") - 1)
    op, name = pl.col("op_name").cast(pl.String).fill_null(""), pl.col("name").cast(pl.String)
    two_pass = (op.str.contains(TWO_PASS_NORM_OP_RE) & ~name.str.contains(TWO_PASS_NORM_INFERENCE_RE)
                & ~op.str.contains(TWO_PASS_NORM_INFERENCE_RE))
    ch = ch.with_columns(
        # a kernel that reads no earlier kernel's output reads its input from HBM fused too; an output no later
        # kernel reads is written (consecutive kernels, not producer and consumer: only the launch is saved)
        _unlinked=(pl.when(pl.col("_chk") & ~pl.col("_read")).then(pl.col("in0_bytes")).otherwise(0.0)
                   + pl.when(nxt_chk & ~pl.col("_used")).then(pl.col("out_bytes")).otherwise(0.0)),
        _two_pass=two_pass)
    per = ch.group_by("chain", maintain_order=True).agg(
        pl.col("step").first(), pl.col("device").first(), pl.col("stream").first(), pl.col("k").first(),
        pl.col("ts").min(), pl.col("end").max(), pl.col("dur").sum().alias("time"), pl.col("dur").min().alias("min_dur"),
        pl.col("dur").max().alias("max_dur"),
        pl.col("bytes").sum().alias("bytes"), pl.col("bytes").is_null().any().alias("_nob"),
        # fused kernel: first input + every distinct extra input + last output (+ unlinked inputs and outputs)
        (pl.col("in0_bytes").first() + pl.col("extra_bytes").fill_null(0).sum() + pl.col("_unlinked").sum()
         + pl.col("out_bytes").last()).alias("fused_bytes"),
        pl.col("out_bytes").last().alias("_out"), pl.col("_two_pass").last(),
        pl.col("op_name").fill_null("?").str.join(" → ").alias("ops"),
        pl.col("name").alias("kernels"), pl.col("i").alias("ids"))
    # a chain ending in a batch-wide normalization reads its inputs twice fused: statistics, then normalization
    per = per.with_columns(fused_bytes=pl.when(pl.col("_two_pass"))
                           .then(2.0 * pl.col("fused_bytes") - pl.col("_out")).otherwise(pl.col("fused_bytes")))
    known = ~pl.col("_nob") & (pl.col("bytes") > 0) & pl.col("fused_bytes").is_not_null()
    fused_time = pl.when(known).then(
        pl.max_horizontal(pl.col("time").cast(pl.Float64) * pl.col("fused_bytes") / pl.col("bytes"), pl.col("min_dur")))
    # without shapes: at least its longest kernel's time (k equal kernels: (k - 1)/k saved; a launch-sized
    # kernel before a large one: the launch)
    fused_time = fused_time.otherwise(pl.col("max_dur").cast(pl.Float64))
    per = per.with_columns(fused_time=pl.min_horizontal(fused_time, pl.col("time").cast(pl.Float64)), _known=known)
    per = per.with_columns(savings=pl.col("time") - pl.col("fused_time"))
    return omit(per, "_out", "_two_pass", "max_dur")


def _chains(ctx: RuleContext) -> pl.DataFrame:
    return ctx.once("chains", lambda: chains(ctx.trace, ctx.steps, ctx.kb, int(ctx.options["min_kernels"])))


def _per_chain(ctx: RuleContext) -> pl.DataFrame:
    """`per_chain` of the rule's chains, once (the check and the projection's `removes` both read it)."""
    return ctx.once("per_chain", lambda: per_chain(_chains(ctx)))


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """One fused kernel replaces each chain: the kernels shrink to the chain's fused share of their time
    (only where the GPU was the critical path, see analyses/whatif.py), and the idle gaps between them
    shrink by at most the host time of the ops fused away (k - 1 fewer dispatches and launches).
    The same for every finding of the rule: computed once."""
    return ctx.once("removes", lambda: _removes(ctx))


def _removes(ctx: RuleContext) -> pl.DataFrame:
    ch = _chains(ctx)
    if ch.height == 0:
        return EMPTY
    per = _per_chain(ctx).select("chain", (pl.col("fused_time") / pl.col("time")).alias("_r"))
    k = ch.join(per, on="chain").select("i", (pl.col("dur") * pl.col("_r")).cast(pl.Int64).alias("new_dur"))
    tails = shrink_kernels(ctx.trace, k, sync_calls(ctx.trace))
    # the gaps inside each chain, and the host time of the ops that launched its 2nd..kth kernels
    # `chains` gives each chain's kernels together, in order (pos 0, 1, ...): the previous row's end is the end of
    # the chain's previous kernel wherever pos > 0 (the only rows read below)
    g = ch.with_columns(_gts=pl.col("end").shift())
    g = join_by_id(g, "i", ctx.trace.gpu, pl.col("op").alias("_op"))
    g = join_by_id(g, "_op", ctx.trace.host, pl.col("dur").alias("_host"))
    g = g.filter(pl.col("pos") > 0).with_columns(_gap=(pl.col("ts") - pl.col("_gts")).clip(lower_bound=0))
    g = g.with_columns(_frac=pl.min_horizontal(pl.lit(1.0), pl.col("_host").fill_null(0).sum().over("chain")
                                               / pl.col("_gap").sum().over("chain")).fill_nan(0.0))
    gaps = g.filter(pl.col("_gap") > 0).select(ts=pl.col("_gts"), end=pl.col("_gts") + (pl.col("_gap") * pl.col("_frac")).cast(pl.Int64))
    return merge(pl.concat([tails, gaps.filter(pl.col("end") > pl.col("ts"))]))


class Evidence(msgspec.Struct, kw_only=True):
    kernels_per_chain: Annotated[int, Meta(description="kernels in the chain")]
    ops: Annotated[list[str], Meta(description="the ops that launched them, in order")]
    kernels: Annotated[list[str], Meta(description="the kernels' names, in order")]
    chains_per_step: Annotated[float, Meta(description="times the chain runs per step")]
    bytes_per_chain: Annotated[int | None, Meta(description="bytes the chain reads and writes (null: no shapes)")]
    gib_per_chain: Annotated[float | None, Meta(description="the same in GiB")]
    fused_bytes_per_chain: Annotated[int | None, Meta(description="bytes one fused kernel would move")]
    bytes_source: Annotated[str, Meta(description="where the byte counts come from")]
    chain_time_us: Annotated[float, Meta(description="the chain's device time over the analysed steps (µs)")]
    savings_of_chain_pct: Annotated[float | None, Meta(description="the saving as % of the chain's time")]
    achieved_bandwidth_gbps: Annotated[float | None, Meta(description="the chain's achieved memory bandwidth (GB/s)")]
    peak_bandwidth_gbps: Annotated[float, Meta(description="the device's peak memory bandwidth (GB/s)")]
    device: Annotated[str, Meta(description="the device the peak is of")]
    pct_of_peak_bandwidth: Annotated[float | None, Meta(description="achieved as % of the peak")]
    stream: Annotated[int | None, Meta(description="the chain's stream")]
    worst: Annotated[StepSpan, Meta(description="its longest run")]


def check(ctx: RuleContext) -> list[Finding]:
    opts, spec, window, steps = ctx.options, ctx.spec, ctx.window_ns, ctx.steps
    ch = _chains(ctx)
    if ch.height == 0:
        return []
    per = _per_chain(ctx)
    pats = (per.group_by("device", "stream", "ops", "k")
            .agg(pl.len().alias("count"), pl.col("time").sum(), pl.col("savings").sum(), pl.col("bytes").mean(),
                 pl.col("fused_bytes").mean(), pl.col("_known").all(), pl.col("step").unique().sort().alias("steps"),
                 # ties (equal savings, equal patterns) by time: the same answer whatever the event order
                 pl.col("chain").sort_by(["savings", "ts"], descending=[True, False]).first().alias("worst"),
                 pl.col("kernels").sort_by("ts").first(), pl.col("ids").explode().alias("ids"))
            .with_columns(pct=100.0 * pl.col("savings") / window)
            .filter(pl.col("pct") >= opts["min_savings_pct"]).sort(["savings", "ops"], descending=[True, False], maintain_order=True))
    out = []
    for p in pats.to_dicts():  # one per chain pattern: a handful
        w = per.filter(pl.col("chain") == p["worst"]).to_dicts()[0]
        bw = (p["bytes"] * p["count"] / (p["time"] / 1e9)) if p["_known"] and p["time"] else None
        ev = Evidence(
            kernels_per_chain=p["k"], ops=p["ops"].split(" → "), kernels=p["kernels"],
            chains_per_step=round(p["count"] / steps.height, 2),
            bytes_per_chain=round(p["bytes"]) if p["_known"] else None,
            gib_per_chain=round(p["bytes"] / 2**30, 3) if p["_known"] else None,
            fused_bytes_per_chain=round(p["fused_bytes"]) if p["_known"] else None,
            bytes_source="Input Dims" if p["_known"] else "unknown (no shapes): savings = the chain time less its longest kernel's",
            chain_time_us=round(p["time"] / 1000, 3),
            savings_of_chain_pct=round(100.0 * p["savings"] / p["time"], 2) if p["time"] else None,
            achieved_bandwidth_gbps=round(bw / 1e9, 1) if bw else None,
            peak_bandwidth_gbps=round(spec.bw / 1e9, 1), device=spec.name,
            pct_of_peak_bandwidth=round(100.0 * bw / spec.bw, 1) if bw else None,
            stream=p["stream"],
            worst=StepSpan(start_us=round(w["ts"] / 1000, 3), end_us=round(w["end"] / 1000, 3), step=w["step"]),
        )
        out.append(ctx.finding(
            title=f"{p['k']} elementwise kernels in a row ({' → '.join(o.replace('aten::', '') for o in p['ops'].split(' → ')[:6])}"
                  f"{' …' if p['k'] > 6 else ''}) could be one fused kernel",
            steps=p["steps"], count=p["count"], cost_ns=p["time"], savings_ns=p["savings"], evidence=ev,
            fix=fix_for(ctx.features, p["ops"], p["kernels"], compile_note(ctx)), kernel_ids=p["ids"],
            # a chain of Triton kernels is what torch.compile already produced: nothing to apply here (a graph
            # break or an unfusable op keeps them apart, the graph-break rules' business)
            severity="info" if info_only(p["ops"], p["kernels"]) else None))
    return out


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each chain takes the time of one kernel moving the chain's fused bytes
    at the achieved bandwidth (`per_chain`'s fused_time, on the chain's longest kernel, the others removed), and
    the host time of the ops fused away (the 2nd..kth launches) leaves the host path."""
    ch = _chains(ctx)
    if ch.height == 0:
        return None
    # the fused kernel is the chain's longest one, shortened to the fused time, the others removed (no time, no
    # device gap before them); the replay only ever shortens a kernel (transforms compose by the minimum), so
    # where the fused time exceeds the longest kernel's (a normalization's second pass) every kernel shrinks by
    # the chain's fused share instead
    per = _per_chain(ctx).select("chain", "fused_time", "time")
    k = ch.join(per, on="chain").with_columns(
        _top=pl.col("pos") == pl.col("pos").sort_by(["dur", "pos"], descending=[True, False]).first().over("chain"),
        _fits=pl.col("fused_time") <= pl.col("dur").max().over("chain"))
    k = k.with_columns(new=pl.when(pl.col("_fits"))
                       .then(pl.when(pl.col("_top")).then(pl.col("fused_time")).otherwise(0.0))
                       .otherwise(pl.col("dur") * pl.col("fused_time") / pl.col("time")).cast(pl.Int64))
    rest = dropnull(join_by_id(k.filter(pl.col("pos") > 0), "i", ctx.trace.gpu, pl.col("op").alias("_op"))["_op"])
    return Transform(NAME, gpu_dur=dict(zip(k["i"].cast(pl.Int64).to_list(), k["new"].to_list(), strict=True)),
                     host_removed=rest.cast(pl.Int64).unique().to_list(), host_cut=compiled_call_cut(ctx, ch))


#: host time of one call of a torch.compile'd graph, in units of one eager pointwise op's (both are Python and
#: dispatcher work on the same CPU, so the ratio carries from host to host): the forward graph's call — Dynamo's
#: cache lookup and guards, the AOT and Inductor wrappers, a launch — 5.3 ops (38.8 µs against 7.3 µs per eager
#: op, H200 host, torch 2.11); a training graph's backward call — AOT autograd's compiled backward and its
#: wrappers — 40 ops more (fwd + bwd 396 µs a call against the eager loop's 65 µs base:
#: collectors/examples/compile_call_cost.py, sample_traces/ab_traced/compile_call_cost_h200.ndjson)
COMPILED_CALL_OPS = {"forward": 5.3, "backward": 40.0}


def compiled_call_cut(ctx: RuleContext, ch: pl.DataFrame) -> dict[int, int]:
    """The host time the compiled call adds (a negative `host_cut`): once per step and thread holding chains —
    the step's own thread runs the forward graph, another (autograd's device thread) the backward one — on the
    op launching that thread's first chain kernel of the step, COMPILED_CALL_OPS of an eager op's unprofiled host
    time less the op itself (the op stays as the fused kernel's launch, which the call includes). None where the
    trace already runs compiled regions (their calls are paid already) or shows no eager op to scale by."""
    if ctx.features.compiled or ch.height == 0:
        return {}
    one = eager_op_host_ns(ctx.trace)
    if one <= 0:
        return {}
    first = join_by_id(ch.filter(pl.col("pos") == 0), "i", ctx.trace.gpu, pl.col("op").alias("_op"))
    first = join_by_id(first.drop_nulls("_op"), "_op", ctx.trace.host, pl.col("tid").alias("_tid"),
                       pl.col("ts").alias("_hts"))
    main = join_by_id(pick(ctx.steps, "step", "host_idx"), "host_idx", ctx.trace.host, pl.col("tid").alias("_main"))
    first = first.join(pick(main, "step", "_main"), on="step", how="left")
    first = first.sort("_hts").group_by("step", "_tid", maintain_order=True).first()
    ops = first.with_columns(
        _n=pl.when(pl.col("_tid") == pl.col("_main")).then(COMPILED_CALL_OPS["forward"])
        .otherwise(COMPILED_CALL_OPS["backward"]))
    return {int(op): -int((n - 1.0) * one) for op, n in zip(ops["_op"].to_list(), ops["_n"].to_list(), strict=True)}
