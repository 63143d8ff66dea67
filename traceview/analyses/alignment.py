"""Whether a GEMM's rows meet the Tensor Cores' 16-byte alignment (unaligned-gemm's test; fp32-gemm asks it of the
widths its fixes would run at)."""

from __future__ import annotations

import msgspec
import polars as pl

from ..frames import dropnull, pick
from .roofline import DTYPE_BYTES, GEMM_OPS
from .rowid import by_id

_dec = msgspec.json.Decoder()


def misaligned(name: str, dims: list, types: list, strides: list | None) -> tuple[int, list[int]] | None:
    """(bytes per element, the misaligned row lengths) of one GEMM call, or None when every row is a multiple
    of 16 bytes (or the call is not a 2-/3-D GEMM the model reads). A row length is a stride of a dimension
    longer than one that is not the unit stride; without strides, each operand's last dimension (contiguous).
    The output's rows: the second operand's last dimension (`linear`: its weight's first)."""
    ts = [(d, t, (strides[j] if strides and j < len(strides) else None)) for j, (d, t) in enumerate(zip(dims, types, strict=False))
          if isinstance(d, list) and len(d) >= 1 and isinstance(t, str) and t in DTYPE_BYTES]
    mats = [x for x in ts if len(x[0]) >= 2]
    if name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm", "aten::addbmm") and len(mats) >= 3:
        mats = mats[1:3]  # (a 2-D bias first)
    if len(mats) < 2:
        return None
    bpe = DTYPE_BYTES[mats[0][1]]
    align = 16 // bpe if bpe in (1, 2, 4) else None
    if align is None:
        return None
    rows: set[int] = set()
    for d, _, st in mats[:2]:
        if isinstance(st, list) and len(st) == len(d):
            rows.update(int(s) for s, n in zip(st, d, strict=True) if isinstance(s, int) and s != 1 and n > 1)
        else:
            rows.add(int(d[-1]))
    w = mats[1][0]
    rows.add(int(w[0]) if name == "aten::linear" else int(w[-1]))
    bad = sorted(r for r in rows if r % align)
    return (bpe, bad) if bad else None


def misaligned_calls(host: pl.DataFrame, ops: pl.Series, fp32_as: str | None = None) -> pl.DataFrame:
    """[op, bpe_row, rows] of the GEMM calls (`GEMM_OPS`) among `ops` (host row ids) whose rows are misaligned
    (`misaligned`, on the op's recorded Input Dims / Input type / Input Strides), per distinct shape, never per
    event; `fp32_as`: read the FP32 inputs as this type (autocast's "c10::BFloat16": the width a fix would run at)."""
    return misaligned_calls_as(host, ops, (fp32_as,))[fp32_as]


def misaligned_calls_as(host: pl.DataFrame, ops: pl.Series,
                        fp32_as: tuple[str | None, ...]) -> dict[str | None, pl.DataFrame]:
    """{each of `fp32_as`: `misaligned_calls` at that width}, the calls' rows and distinct shapes looked up once
    (fp32-gemm asks both of its fixes' widths: half the queries)."""
    empty = pl.DataFrame(schema={"op": pl.UInt32, "bpe_row": pl.Int64, "rows": pl.List(pl.Int64)})
    ops = dropnull(ops).unique()
    if ops.len() == 0 or "input_dims" not in host.columns:
        return dict.fromkeys(fp32_as, empty)
    strides = pl.col("strides") if "strides" in host.columns else pl.lit(None, pl.Categorical)
    h = by_id(host, ops.sort(), pl.col("i").alias("op"), "name", "input_dims", "input_type",
              strides.alias("strides")).filter(pl.col("name").is_in(list(GEMM_OPS)))
    key = ["name", "input_dims", "input_type", "strides"]
    shapes = pick(h, *key).unique().rows()  # distinct shapes
    return {width: _misaligned_rows(h, key, shapes, width, empty) for width in fp32_as}


def _misaligned_rows(h: pl.DataFrame, key: list[str], shapes: list[tuple], fp32_as: str | None,
                     empty: pl.DataFrame) -> pl.DataFrame:
    """`misaligned_calls` of the calls `h` ([op, *key]) from their distinct `shapes`, at the width `fp32_as`."""
    rows = []
    for name, d, t, s in shapes:
        try:
            types = _dec.decode(t) if t else []
            if fp32_as:
                types = [fp32_as if x == "float" else x for x in types]
            got = misaligned(name, _dec.decode(d) if d else [], types, _dec.decode(s) if s else None)
        except (msgspec.DecodeError, TypeError, ValueError):
            got = None
        if got is not None:
            rows.append((name, d, t, s, got[0], got[1]))
    if not rows:
        return empty
    raw = pl.Categorical
    bad = pl.DataFrame(rows, schema={"name": pl.String, "input_dims": raw, "input_type": raw, "strides": raw,
                                     "bpe_row": pl.Int64, "rows": pl.List(pl.Int64)}, orient="row")
    return h.join(bad, on=key, how="inner", nulls_equal=True).select("op", "bpe_row", "rows")
