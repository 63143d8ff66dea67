"""TV105 decode-loop: an autoregressive decode loop launched op by op (no CUDA graphs) leaves the GPU idle.

## What it detects
A token-by-token decode loop (Hugging Face `generate`, a manual KV-cache loop) from the launching ops' shapes
(`record_shapes`): attention with one query position over a key/value length above one — `scaled_dot_product_
attention` (or its flash / efficient / cuDNN / math variants) with q `[B, H, 1, d]`, or a batched matmul
`[.., 1, d] x [.., d, L]` — called at least twice in the analysed steps (a growing cache shows one KV length per token, a static
cache one length throughout). Reported when the
steps are launch-bound (the classifier's `cpu_launch` time reaches `moderate_pct` of the analysed window) and no
CUDA graph is replayed (a graph-captured decode is the fix already applied).

## Why it is slow
Each decode step runs the whole model on one token per sequence: every layer's kernels are tiny (GEMVs over the
weights, attention over one query), far shorter than the several µs of Python, dispatch and launch each eager
op costs, so the GPU waits for the CPU on every kernel. A dynamic KV cache (`torch.cat` per token) also changes
shapes every step, which keeps `torch.compile` from capturing the step into one CUDA graph.

## How to fix
Use a static KV cache (preallocated to the maximum length, written in place) and capture the decode step with
CUDA graphs: Hugging Face `model.generate(..., cache_implementation="static")`, which transformers 4.50 and later
compile themselves (`GenerationConfig.compile_config`: do not also wrap `model.forward` in `torch.compile`, the two
together can fail with "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run", as
`sample_traces/user_programs4_h100/llama_generate`'s fixed twin did on torch 2.11), on older versions with
`model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)`; a manual loop:
preallocated K/V tensors updated with `index_copy_` and the step compiled with `mode="reduce-overhead"` (or
captured with `torch.cuda.CUDAGraph`). Batching more sequences per step (continuous batching) amortizes the
launches further.

## Evidence
Decode attention calls per step, the batch (B), the KV lengths seen (first, last, count), kernels per token, the
median kernel time against the median CPU time of the launching ops, the `cpu_launch` share, whether the step is
compiled. Savings are replayed (`fix_transform`): CUDA-graph replay of each token's model forward, the
launching ops and their launch calls inside it leave the host path (as TV101's model), device work unchanged: the
kernel fusion `torch.compile` adds is not counted. The forward is the token's decode attention calls (one per
layer) and as many layer periods around them; what the loop runs between forwards (sampling, logits processors,
stopping criteria, mask and position bookkeeping: Hugging Face `generate` keeps them eager around its compiled
forward) stays on the host.

## Options
- `moderate_pct` (3.0): `cpu_launch` share of step time at which a finding is a warning (XProf kernel-launch).
- `high_pct` (15.0): share at which it is an error.

## References
- Hugging Face transformers docs, "Static cache and torch.compile" (`cache_implementation="static"`).
- PyTorch docs, `torch.compile(mode="reduce-overhead")` (CUDA graphs), `torch.cuda.CUDAGraph`.
- gpt-fast (pytorch-labs): static KV cache + CUDA graphs for batch-1 decode.
- Measured on an H200 (unprofiled steps; replayed saving in brackets): a manual batch-1 decode loop with a
  torch.cat cache 151.9 ms, static cache in a CUDA graph 21.7 ms (125.4 ms predicted); HF GPT-2 generate
  dynamic 133.1 ms, cache_implementation="static" 62.5 ms (74.2: transformers still launches its loop's ops
  outside the graph): sample_traces/collected4.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.decoding import decode_calls
from traceview.analyses.replay import Transform
from traceview.analyses.rowid import by_id
from traceview.evidence import Meta
from traceview.ruleapi import Finding, RuleContext, xprof_severity

from . import launch_bound

CODE = "TV105"
NAME = "decode-loop"
CLASS = "cpu_launch"  # the classifier class whose time a fix of these findings removes
SEVERITY = "warning"
TITLE = "Token-by-token decode launched op by op: the GPU waits for the CPU on every kernel"
OPTIONS = {**xprof_severity("kernel-launch")}
FIX = (
    "Use a static KV cache and capture the decode step with CUDA graphs: model.generate(..., "
    'cache_implementation="static") with torch.compile(model.forward, mode="reduce-overhead").'
)
class KvLengths(msgspec.Struct, kw_only=True):
    """The KV-cache lengths the decode attention calls read."""

    first: Annotated[int, Meta(description="the shortest")]
    last: Annotated[int, Meta(description="the longest")]
    distinct: Annotated[int, Meta(description="distinct lengths (1: a static, preallocated cache)")]


class Evidence(msgspec.Struct, kw_only=True):
    decode_attention_calls_per_step: Annotated[float, Meta(description="one-token attention calls per step")]
    batch: Annotated[int, Meta(description="sequences decoded at once (largest batch)")]
    kv_lengths: Annotated[KvLengths, Meta(description="the KV-cache lengths they read")]
    tokens_per_step: Annotated[float | None, Meta(description="tokens decoded per step (null: static cache)")]
    static_kv_cache: Annotated[bool, Meta(description="one KV length throughout: a preallocated cache")]
    kernels_per_token: Annotated[
        float | None, Meta(description="kernels launched per token (null: static cache)")
    ]
    median_kernel_us: Annotated[float | None, Meta(description="median kernel time (µs)")]
    median_launching_op_cpu_us: Annotated[
        float | None, Meta(description="median host time of the ops that launch them (µs)")
    ]
    cpu_launch_us: Annotated[
        float, Meta(description="the classifier's `cpu_launch` time in the analysed steps (µs)")
    ]
    cpu_launch_pct: Annotated[float, Meta(description="that as % of the analysed window")]
    compiled: Annotated[bool, Meta(description="the model already runs torch.compile or Triton kernels")]


def check(ctx: RuleContext) -> list[Finding]:
    if ctx.features.cuda_graphs:
        return []  # the decode step is graph-captured already
    # the launch-bound share first: one query on the classification, where the decode calls' is a regex's
    cl = ctx.class_time("cpu_launch")
    cost = int((cl["end"] - cl["ts"]).sum()) if cl.height else 0
    if ctx.pct(cost) < ctx.options["moderate_pct"]:
        return []
    calls = decode_calls(ctx)
    if calls.height < 2:
        return []
    n = max(ctx.steps.height, 1)
    # a token is one KV length in one step (a loop that restarts each step repeats its lengths)
    tokens = calls.select("step", "kv").n_unique()
    static = calls["kv"].n_unique() == 1  # one KV length throughout: a preallocated (static) cache
    k = ctx.trace.gpu.select("kind", "ts", "dur", "op").filter(
        (pl.col("kind") == "compute") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi)
    )
    ops = by_id(ctx.trace.host, k["op"].drop_nulls().unique(), "dur")
    med_k = float(k["dur"].median()) / 1000 if k.height else None
    med_op = float(ops["dur"].median()) / 1000 if ops.height else None
    batch = int(calls["batch"].max())
    evidence = Evidence(
        decode_attention_calls_per_step=round(calls.height / n, 2),
        batch=batch,
        kv_lengths=KvLengths(
            first=int(calls["kv"].min()),
            last=int(calls["kv"].max()),
            distinct=calls["kv"].n_unique(),
        ),
        tokens_per_step=round(tokens / n, 2) if not static else None,
        static_kv_cache=static,
        kernels_per_token=round(k.height / tokens, 1) if not static else None,
        median_kernel_us=round(med_k, 3) if med_k is not None else None,
        median_launching_op_cpu_us=round(med_op, 3) if med_op is not None else None,
        cpu_launch_us=round(cost / 1000, 3),
        cpu_launch_pct=round(ctx.pct(cost), 2),
        compiled=ctx.features.compiled or bool(ctx.features.triton_kernels),
    )
    comp = ctx.features.compiled or bool(ctx.features.triton_kernels)
    kv = (
        f"a static KV cache of length {int(calls['kv'].max())}"
        if static
        else f"{tokens / n:.0f} tokens per step over KV lengths {int(calls['kv'].min())}–{int(calls['kv'].max())}, "
        f"{k.height / tokens:.0f} kernels per token"
    )
    head = (
        f"A decode loop at batch {batch} ({kv}): median kernel {med_k or 0:.1f} µs against {med_op or 0:.1f} µs "
        "of CPU per launching op, so the GPU waits for the CPU on every kernel. "
    )
    if static:
        fix = head + (
            "The KV cache is already static: capture the decode step with CUDA graphs, "
            'torch.compile(model.forward, mode="reduce-overhead", fullgraph=True) (or '
            "torch.cuda.CUDAGraph around one step), so one launch replays every kernel of a token."
        )
    elif comp:
        fix = head + (
            'The step is compiled but not captured in CUDA graphs: compile with mode="reduce-overhead" '
            '(fullgraph=True) and a static KV cache (Hugging Face: cache_implementation="static"), since '
            "a cache that grows by torch.cat changes shapes every token and defeats the capture."
        )
    else:
        fix = head + (
            "Use a static KV cache and capture the decode step with CUDA graphs: Hugging Face "
            'model.generate(..., cache_implementation="static"), which transformers 4.50 and later compile '
            "themselves (GenerationConfig.compile_config; wrapping model.forward in torch.compile as well can fail "
            "with \"accessing tensor output of CUDAGraphs that has been overwritten\"), older versions with "
            'model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True); in a manual loop, '
            "preallocate K/V to the maximum length, write them with index_copy_, and compile the step "
            'with mode="reduce-overhead" (or capture it with torch.cuda.CUDAGraph). Batching more '
            "sequences per step amortizes the launches further."
        )
    steps = sorted(int(s) for s in ctx.steps["step"].to_list())
    return [
        ctx.finding(cost_ns=cost, count=tokens, steps=steps, evidence=evidence, fix=fix, op_ids=calls["op"])
    ]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: CUDA-graph replay of each token's model forward (TV101's, which holds
    the forward only on a decode loop: `analyses.decoding.forward_only`): the launching ops and their launch calls leave the host
    path; blocking calls and device work stay. What the loop does between forwards (sampling, logits processors,
    stopping criteria, attention-mask and position bookkeeping: Hugging Face `generate` runs them eagerly around
    its compiled forward) stays on the host path."""
    if ctx.features.cuda_graphs or decode_calls(ctx).height < 2:
        return None
    t = launch_bound.fix_transform(ctx)
    return None if t is None else Transform(NAME, host_removed=t.host_removed)
