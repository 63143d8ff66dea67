"""Attention that materializes its scores: the kernels of eager `softmax(QK^T)` (or SDPA's math backend) found
from the launching ops' shapes, grouped into the runs one fused attention kernel would replace.

A score signature is the input of a softmax over a rank >= 3 tensor (`aten::_softmax`, `aten::softmax`,
`aten::_safe_softmax`, and its backward) whose last dim is at least `MIN_KEYS`: (N_q, N_kv, elements). An op
touches the scores when one of its tensor inputs has exactly that many elements and ends in (N_q, N_kv) (the
scale, mask, softmax, dtype cast, dropout, the P·V matmul and their backward, in 4-D or batch-flattened 3-D
form), or when it is a batched matmul whose output has that shape (Q·K^T). Scores count as materialized only
when a GEMM produces or reads them: a softmax over channels alone is no attention.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from ..memo import per_trace
from ..model import Trace
from .opshapes import decode
from .rowid import by_id

SOFTMAX_OPS = {
    "aten::_softmax",
    "aten::softmax",
    "aten::_safe_softmax",
    "aten::_softmax_backward_data",
    "aten::_masked_softmax",
    "aten::_masked_softmax_backward",
}
SCORE_GEMMS = {"aten::bmm", "aten::baddbmm", "aten::matmul", "aten::mm"}
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
    ids = trace.gpu["op"].drop_nulls().unique().sort()
    if ids.len() == 0 or "input_dims" not in trace.host.columns:
        return pl.DataFrame(schema=_SCHEMA)
    ops = by_id(trace.host, ids, pl.col("i").alias("op"), "name", "input_dims", "input_type")
    if (
        not ops["name"].is_in(list(SOFTMAX_OPS)).any()
    ):  # no softmax launched work: no scores, nothing to decode
        return ops.select(
            pl.col("op"), *[pl.lit(None, t).alias(c) for c, t in _SCHEMA.items() if c != "op"]
        ).with_columns(pl.lit(False).alias(c) for c in ("score", "gemm", "softmax", "backward"))
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
        got = got.with_columns(score=pl.lit(False))
    return got.select(*_SCHEMA)


def score_kernels(trace: Trace, lo: int, hi: int) -> pl.DataFrame:
    """The compute kernels in [lo, hi) in (device, stream, time) order with `score` (launched by a score op),
    their run of consecutive score kernels (`run`, null outside one) and position in it (`pos`):
    [i, name, device, stream, ts, end, dur, op, launch, op_name, score, gemm, softmax, backward, heads, n_q,
    n_kv, score_bytes, run, pos]."""
    g = (
        trace.gpu.select("i", "name", "kind", "device", "stream", "ts", "end", "dur", "op", "launch")
        .filter((pl.col("kind") == "compute") & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
        .drop("kind")
    )
    so = score_ops(trace)
    g = g.join(so, on="op", how="left").with_columns(pl.col("score").fill_null(False))
    g = g.join(
        by_id(trace.host, so["op"], pl.col("i").alias("op"), pl.col("name").alias("op_name")).unique("op"),
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
    return g.with_columns(pos=pl.when(pl.col("score")).then(pos)).drop("_run")


def score_op_ids(trace: Trace) -> pl.Series:
    """The ids of the ops that touch materialized attention scores (empty when there are none): other rules
    leave their kernels to the attention rule."""
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
    if "input_dims" not in trace.host.columns:
        return None
    calls = trace.host.filter(pl.col("name") == MATH_SDPA).select("input_dims", "input_type").unique()
    widths = [_bpe(ts[0][1]) for d, t in calls.iter_rows() if (ts := decode(d, t))]
    return min(widths) if widths else None


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
