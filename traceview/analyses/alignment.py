"""Whether a GEMM's rows meet the Tensor Cores' 16-byte alignment (unaligned-gemm's test; fp32-gemm asks it of the
widths its fixes would run at)."""

from __future__ import annotations

from .roofline import DTYPE_BYTES


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
