"""Loops over items (traceview/analyses/loops.py) on bundled traces: found where a program loops over a batch's
rows or a list of tensors, and not in a stack of identical layers, each fed by the one before."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import SAMPLES

from traceview.analyses.loops import item_loops, loop_runs
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


def test_a_loop_over_images_with_a_random_flip() -> None:
    """`for i in range(64): t, left = randint(...); img = x[i, :, t:t+224, left:left+224]; if random() < 0.5:
    img = img.flip(-1); out.append((img.float() / 255 - mean) / std)`: the flip makes iterations differ (11 or 12
    ops), so no sequence repeats back to back; the slice of the batch each iteration takes (aten::select on the
    [64, 3, 256, 256] uint8 batch) marks them, and the 11 ops every iteration runs are the loop's."""
    got, n = _loops("user_programs4_h100/gpu_augment_loop")
    assert got["kind"].to_list() == ["rows"] and got["iterations"][0] == 64 * n
    assert got["ops"][0].to_list() == ["aten::randint", "aten::unbind", "aten::item", "aten::item", "aten::select",
                                       "aten::slice", "aten::slice", "aten::to", "aten::div", "aten::sub", "aten::div"]
    assert got["optional"][0].to_list() == ["aten::flip"]


def test_the_flipped_loop_runs_from_its_first_randint_to_its_last_normalisation() -> None:
    """Each step's run: the first iteration starts at its randint (the ops before the anchor every iteration starts
    with), the second 11 or 12 ops later, and the last ends at most one op short of the augmentation's end (the
    last iteration's flip, when it has one, does not show in the count it is given)."""
    path = sorted((SAMPLES / "user_programs4_h100/gpu_augment_loop").glob("*.pt.trace.json*"))[0]
    tr = load(path)
    st = select_steps(tr, None)
    runs = loop_runs(tr, int(st["ts"].min()), int(st["end"].max()), tuple(st["cpu_ts"].sort().to_list()))
    runs = runs.filter(pl.col("kind") == "rows")
    assert runs.height == st.height and runs["iterations"].to_list() == [64] * st.height
    top = tr.host.filter((pl.col("cat") == "cpu_op") & (pl.col("depth") == 1)).sort("ts")
    for r in runs.iter_rows(named=True):
        inside = top.filter((pl.col("ts") >= r["ts"]) & (pl.col("ts") < r["end"]))["name"]
        assert inside[0] == "aten::randint" and inside.to_list().count("aten::select") == 64
        first = top.filter((pl.col("ts") >= r["ts"]) & (pl.col("ts") < r["second"])).height
        after = top.filter(pl.col("ts") >= r["end"])["name"].head(2).to_list()
        assert first in (11, 12) and after[0] in ("aten::div", "aten::stack")


def test_a_loop_over_some_rows_is_not_a_loop_over_a_batch() -> None:
    """An anchored loop is reported when it visits every row of what it slices (its iterations as many as the input
    has along one dimension): Lightning's DataLoader fetches its 32 samples one by one from a 1984-row
    TensorDataset (aten::select of the [1984, 128, 384] inputs and of the [1984] labels, 32 times a step), rows
    its sampler picked, on the host: not the rows of one batch that one batched call computes."""
    path = sorted((SAMPLES / "user_programs_h100/lightning").glob("*.pt.trace.json*"))[0]
    tr = load(path)
    st = select_steps(tr, None)
    runs = loop_runs(tr, int(st["ts"].min()), int(st["end"].max()), tuple(st["cpu_ts"].sort().to_list()))
    assert runs.filter(pl.col("kind").is_not_null()).height == 0
    fetch = runs.filter(pl.col("ops").list.first() == "aten::select")
    assert fetch["iterations"].to_list() == [64] * st.height  # (the two selects of 32 samples: a repeat of one op)
