"""Loops over items (traceview/analyses/loops.py) on bundled traces: found where a program loops over a batch's
rows or a list of tensors, and not in a stack of identical layers, each fed by the one before."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import SAMPLES

from traceview.analyses.loops import _strictly_sorted, item_loops, loop_runs
from traceview.analyses.rowid import positions
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


def test_top_level_ops_by_position_match_the_join() -> None:
    """`loop_runs` finds each op's parent by position (no hash join of every op onto the host rows) and skips the
    sort when the ops are already in (thread, time) order with no tie; on a four-thread trace (DDP over gloo) the
    top-level ops are the same rows, in the same order, as the join and the sort found."""
    path = sorted((SAMPLES / "collected4/ddp_accum4_gloo2").glob("*.pt.trace.json*"))[0]
    h = load(path).host
    parents = h.select(pl.col("i").alias("parent"), pl.col("cat").alias("_pcat"))
    want = (h.filter(pl.col("cat") == "cpu_op").join(parents, on="parent", how="left")
            .filter(pl.col("_pcat").is_null() | (pl.col("_pcat") != "cpu_op")).sort("tid", "ts"))
    ops = h.filter(pl.col("cat") == "cpu_op")
    nested = (h["cat"] == "cpu_op").gather(positions(h, ops["parent"])).fill_null(False)
    got = ops.filter(~nested)
    tid, ts = got["tid"].to_numpy(), got["ts"].to_numpy()
    assert want["tid"].n_unique() == 4 and not _strictly_sorted(tid, ts)  # (threads interleaved in time)
    assert got.height == want.height == 5157 and got.sort("tid", "ts")["i"].to_list() == want["i"].to_list()
    wt, ws = want["tid"].to_numpy(), want["ts"].to_numpy()
    ties = bool(((wt[1:] == wt[:-1]) & (ws[1:] == ws[:-1])).any())
    assert _strictly_sorted(wt, ws) == (not ties)
    assert not _strictly_sorted(np.array([1, 1]), np.array([5, 5]))  # (a tie: the sort decides the order)
