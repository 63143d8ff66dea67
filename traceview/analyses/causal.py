"""What a causal attention call computes: a fused kernel (flash, memory-efficient, cuDNN) with `is_causal=True`
skips the blocks of keys above the diagonal, so it does a share of the FLOPs the N x N scores count.

The share is read from SDPA's recorded `is_causal` (`aten::scaled_dot_product_attention`'s Concrete Inputs, which
the loader keeps); materialized attention reads it from its mask (analyses/attention.py, `eager_causal`).
"""

from __future__ import annotations

import math

import msgspec
import polars as pl

from ..engine import CHAIN
from ..memo import per_trace
from ..model import Trace
from .opshapes import decode

_dec = msgspec.json.Decoder()

#: the rows of query tiles a fused kernel skips blocks of keys by: a causal call computes the blocks on and below the
#: diagonal, (nb + 1) / 2nb of them for nb tiles of 128 queries (flash, memory-efficient and cuDNN alike)
CAUSAL_TILE = 128


def causal_share(n: int) -> float:
    """Share of the N x N scores a causal fused kernel computes (`CAUSAL_TILE`): 0.5625 at 1024 tokens."""
    nb = max(math.ceil(n / CAUSAL_TILE), 1)
    return (nb + 1) / (2 * nb)


@per_trace
def sdpa_causal(trace: Trace) -> float:
    """Share of the counted FLOPs the trace's SDPA calls compute: `causal_share` of their key length where every
    call that records it says `is_causal=True` (`aten::scaled_dot_product_attention`'s Concrete Inputs, position
    5), else 1.0 (not causal, mixed, or not recorded)."""
    if "concrete" not in trace.host.columns:
        return 1.0
    calls = (trace.host.lazy().select("name", "input_dims", "input_type", "concrete")  # (one query)
             .filter(pl.col("name") == "aten::scaled_dot_product_attention").drop("name").unique()
             .collect(**CHAIN))
    flags, keys = set(), []
    for d, t, c in calls.iter_rows():
        try:
            conc = _dec.decode(c) if c else []
        except (msgspec.DecodeError, TypeError):
            conc = []
        flags.add(conc[5] if isinstance(conc, list) and len(conc) > 5 else None)
        ts = decode(d, t)
        if len(ts) >= 2 and len(ts[1][0]) >= 2:
            keys.append(ts[1][0][-2])
    return causal_share(max(keys)) if flags == {"True"} and keys else 1.0
