"""The tensor shapes an op was called with (`Input Dims` / `Input type`), decoded once per distinct combination."""

from __future__ import annotations

import math

import msgspec
import polars as pl

from ..frames import dropnull, pick
from ..memo import per_trace
from ..model import Trace
from .rowid import by_id

_dec = msgspec.json.Decoder()


def tensors(dims: object, types: object) -> list[tuple[list[int], str]]:
    """The (shape, dtype) of each tensor argument; scalars, lists and unreadable values left out."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return []
    return [
        (d, t)
        for d, t in zip(dims, types, strict=False)
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and isinstance(t, str)
    ]


def decode(dims: str | None, types: str | None) -> list[tuple[list[int], str]]:
    """`tensors` of an op's raw Input Dims / Input type text (empty when unreadable)."""
    try:
        return tensors(_dec.decode(dims) if dims else [], _dec.decode(types) if types else [])
    except (msgspec.DecodeError, TypeError):
        return []


def tensor_lists(dims: str | None, types: str | None) -> list[list[list[int]]]:
    """The shapes of each tensor-list argument (`TensorList`: a foreach op's) of an op's raw Input Dims / Input type
    text, in order; empty when unreadable or where the recording kept no shapes for the lists."""
    try:
        d, t = _dec.decode(dims) if dims else [], _dec.decode(types) if types else []
    except msgspec.DecodeError:
        return []
    if not isinstance(d, list) or not isinstance(t, list):
        return []
    return [x for x, ty in zip(d, t, strict=False) if ty == "TensorList" and isinstance(x, list) and x
            and all(isinstance(y, list) and all(isinstance(n, int) for n in y) for y in x)]


@per_trace
def call_shapes(trace: Trace, name: str) -> list[list[tuple[list[int], str]]]:
    """`decode` of each distinct (Input Dims, Input type) the op `name` was called with, in a fixed order (sorted
    by the raw text); empty without shapes or calls."""
    if "input_dims" not in trace.host.columns:
        return []
    calls = trace.host.filter(pl.col("name") == name).select("input_dims", "input_type").unique()
    return [decode(d, t) for d, t in calls.sort(pl.all()).iter_rows()]


@per_trace
def first_input(trace: Trace) -> pl.DataFrame:
    """[op, rank, dtype, numel] of the first tensor argument of every op that launched GPU work (null without
    shapes)."""
    ids = dropnull(trace.gpu["op"]).unique().sort()
    schema = {"op": pl.UInt32, "rank": pl.Int64, "dtype": pl.String, "numel": pl.Int64}
    if ids.len() == 0:
        return pl.DataFrame(schema=schema)
    ops = by_id(trace.host, ids, pl.col("i").alias("op"), "input_dims", "input_type")
    combos = pick(ops, "input_dims", "input_type").unique()
    rows = []
    for d, t in combos.iter_rows():  # distinct shapes, not events
        ts = decode(d, t)
        rows.append((d, t, len(ts[0][0]) if ts else None, ts[0][1] if ts else None,
                     math.prod(ts[0][0]) if ts else None))
    cat = pl.Categorical
    tab = pl.DataFrame(
        rows,
        schema={"input_dims": cat, "input_type": cat, "rank": pl.Int64, "dtype": pl.String, "numel": pl.Int64},
        orient="row",
    )
    return ops.join(tab, on=["input_dims", "input_type"], how="left", nulls_equal=True).select(*schema)
