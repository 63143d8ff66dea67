"""The eager attention's own copies outside its matmuls (`attention.relayout_copies`): the forward copy that puts its
output back in [B, N, H, d] for the heads' merge, and `repeat_kv`'s copies of K and V to the query heads. Checked
against an independent source: the fixed program's own trace (SDPA, recorded alone on the same H100,
`record_ab_traced.sh h100_fixed`), which runs none of those copies, while the eager trace runs exactly as many a
step as the rule counts."""

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent / "rules"))
import rulekit as k  # noqa: E402

from traceview.analyses.attention import relayout_copies, score_ops  # noqa: E402
from traceview.analyses.opshapes import decode  # noqa: E402


def _trace(rel: str):
    return k.trace(next(str(p.relative_to(k.SAMPLES)) for p in (k.SAMPLES / rel).glob("*.pt.trace.json*")))


def _forward_copies(t, shapes: set[tuple[int, ...]]) -> int:
    """Copy kernels a step whose launching `aten::copy_` reads one of `shapes`, outside any autograd node (counted
    from the kernels and the op tree, not from score_ops)."""
    h = t.host
    ops = h.filter(pl.col("name") == "aten::copy_").select("i", "input_dims", "input_type", "parent")
    keep = {(d, ty) for d, ty in ops.select("input_dims", "input_type").unique().iter_rows()
            if (got := decode(d, ty)) and tuple(got[0][0]) in shapes}
    ids = {i for i, d, ty, _ in ops.iter_rows() if (d, ty) in keep}
    node = dict(zip(h["i"].to_list(), (h["fwd_tid"].fill_null(0) > 0).to_list(), strict=True))
    parent = dict(zip(h["i"].to_list(), h["parent"].to_list(), strict=True))

    def in_backward(i: int | None) -> bool:
        while i is not None:
            if node.get(i):
                return True
            i = parent.get(i)
        return False

    fwd = {i for i in ids if not in_backward(i)}
    lo, hi = int(t.steps["ts"].min()), int(t.steps["end"].max())
    g = t.gpu.filter(pl.col("op").is_in(list(fwd)) & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
    return g.height // t.steps.height


@pytest.mark.parametrize(
    ("eager", "fixed", "shapes", "per_step"),
    [
        # HF BERT-base, 12 layers, 16 x 512 tokens: the output's `.permute(0, 2, 1, 3).contiguous()`, one a layer
        ("ab_traced/bert_eager_attn_s512_h100", "ab_traced/bert_eager_attn_s512_h100_fixed", {(16, 512, 12, 64)}, 12),
        # HF Llama, 8 layers, 16 query heads on 4: the output's copy and repeat_kv's two (K and V) a layer
        ("ab_traced/llama_eager_attn_h100", "ab_traced/llama_eager_attn_h100_fixed",
         {(4, 1024, 16, 64), (4, 4, 4, 1024, 64)}, 24),
    ],
)
def test_relayout_copies_are_what_sdpa_no_longer_runs(eager, fixed, shapes, per_step):
    t = _trace(eager)
    assert _forward_copies(t, shapes) == per_step
    assert _forward_copies(_trace(fixed), shapes) == 0  # the fused program runs none of them
    so = score_ops(t)
    # asked with only the softmax ops as the attention's (score_ops has already added the copies to it)
    found = relayout_copies(t, so.with_columns(score=pl.col("score") & pl.col("softmax")))
    assert found.len() > 0
    counted = t.gpu.filter(pl.col("op").is_in(found.implode()) & (pl.col("ts") >= int(t.steps["ts"].min()))
                           & (pl.col("ts") < int(t.steps["end"].max())))
    assert counted.height // t.steps.height == per_step
    # and the score ops carry them: the fused transform removes their kernels and host ops
    assert set(found.to_list()) <= set(so.filter(pl.col("score"))["op"].to_list())


def test_no_relayout_without_materialized_scores():
    # the SDPA programs have no score tensor: nothing is the eager attention's
    t = _trace("ab_traced/llama_eager_attn_h100_fixed")
    so = score_ops(t)
    assert relayout_copies(t, so.with_columns(score=pl.col("score") & pl.col("softmax"))).len() == 0
