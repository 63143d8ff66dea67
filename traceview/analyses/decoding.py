"""The decode loop in a trace: its one-token attention calls and the host spans of each token's model forward
(shared by the decode-loop and launch-bound rules, whose CUDA-graph fixes hold the forward only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ..frames import pick
from .opshapes import decode
from .rowid import by_id
from .windows import host_step_of

SDPA_RE = r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w+|_flash_attention_forward|_efficient_attention_forward)$"
BMM_OPS = {"aten::bmm", "aten::matmul", "aten::baddbmm"}


def decode_calls(ctx: Any) -> pl.DataFrame:
    """The decode attention calls in the analysed steps of a rule context `ctx`: [op, step, batch, kv]."""

    def build() -> pl.DataFrame:
        h = pick(ctx.trace.host, "i", "cat", "name", "ts", "input_dims", "input_type").filter(
            (pl.col("cat") == "cpu_op")
            & (pl.col("ts") >= ctx.lo)
            & (pl.col("ts") < ctx.hi)
            & (pl.col("name").str.contains(SDPA_RE) | pl.col("name").is_in(list(BMM_OPS)))
        )
        if h.height == 0:  # no attention call in the steps: no decode call (no query more)
            return pl.DataFrame(schema={"op": h.schema["i"], "step": ctx.steps.schema["step"], "batch": pl.Int64,
                                        "kv": pl.Int64})
        schema = {
            "name": pl.String,
            "input_dims": pl.Categorical,
            "input_type": pl.Categorical,
            "batch": pl.Int64,
            "kv": pl.Int64,
        }
        rows = []
        for name, d, t in (
            pick(h, "name", "input_dims", "input_type").unique().iter_rows()
        ):  # distinct shapes
            ts = [s for s, _ in decode(d, t)]
            if len(ts) < 2 or len(ts[0]) < 3 or len(ts[1]) < 3 or ts[0][-2] != 1:
                continue
            q, k = ts[0], ts[1]
            if name in BMM_OPS:  # q·K^T: [.., 1, d] x [.., d, L]
                if q[-1] != k[-2] or k[-1] <= 1 or q[:-2] != k[:-2]:
                    continue
                kv = k[-1]
            else:  # SDPA: q [B, H, 1, d], k [B, H, L, d]
                if k[-2] <= 1 or q[-1] != k[-1]:
                    continue
                kv = k[-2]
            rows.append((name, d, t, q[0], kv))
        tab = pl.DataFrame(rows, schema=schema, orient="row")
        # one row per call: the outermost of SDPA and its backend op, of matmul and its bmm
        for outer, inner in (
            ("aten::scaled_dot_product_attention", pl.col("name").str.contains(SDPA_RE)),
            ("aten::matmul", pl.col("name") == "aten::bmm"),
        ):
            if (tab["name"] == outer).any():
                tab = tab.filter((pl.col("name") == outer) | ~inner)
        got = h.join(tab, on=["name", "input_dims", "input_type"], how="inner", nulls_equal=True)
        return host_step_of(got, ctx.steps, "ts").select(pl.col("i").alias("op"), "step", "batch", "kv")

    return ctx.shared("decode_calls", build)  # (the same for every rule: it reads no option)


def forward_spans(ctx: Any) -> pl.DataFrame | None:
    """[lo, hi] host spans of each token's model forward: its L decode attention calls (one per layer) and L layer
    periods around them (half a period before the first and after the last: the first layer's work before its
    attention with the embedding, the last one's after it with the final norm and the LM head). None where tokens
    or layers cannot be told apart (one KV length throughout, one attention call per token)."""
    calls = decode_calls(ctx)
    if calls["kv"].n_unique() < 2:
        return None
    calls = calls.join(by_id(ctx.trace.host, calls["op"], pl.col("i").alias("op"), "ts", "end"), on="op")
    tok = (
        calls.sort("ts")
        .group_by("step", "kv")
        .agg(
            pl.col("ts").min().alias("lo"),
            pl.col("end").max().alias("hi"),
            pl.col("ts").sort().diff().median().alias("p"),
        )
    )
    period = tok["p"].median()
    if period is None or period <= 0:
        return None
    half = int(period) // 2
    return tok.select(pl.col("lo") - half, pl.col("hi") + half).sort("lo")


def forward_only(ctx: Any, removed: np.ndarray) -> np.ndarray:
    """The host rows of `removed` (int64 ids) that a CUDA graph of a decode loop holds: those inside a token's model
    forward (`forward_spans`); all of them where the trace shows no decode loop whose tokens can be told apart."""
    spans = forward_spans(ctx) if decode_calls(ctx).height >= 2 else None
    if spans is None:
        return removed
    rows = by_id(ctx.trace.host, pl.Series(np.asarray(removed, np.int64)).cast(pl.UInt32), "i", "ts").sort("ts")
    inside = rows.join_asof(spans, left_on="ts", right_on="lo", strategy="backward").filter(
        pl.col("ts") <= pl.col("hi")
    )
    return inside["i"].cast(pl.Int64).to_numpy()
