"""Attention that materializes its scores: the kernels of eager `softmax(QK^T)` (or SDPA's math backend) found
from the launching ops' shapes, grouped into the runs one fused attention kernel would replace.

A score signature is the input of a softmax over a rank >= 3 tensor (`aten::_softmax`, `aten::softmax`,
`aten::_safe_softmax`, and its backward) whose last dim is at least `MIN_KEYS`: (N_q, N_kv, elements). An op
touches the scores when one of its tensor inputs has exactly that many elements and ends in (N_q, N_kv) (the
scale, mask, softmax, dtype cast, dropout, the P·V matmul and their backward, in 4-D or batch-flattened 3-D
form), or when it is a batched matmul whose output has that shape (Q·K^T). Scores count as materialized only
when a GEMM produces or reads them: a softmax over channels alone is no attention.

The attention is more than the ops on its scores (`attention_extension`): the operand copies the batched
matmul makes (a transposed Q, K or V made contiguous under `aten::matmul`) and, in the backward, whatever the
autograd nodes of the attention's forward ops launch (matched by sequence number). The float mask the scores
are masked with is built outside it (`attention_mask`), with a blocking copy of its fill value in Hugging
Face's eager path; a fused call with `is_causal=True` builds none of it.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from ..engine import CHAIN
from ..frames import dropnull, omit, pick
from ..memo import per_trace
from ..model import RUNTIME_CATS, Trace
from .causal import causal_share, sdpa_causal
from .opshapes import call_shapes, decode
from .rowid import by_id
from .tree import ancestor_ids

SOFTMAX_OPS = {
    "aten::_softmax",
    "aten::softmax",
    "aten::_safe_softmax",
    "aten::_softmax_backward_data",
    "aten::_masked_softmax",
    "aten::_masked_softmax_backward",
}
SCORE_GEMMS = {"aten::bmm", "aten::baddbmm", "aten::matmul", "aten::mm"}
#: ops that reshape their operands for a batched GEMM (the copies they launch are the attention's)
GEMM_WRAPPERS = {"aten::matmul", "aten::einsum"}
#: SDPA's math fallback (its children are the eager ops)
MATH_SDPA = "aten::_scaled_dot_product_attention_math"
#: fused attention kernels (FlashAttention, memory-efficient/cutlass fmha, cuDNN SDPA, FlexAttention's Triton)
FUSED_ATTN_KERNEL_RE = (
    r"(?i)flash_fwd|flash_bwd|flash::|fmha|efficient_attention|cudnn::fusion|"
    r"sdpa|triton_tem_fused_flex|flex_attention|attention_kernel"
)
FUSED_ATTN_OP_RE = (
    r"^aten::_(flash|efficient|cudnn)_attention|^aten::_scaled_dot_product_(flash|efficient|cudnn)"
)
#: shortest key length worth a fused kernel (shorter scores are small tiles either way)
MIN_KEYS = 64
#: achieved share of the 16-bit Tensor-Core peak of one fused attention call on 16-bit inputs: the FLOPs it computes
#: (4·B·H·N_q·N_kv·d forward, 2.5x backward, times `causal_share` for a causal call: it skips the blocks above the
#: diagonal) over its kernels' time, forward and backward together; the median of the 14 distinct training programs
#: in the bundled H200 traces (torch 2.11, cuDNN's SDPA unless named), which range from 0.02 (BERT, batch 4 x 128
#: tokens) and 0.10 (BERT at 128) through GPT-2 at 512 0.14 and at 1024 0.16, flash at 16 heads x 2048 0.18 and BERT
#: at 512 0.20 to 0.25-0.31 for 4-16 heads x 1024 without dropout. Small calls leave SMs idle, and dropout inside
#: the kernel (every Hugging Face model in training) costs it about half; published FlashAttention figures (50-73 %
#: forward on A100) are long sequences without either.
FUSED_EFFICIENCY = 0.15
#: the same for FP32 inputs, of the FP32 peak: SDPA runs them on the memory-efficient (CUTLASS) kernel on the CUDA
#: cores, which gets nearer its own peak — the median of the 12 distinct FP32 attention shapes in the bundled H200
#: traces, 0.20 (4 heads x 256, batch 8) to 0.55 (16 x 256, batch 64): ViT-B/16 0.30, BERT 0.32-0.41, GPT-2
#: 0.35-0.44. (Counted without the causal share, the causal ones read 0.44-0.73 and the rest 0.30-0.41.)
FUSED_EFFICIENCY_FP32 = 0.34
#: the least one fused attention call takes, forward / backward (its kernels together): an H200 decode step's
#: forward 4.2-4.6 µs, BERT's smallest backward (three cuDNN kernels) 13.4 µs
FUSED_FLOOR_NS = (4_500, 13_000)


@per_trace
def eager_causal(trace: Trace) -> float:
    """Share of the counted FLOPs a fused kernel would compute for the trace's materialized attention: where a
    score op takes a mask over queries x keys (its last two dims the scores', more than one query, no head dim:
    Hugging Face's [B, 1, N, N] causal mask, a [N, N] `masked_fill` mask; a padding mask is [B, 1, 1, N], an ALiBi
    or relative-position bias [1, H, N, N]) or SDPA's math backend runs `is_causal`, a fused call with
    `is_causal=True` (or FlexAttention's block mask) skips the blocks above the diagonal: `causal_share`."""
    so = score_ops(trace).filter(pl.col("score"))
    if so.height == 0:
        return 1.0
    ops = by_id(trace.host, so["op"].unique().sort(), pl.col("i").alias("op"), "input_dims", "input_type")
    shapes = ops.select("input_dims", "input_type").unique()
    nq, nkv = int(so["n_q"].max()), int(so["n_kv"].max())
    for d, t in shapes.iter_rows():
        for dims, _ in decode(d, t)[1:]:
            if (len(dims) >= 2 and dims[-2:] == [nq, nkv] and nq > 1
                    and (len(dims) == 2 or dims[-3] == 1)):
                return causal_share(nkv)
    if (trace.host["name"] == MATH_SDPA).any():
        return sdpa_causal(trace)
    return 1.0


def fused_attention_ns(flops: pl.Expr, backward: pl.Expr, peak_flops: pl.Expr | float,
                       efficiency: pl.Expr | float = FUSED_EFFICIENCY) -> pl.Expr:
    """Predicted time (ns) of one fused attention call (or of one of its kernels) of `flops` at `efficiency` of
    `peak_flops` (FLOP/s), never below the floor of its direction (`FUSED_FLOOR_NS`)."""
    floor = pl.when(backward).then(FUSED_FLOOR_NS[1]).otherwise(FUSED_FLOOR_NS[0])
    return pl.max_horizontal(flops / (peak_flops * efficiency) * 1e9, floor)

_SCHEMA = {
    "op": pl.UInt32,
    "score": pl.Boolean,
    "gemm": pl.Boolean,
    "softmax": pl.Boolean,
    "backward": pl.Boolean,
    "heads": pl.Int64,
    "n_q": pl.Int64,
    "n_kv": pl.Int64,
    "score_bytes": pl.Int64,
}


def _bpe(t: str) -> int:
    from .roofline import DTYPE_BYTES

    return DTYPE_BYTES.get(t, 4)


def _batched(ts: list[tuple[list[int], str]]) -> bool:
    """Both matrix operands carry batch dims (Q·K^T, P·V): a weight (2-D) is no attention operand (an MoE
    router's linear feeds a softmax too)."""
    return len(ts) >= 2 and len(ts[-2][0]) >= 3 and len(ts[-1][0]) >= 3


def _gemm_out(ts: list[tuple[list[int], str]]) -> list[int] | None:
    if not _batched(ts):
        return None
    a, b = ts[-2][0], ts[-1][0]  # baddbmm: (bias, a, b)
    batch = a[:-2] if math.prod(a[:-2]) >= math.prod(b[:-2]) else b[:-2]
    return [*batch, a[-2], b[-1]]


@per_trace
def score_ops(trace: Trace) -> pl.DataFrame:
    """One row per cpu_op that launched GPU work: [op, score, gemm, softmax, backward, heads, n_q, n_kv,
    score_bytes] (score: it touches materialized attention scores; the shape columns are the scores')."""
    ids = dropnull(trace.gpu["op"]).unique().sort()
    if ids.len() == 0 or "input_dims" not in trace.host.columns:
        return pl.DataFrame(schema=_SCHEMA)
    ops = by_id(trace.host, ids, pl.col("i").alias("op"), "name", "input_dims", "input_type")
    if (
        not ops["name"].is_in(list(SOFTMAX_OPS)).any()
    ):  # no softmax launched work: no scores, nothing to decode
        return ops.lazy().select(  # (one query: a small trace's run is mostly polars' fixed cost per query)
            pl.col("op"), *[pl.lit(None, t).alias(c) for c, t in _SCHEMA.items() if c != "op"]
        ).with_columns(pl.lit(False).alias(c) for c in ("score", "gemm", "softmax", "backward")).collect(**CHAIN)
    combos = ops.select("name", "input_dims", "input_type").unique()
    parsed = []
    for name, d, t in combos.iter_rows():  # distinct (name, shapes): a few hundred
        ts = decode(d, t)
        parsed.append((name, d, t, ts))
    sigs = set()
    for name, _, _, ts in parsed:
        if name in SOFTMAX_OPS and ts and len(ts[0][0]) >= 3 and ts[0][0][-1] >= MIN_KEYS:
            s = ts[0][0]
            sigs.add((s[-2], s[-1], math.prod(s), s[-3] if len(s) >= 4 else 1, _bpe(ts[0][1])))
    rows = []
    for name, d, t, ts in parsed:
        hit = None
        gemm = name in SCORE_GEMMS and _batched(ts)
        out = _gemm_out(ts) if gemm else None
        for nq, nkv, n, heads, bpe in sigs:
            shapes = [s for s, _ in ts] + ([out] if out else [])
            if any(len(s) >= 3 and s[-2:] == [nq, nkv] and math.prod(s) == n for s in shapes):
                hit = (heads, nq, nkv, n * bpe)
                break
        rows.append(
            (
                name,
                d,
                t,
                hit is not None,
                gemm,
                name in SOFTMAX_OPS,
                "backward" in name,
                *(hit or (None, None, None, None)),
            )
        )
    cat = pl.Categorical
    tab = pl.DataFrame(
        rows,
        schema={
            "name": pl.String,
            "input_dims": cat,
            "input_type": cat,
            "score": pl.Boolean,
            "gemm": pl.Boolean,
            "softmax": pl.Boolean,
            "backward": pl.Boolean,
            "heads": pl.Int64,
            "n_q": pl.Int64,
            "n_kv": pl.Int64,
            "score_bytes": pl.Int64,
        },
        orient="row",
    )
    got = ops.join(tab, on=["name", "input_dims", "input_type"], how="left", nulls_equal=True)
    got = got.with_columns(pl.col("score").fill_null(False))
    # materialized only when a GEMM produces or reads the scores
    if not bool(got.filter(pl.col("score") & pl.col("gemm")).height):
        return got.with_columns(score=pl.lit(False)).select(*_SCHEMA)
    more = attention_extension(trace, got)
    if more.len():
        got = got.with_columns(score=pl.col("score") | pl.col("op").is_in(more.implode()))
    return got.select(*_SCHEMA)


def relayout_copies(trace: Trace, got: pl.DataFrame) -> pl.Series:
    """The launching ops of the copies an eager attention makes of its own tensors in the forward, outside its
    batched matmuls (op ids, from `got`: score_ops' rows [op, score, softmax]): its output put back in [B, N, H, d]
    for the heads' merge (`.transpose(1, 2).contiguous()`, or a `reshape` that copies: Hugging Face's BERT, GPT-2
    and Llama), and K and V repeated from H_kv to the H query heads ([B, H_kv, n_rep, N, d], Hugging Face's
    `repeat_kv`). A fused kernel writes its output in the layout that transpose makes contiguous and takes the
    grouped heads as they are (`enable_gqa=True`): neither copy runs (the fixed programs' own traces of BERT, GPT-2
    and Llama run none of them). Read from the score shapes [B, H, N_q, N_kv] of the softmax ops; a copy inside an
    autograd node (the backward's, which depends on how the projections laid Q, K and V out) is not counted."""
    h = trace.host
    empty = pl.Series("op", [], pl.UInt32)
    sm = got.filter(pl.col("score") & pl.col("softmax"))
    if sm.height == 0 or not {"input_dims", "input_type", "fwd_tid"} <= set(h.columns):
        return empty
    scores = set()
    for d, t in by_id(h, sm["op"], "input_dims", "input_type").unique().iter_rows():
        ts = decode(d, t)
        if ts and len(ts[0][0]) == 4:
            scores.add(tuple(ts[0][0]))
    cand = by_id(h, got.filter(~pl.col("score"))["op"], pl.col("i").alias("op"), "name", "input_dims", "input_type")
    cand = cand.filter(pl.col("name") == "aten::copy_")
    if not scores or cand.height == 0:
        return empty

    def relayout(shape: list[int]) -> bool:
        for b, heads, nq, nkv in scores:
            if len(shape) == 4 and shape[:3] == [b, nq, heads]:  # the output, [B, N_q, H, d]
                return True
            if (len(shape) == 5 and shape[0] == b and shape[3] == nkv and 1 < shape[2]
                    and shape[1] * shape[2] == heads):  # K or V repeated to the query heads
                return True
        return False

    hit = [(d, t) for d, t in cand.select("input_dims", "input_type").unique().iter_rows()
           if (ts := decode(d, t)) and relayout(list(ts[0][0]))]  # distinct shapes: a few dozen
    if not hit:
        return empty
    keys = pl.DataFrame(hit, schema={"input_dims": cand["input_dims"].dtype, "input_type": cand["input_type"].dtype},
                        orient="row")
    ops = cand.join(keys, on=["input_dims", "input_type"], how="semi", nulls_equal=True)["op"]
    backward = ancestor_ids(h, ops, (h["fwd_tid"].fill_null(0) > 0).to_numpy(), include_self=True) >= 0
    return ops.filter(pl.Series(~backward)).cast(pl.UInt32)


def attention_extension(trace: Trace, got: pl.DataFrame) -> pl.Series:
    """The launching ops of the eager attention that touch no score tensor (op ids, from `got`: score_ops' rows
    [op, score, gemm]): work a fused kernel does not run, found from the call tree rather than from shapes.

    - The batched matmul's operand copies: `aten::matmul` (and `aten::einsum`) reshapes a 4-D operand to the
      3-D batch bmm takes, and a Q, K or V left non-contiguous by the head split (`view(B, N, H, d)
      .transpose(1, 2)`) or K^T is copied there (`aten::reshape` -> `aten::clone` -> `aten::copy_`). Every op
      launched under the GEMM wrapper of a score GEMM is the attention's: a fused kernel reads the strided
      Q/K/V itself.
    - Their backward: the autograd node of each forward op of the attention (an op inside the outermost op
      that launched only attention work, `exclusive_tops`) has the forward op's sequence number; every op
      launched under such a node is the attention's backward (the copy that makes the incoming gradient
      contiguous for the batched matmuls' backward, under `UnsafeViewBackward0`, and whatever the reshapes' and
      expands' nodes launch), as the fused backward replaces them all."""
    h = trace.host
    if not {"seq", "fwd_tid", "parent"} <= set(h.columns):
        return pl.Series("op", [], pl.UInt32)
    launching = got["op"]
    score = got.filter(pl.col("score"))["op"]
    gemms = got.filter(pl.col("score") & pl.col("gemm"))["op"]
    is_op = (h["cat"] == "cpu_op").fill_null(False)
    # the GEMM wrappers of the score GEMMs, and every launching op under one of them
    wrapper = (is_op & h["name"].is_in(list(GEMM_WRAPPERS))).to_numpy()
    w = ancestor_ids(h, gemms, wrapper)
    wrappers = np.unique(w[w >= 0])
    lw = ancestor_ids(h, launching, wrapper)
    under = pl.concat([launching.filter(pl.Series(np.isin(lw, wrappers) & (lw >= 0))), relayout_copies(trace, got)])
    inside = pl.concat([score, under]).unique()
    # the forward ops of the attention: those with a sequence number in the subtree of an exclusive top
    tops = exclusive_tops(trace, inside, inside)
    tops = np.unique(tops.filter(tops >= 0).to_numpy())
    is_top = np.isin(h["i"].to_numpy(), tops)
    fwd_sel = is_op & h["seq"].is_not_null() & (h["fwd_tid"].fill_null(0) == 0)
    fw = h.filter(fwd_sel).select("i", "pid", "tid", "seq", "ts")
    in_top = ancestor_ids(h, fw["i"], is_top, include_self=True) >= 0
    attn_fw = fw.filter(pl.Series(in_top)).select("pid", pl.col("tid").alias("ftid"), "seq").unique()
    # their autograd nodes (the op of each backward node carries the forward op's sequence number and the
    # forward thread's index), mapped to the forward thread through the fwdbwd flows (layers)
    bsel = is_op & (h["fwd_tid"].fill_null(0) > 0) & h["seq"].is_not_null()
    bn = h.filter(bsel).select("i", "pid", "tid", "ts", "seq", "fwd_tid")
    nodes = np.zeros(0, np.int64)
    if bn.height and attn_fw.height:
        from .layers import _fwd_thread_map

        pairs, single = _fwd_thread_map(
            trace, h.filter(is_op).select("pid", "tid", "ts", "fwd_tid"), fw.rename({"tid": "ftid"})
        )
        m = (
            bn.join(pairs, on=["pid", "fwd_tid"], how="left")
            .join(single, on="pid", how="left")
            .with_columns(ftid=pl.coalesce("ftid", "ftid1"))
            .join(attn_fw, on=["pid", "ftid", "seq"], how="semi")
        )
        nodes = m["i"].to_numpy()
    if nodes.size == 0:
        return under
    is_node = np.isin(h["i"].to_numpy(), nodes)
    bwd = launching.filter(pl.Series(ancestor_ids(h, launching, is_node, include_self=True) >= 0))
    return pl.concat([under, bwd]).unique()


def score_kernels(trace: Trace, lo: int, hi: int) -> pl.DataFrame:
    """The compute kernels in [lo, hi) in (device, stream, time) order with `score` (launched by a score op),
    their run of consecutive score kernels (`run`, null outside one) and position in it (`pos`):
    [i, name, device, stream, ts, end, dur, op, launch, op_name, score, gemm, softmax, backward, heads, n_q,
    n_kv, score_bytes, run, pos]."""
    g = omit(
        pick(trace.gpu, "i", "name", "kind", "device", "stream", "ts", "end", "dur", "op", "launch")
        .filter((pl.col("kind") == "compute") & (pl.col("ts") >= lo) & (pl.col("ts") < hi)),
        "kind",
    )
    so = score_ops(trace)
    if g.height == 0:  # (no kernel to look up: not the name of every op that launched work)
        so = so.clear()
    # the rest in one query (a small trace's run is mostly polars' fixed cost per query)
    g = g.lazy().join(so.lazy(), on="op", how="left").with_columns(pl.col("score").fill_null(False))
    g = g.join(
        by_id(trace.host, so["op"], pl.col("i").alias("op"), pl.col("name").alias("op_name")).lazy().unique("op"),
        on="op",
        how="left",
    )
    g = g.sort("device", "stream", "ts", maintain_order=True)
    brk = ~pl.col("score") | pl.any_horizontal(
        pl.col(c).ne_missing(pl.col(c).shift()) for c in ("device", "stream")
    )
    g = g.with_columns(_run=brk.cast(pl.Int64).cum_sum())
    g = g.with_columns(run=pl.when(pl.col("score")).then(pl.col("_run")))
    # a run's group starts at the kernel that broke the previous one (a non-score kernel, unless the stream
    # starts with the run): the position counts the score kernels only, from 0
    pos = pl.col("score").cast(pl.Int64).cum_sum().over("_run") - 1
    return g.with_columns(pos=pl.when(pl.col("score")).then(pos)).drop("_run").collect(**CHAIN)


@per_trace
def score_op_ids(trace: Trace) -> pl.Series:
    """The ids of the ops that touch materialized attention scores (empty when there are none): other rules
    leave their kernels to the attention rule (four ask: once per trace)."""
    so = score_ops(trace)
    return so.filter(pl.col("score"))["op"]


@per_trace
def fused_attention(trace: Trace) -> dict:
    """What the trace already runs: {kernels: fused attention kernels, math_sdpa: SDPA math-backend calls}."""
    k = trace.gpu.select("kind", "name").filter(pl.col("kind") == "compute")["name"].unique()
    ops = trace.host.select("cat", "name").filter(pl.col("cat") == "cpu_op")["name"].unique()
    return {
        "kernels": int(k.str.contains(FUSED_ATTN_KERNEL_RE).sum())
        + int(ops.str.contains(FUSED_ATTN_OP_RE).sum()),
        "math_sdpa": bool((ops == MATH_SDPA).any()),
    }


@per_trace
def math_sdpa_input_bytes(trace: Trace) -> int | None:
    """Bytes per element of the query that SDPA's math backend was called with (the narrowest over its calls),
    None without a math-backend call or shapes. The math backend upcasts fp16/bf16 inputs to FP32 for its own
    kernels (PyTorch >= 2.5), so its GEMMs read FP32 while a fused backend would run on the inputs' width."""
    widths = [_bpe(ts[0][1]) for ts in call_shapes(trace, MATH_SDPA) if ts]
    return min(widths) if widths else None


@per_trace
def math_sdpa_gqa(trace: Trace) -> tuple[int, int] | None:
    """(query heads, key/value heads) of SDPA's math-backend calls that group their queries (grouped-query
    attention: K and V [B, H_kv, N, d] with fewer heads than Q's [B, H_q, N, d], `enable_gqa=True`), the first such
    shape; None without one or without shapes. The flash backend runs grouped queries fused on 16-bit inputs; the
    memory-efficient one refuses them in the PyTorch releases before it learned them (2.11 ran HF Llama's FP32
    grouped-query calls on the math backend), so an FP32 grouped-query call can fall back to the math one."""
    for ts in call_shapes(trace, MATH_SDPA):
        if len(ts) >= 3 and len(ts[0][0]) == 4 and len(ts[1][0]) == 4:
            hq, hkv = int(ts[0][0][1]), int(ts[1][0][1])
            if 0 < hkv < hq and hq % hkv == 0:
                return hq, hkv
    return None


@per_trace
def repeated_kv_heads(trace: Trace, heads: int, n_kv: int) -> int | None:
    """Key/value heads that an eager attention repeats to its `heads` score heads before the scores (grouped-query
    attention the eager way, Hugging Face's `repeat_kv`: `kv[:, :, None].expand(B, H_kv, n_rep, N, d)` and a reshape
    that copies), read from an `aten::expand` of a [B, H_kv, 1, n_kv, d] input with H_kv dividing `heads`; None
    without one. SDPA takes the grouped heads as they are (`enable_gqa=True`), without those copies."""
    for ts in call_shapes(trace, "aten::expand"):
        if ts and len(ts[0][0]) == 5:
            _, hkv, one, n, _ = ts[0][0]
            if one == 1 and n == n_kv and 0 < hkv < heads and heads % hkv == 0:
                return int(hkv)
    return None


def exclusive_tops(trace: Trace, ops: pl.Series, inside: pl.Series) -> pl.Series:
    """For each op id of `ops`, its outermost enclosing cpu_op whose subtree launched only kernels whose op is in
    `inside` (the host work a fused replacement removes whole: `aten::matmul` around `aten::bmm`, an autograd
    node around its backward ops); the op itself when its parent launched other work too. Vectorised climbs
    over the whole tree (depth passes), no per-event loop."""
    h = trace.host
    n = h.height
    ids = h["i"].to_numpy().astype(np.int64)
    at = np.full(int(ids.max()) + 2 if n else 1, n, np.int64)
    at[ids] = np.arange(n)

    def pos(v: pl.Series) -> np.ndarray:
        x = v.cast(pl.Int64).fill_null(at.size - 1).to_numpy()
        return at[np.clip(x, 0, at.size - 1)]

    par = np.append(pos(h["parent"]), n)
    is_op = np.append((h["cat"] == "cpu_op").to_numpy(), False)
    # every ancestor of an op that launched work outside `inside` is shared with other work
    launched = trace.gpu["op"].drop_nulls().unique()
    other = launched.filter(~launched.is_in(inside.implode()))
    bad = np.zeros(n + 1, bool)
    f = np.unique(pos(other))
    while f.size:
        f = f[~bad[f]]
        bad[f] = True
        f = np.unique(par[f])
    bad[n] = True
    cur = pos(ops)
    while True:
        p = par[cur]
        ok = (cur < n) & is_op[p] & ~bad[p]
        if not ok.any():
            break
        cur = np.where(ok, p, cur)
    return pl.Series("top", np.where(cur < n, ids[np.minimum(cur, max(n - 1, 0))], -1), pl.Int64)


def _shape_text(s: tuple[int, ...]) -> str:
    """A shape as the profiler writes it in `Input Dims`."""
    return "[" + ", ".join(str(x) for x in s) + "]"


def _masks(trace: Trace, so: pl.DataFrame) -> set[tuple[int, ...]]:
    """The shapes of the masks the score ops take: an input ending in (N_q, N_kv) of a score op, with fewer
    elements than the scores it is added to (broadcast over the heads or the batch: [B, 1, N_q, N_kv])."""
    ops = so.filter(pl.col("score") & ~pl.col("gemm") & pl.col("n_q").is_not_null())
    if ops.height == 0:
        return set()
    got = by_id(trace.host, ops["op"], "input_dims", "input_type").unique()
    out: set[tuple[int, ...]] = set()
    for d, t in got.iter_rows():
        ts = [s for s, _ in decode(d, t) if len(s) >= 3]
        for s in ts:
            bigger = [u for u in ts if u[-2:] == s[-2:] and math.prod(u) > math.prod(s)]
            if bigger and s[-2] >= 1 and s[-1] >= MIN_KEYS:
                out.add(tuple(s))
    return out


@per_trace
def attention_mask(trace: Trace) -> dict[str, pl.Series]:
    """The construction of the float mask the eager scores are masked with, which the fused call does without
    (`is_causal=True`: Hugging Face's sdpa path then builds no mask at all): {ops: host ids of the ops that build
    it, calls: the runtime calls inside them}.

    The mask's producer is an op outside the attention that takes a tensor of the mask's shape (`_masks`: an
    input of a score op broadcast over the heads, [B, 1, N_q, N_kv]): Hugging Face's eager mask is
    `torch.where(causal, torch.tensor(0.0, device=...), min_dtype)`. Its scalar operand is made on the host and
    copied to the device just before it (`torch.tensor(..., device=)`: a blocking copy from pageable memory, a
    stream synchronisation once per forward, which keeps the host from running ahead of the device across
    steps). So the ops beside the producer (on its thread, under its parent, at its depth) after the last
    kernel launch before it that block on the device (a sync call, or a copy the call waited for) are the
    mask's too."""
    none = {"ops": pl.Series("op", [], pl.UInt32), "calls": pl.Series("i", [], pl.UInt32)}
    so = score_ops(trace)
    if not bool(so["score"].any()):
        return none
    shapes = _masks(trace, so)
    if not shapes:
        return none
    h = trace.host
    # the outermost ops that take the mask and not the scores (a score op takes both: it is the attention's)
    # (the string test on the distinct shape lists only, not on every row)
    dims = h.select(pl.col("input_dims").unique().drop_nulls())["input_dims"]
    text = dims.cast(pl.String)
    has = pl.any_horizontal(text.str.contains(_shape_text(s), literal=True) for s in shapes)
    sel = dims.filter(pl.select(has).to_series())
    cand = h.filter((pl.col("cat") == "cpu_op") & pl.col("input_dims").is_in(sel.implode())).select(
        "i", "tid", "ts", "end", "depth", "parent", "input_dims", "input_type"
    )
    combos = cand.select("input_dims", "input_type").unique()
    keep = []
    for d, t in combos.iter_rows():
        ts = [tuple(x) for x, _ in decode(d, t)]
        if any(x in shapes for x in ts) and not any(
            len(x) >= 3 and any(x[-2:] == m[-2:] and math.prod(x) > math.prod(m) for m in shapes) for x in ts
        ):
            keep.append((d, t))
    if not keep:
        return none
    ok = pl.DataFrame(keep, schema={"input_dims": cand["input_dims"].dtype, "input_type": cand["input_type"].dtype},
                      orient="row")
    cand = cand.join(ok, on=["input_dims", "input_type"], how="semi", nulls_equal=True)
    prod = cand.filter(~pl.col("parent").is_in(cand["i"].implode()).fill_null(False))
    # each producer's window: from the last compute launch before it on its thread to its start
    g = trace.gpu.select("kind", "launch_tid", "launch_ts").filter(pl.col("kind") == "compute").select(
        pl.col("launch_tid").cast(pl.Int64).alias("tid"), pl.col("launch_ts").cast(pl.Int64).alias("t")
    ).drop_nulls().sort("tid", "t", maintain_order=True)
    win = prod.select("tid", pl.col("ts").cast(pl.Int64), "depth", "parent", "i").sort("tid", "ts", maintain_order=True)
    win = win.join_asof(g.rename({"t": "lo"}), left_on="ts", right_on="lo", by="tid", strategy="backward",
                        allow_exact_matches=False, check_sortedness=False)
    # the blocking calls in a window: a sync, or a call that launched a copy and returned after it ended
    from .replay_graph import SYNC_RE

    rt = h.select("i", "cat", "tid", "ts", "end", "name").filter(pl.col("cat").is_in(RUNTIME_CATS)).drop("cat")
    cp = trace.gpu.select("kind", "launch", "end").filter(pl.col("kind") == "memcpy").select(pl.col("launch").alias("i"), pl.col("end").alias("_ce"))
    rt = rt.join(cp, on="i", how="left").filter(
        pl.col("_ce").le(pl.col("end")).fill_null(False) | pl.col("name").str.contains(SYNC_RE).fill_null(False)
    )
    blk = rt.sort("tid", "ts", maintain_order=True).join_asof(
        win.select("tid", pl.col("ts").alias("_pts"), "lo", pl.col("depth").alias("_d"), pl.col("parent").alias("_pp"))
        .sort("tid", "_pts", maintain_order=True),
        left_on="ts", right_on="_pts", by="tid", strategy="forward", check_sortedness=False,
    ).filter((pl.col("lo").is_null() | (pl.col("ts") > pl.col("lo"))) & pl.col("_pts").is_not_null())
    # each blocking call's op at the producer's depth, under the producer's parent (the `torch.tensor` call beside
    # the producer: a sync of the step before, or of another scope, is not the mask's)
    ops = prod["i"]
    if blk.height:
        is_op = (h["cat"] == "cpu_op").fill_null(False)
        for d in blk["_d"].unique().to_list():
            sub = blk.filter(pl.col("_d") == d)
            at = pl.Series("i", ancestor_ids(h, sub["i"], (is_op & (h["depth"] == d)).to_numpy()))
            par = by_id(h, at.clip(0).cast(pl.UInt32), "parent")["parent"]
            same = (at >= 0) & par.eq_missing(sub["_pp"]).fill_null(False)
            ops = pl.concat([ops, at.filter(same).cast(pl.UInt32)])
    ops = ops.unique().sort()
    # every runtime call inside those ops
    is_mask = np.isin(h["i"].to_numpy(), ops.to_numpy())
    rows = h.filter(pl.col("cat").is_in(RUNTIME_CATS))["i"]
    calls = rows.filter(pl.Series(ancestor_ids(h, rows, is_mask) >= 0))
    return {"ops": ops.rename("op"), "calls": calls.rename("i")}
