"""Loops over items (traceview/analyses/loops.py) on bundled traces: found where a program loops over a batch's
rows or a list of tensors, and not in a stack of identical layers, each fed by the one before."""

from __future__ import annotations

import pytest
from conftest import SAMPLES

from traceview.analyses.loops import item_loops
from traceview.ingest.loader import load
from traceview.report import select_steps


def _loops(rel: str):
    path = sorted((SAMPLES / rel).glob("*.pt.trace.json*"))[0]
    tr = load(path)
    st = select_steps(tr, None)
    bounds = tuple(st["cpu_ts"].sort().to_list())
    return item_loops(tr, int(st["ts"].min()), int(st["end"].max()), bounds), st.height


def test_a_loss_over_rows() -> None:
    got, n = _loops("user_programs3_h100/per_sample_loss")
    assert got["kind"].to_list() == ["rows"] and got["iterations"][0] == 64 * n


def test_an_update_over_tensors() -> None:
    got, n = _loops("user_programs3_h100/ema_loop")
    assert got["kind"].to_list() == ["tensors"] and got["iterations"][0] == 267 * n


@pytest.mark.parametrize("rel", ["collected2/tiny_ops_n64_eager", "collected2/adamw_single_tensor",
                                 "collected4/decode_static", "user_programs3_h100/per_sample_loss_fixed",
                                 "collected4/ddp_accum4_gloo2"])
def test_chains_of_layers_are_not_loops_over_items(rel: str) -> None:
    """tiny_ops: `x = relu(x @ w + b) * s` sixty times a step (the same four ops, each layer on the last one's
    output); an MLP's linear/relu layers; a static-cache decode; the batched loss; DDP over gloo, whose reducer
    copies each gradient bucket to the host (six `copy_` a step, each ~30 ms waiting for the device: work of
    their own, in runs that only step boundaries separate)."""
    got, _ = _loops(rel)
    assert got.height == 0, got
