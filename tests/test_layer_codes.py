"""The layer attribution's cheaper forms (issue 14) agree with the direct computations they replace, on real
traces of every layer source: per-row layer codes decoded against joins on the strings, the row-aligned node
and ancestor searches against their join/climb forms, the ops fallback's shortcuts against the call tree, and
the layer table's integer sums (grouped by layer ids) against sums over the decoded strings."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import load

from traceview.analyses import layers as L
from traceview.analyses.classify import kernel_bound, partition
from traceview.analyses.tree import ancestor_ids, ancestor_where, call_tree
from traceview.analyses.windows import in_steps
from traceview.model import RUNTIME_CATS
from traceview.ruleapi import RuleContext

TRACES = {
    "modules": "gpu_h200/train_tinygpt_modules.json.gz",  # with backward: the fwdbwd thread map
    "modules_gpt2": "gpu_h200_real/hf_gpt2_train_bf16.json.gz",
    "ops_pseudo": "collected2/adamw_foreach/rank0.1796114829184126559.pt.trace.json.gz",  # Optimizer.step#
    "ops": "gpu_h200/seed_single_gemm_eager.json.gz",
    "module_annotations": "cpu_collected/tinygpt_train/rank0.1796115363572314284.pt.trace.json.gz",
    "annotations": "collected2/compile_graph_break/rank0.1796114856490926696.pt.trace.json.gz",
    "none": "collected2/tiny_ops_n64_cudagraph/rank0.1796114981447180096.pt.trace.json.gz",
}
ALL = list(TRACES.values())


def test_the_traces_cover_every_source():
    assert {k.split("_gpt2")[0].replace("_pseudo", ""): L.attribution(load(v)).source
            for k, v in TRACES.items()} == {k: k for k in
                                            ("modules", "ops", "module_annotations", "annotations", "none")}


@pytest.mark.parametrize("rel", ALL)
def test_gpu_codes_are_the_launching_host_rows_layers(rel):
    """Each GPU activity's decoded layer is its launching runtime call's (else its op's) host layer, by joins."""
    t = load(rel)
    hl = L.host_layers(t)
    cols = ["layer", "layer_class", "depth", "phase"]
    g = t.gpu.select("i", "launch", "op")
    by_launch = g.join(hl, left_on="launch", right_on="i", how="left")
    by_op = g.select("i", "op").join(hl, left_on="op", right_on="i", how="left")
    hit = by_launch["layer"].is_not_null()
    want = by_launch.select("i", *[pl.when(hit).then(pl.col(c)).otherwise(by_op[c]).alias(c) for c in cols])
    want = want.with_columns(pl.col("layer", "layer_class").fill_null(L.UNATTRIBUTED),
                             pl.col("phase").fill_null("other"))
    got = L.gpu_layers(t)
    assert got.height == t.gpu.height
    assert got.select("i", *cols).equals(want.cast(got.select("i", *cols).schema))
    assert hit.sum() > 0 or t.gpu.height == 0  # (the CPU trace has no GPU rows)


@pytest.mark.parametrize("rel", ALL)
def test_top_ops_are_the_top_level_ops_with_their_host_layers(rel):
    t = load(rel)
    want = (L.top_level_ops(t).select("i", "pid", "tid", "ts", "end", "dur")
            .join(L.host_layers(t).select("i", "layer", "phase"), on="i", how="left"))
    assert L._top_ops(t).equals(want)


@pytest.mark.parametrize("rel", ALL)
def test_top_level_ops_are_the_roots_of_the_cpu_op_call_tree(rel):
    """The ops fallback takes `top_level_ops` (a running maximum) for the depth-0 ops of the cpu_op call tree,
    and, those nesting in none of each other, makes every op node a root of the node tree."""
    t = load(rel)
    cols = [c for c in ("i", "cat", "name", "pid", "tid", "ts", "dur", "end", "ev_idx") if c in t.host.columns]
    tree = call_tree(t.host.select(cols).filter(pl.col("cat") == "cpu_op"))
    roots = L.top_level_ops(t)["i"]
    assert roots.equals(tree.filter(pl.col("depth") == 0)["i"])
    if roots.len():
        alone = call_tree(t.host.select(cols).filter(pl.col("i").is_in(roots.implode())))
        assert (alone["depth"] == 0).all()


def _rows_and_nodes(t):
    host = t.host
    rows = host.filter(pl.col("cat").is_in(["cpu_op", *RUNTIME_CATS])).select("i", "pid", "tid", "ts")
    events, _ = L._node_events(t)
    nodes, _ = L._build_tree(host, events)
    node_ev = pl.concat([nodes, L.by_id(host, nodes["i"], "pid", "tid")], how="horizontal").select(
        "i", "pid", "tid", "ts", "end", pl.col("pnode").alias("parent"), pl.col("ndepth").alias("depth"))
    return rows, node_ev


@pytest.mark.parametrize("rel", ALL)
def test_innermost_node_search_is_the_join_search(rel):
    t = load(rel)
    rows, node_ev = _rows_and_nodes(t)
    got = L._innermost_ids(rows, node_ev)
    want = L._np_ids(L.by_id(L._innermost_joins(rows, node_ev).sort("i"), rows["i"], "node")["node"])
    assert got.tolist() == want.tolist()
    if node_ev.height and rows.height:
        assert (got >= 0).any()


@pytest.mark.parametrize("rel", ALL)
def test_autograd_ancestor_by_mask_is_the_expression_and_a_plain_climb(rel):
    t = load(rel)
    host = t.host
    q = host.filter(pl.col("cat").is_in(["cpu_op", *RUNTIME_CATS])).select("i")
    cond = ((pl.col("cat") == "cpu_op") & (pl.col("fwd_tid") > 0)).fill_null(False)
    mask = host.select(cond)[:, 0].to_numpy()
    got = ancestor_ids(host, q["i"], mask, include_self=True)
    by_expr = ancestor_where(host, q, cond, "a", include_self=True)
    assert L._np_ids(L.by_id(by_expr.sort("i"), q["i"], "a")["a"]).tolist() == got.tolist()
    # a plain climb: one join per level of the call tree
    info = host.select("i", "parent", ok=cond)
    cur = q.join(info, on="i").select("i", pl.col("i").alias("at"), "ok", "parent")
    found = []
    while cur.height:
        found.append(cur.filter("ok").select("i", pl.col("at").alias("a")))
        cur = (cur.filter(~pl.col("ok") & pl.col("parent").is_not_null())
               .select("i", pl.col("parent").alias("at")).join(info.rename({"i": "at"}), on="at"))
    climb = pl.concat(found).sort("i")
    assert L._np_ids(L.by_id(climb, q["i"], "a")["a"]).tolist() == got.tolist()
    if "modules" in rel and "tinygpt" in rel:
        assert (got >= 0).sum() > 1000  # the backward pass is there


def test_distinct_is_numpy_unique():
    t = load(TRACES["modules"])
    mask = t.host.select(((pl.col("cat") == "cpu_op") & (pl.col("fwd_tid") > 0)).fill_null(False))[:, 0].to_numpy()
    q = t.host.filter(pl.col("cat") == "cuda_runtime")["i"]
    ids = ancestor_ids(t.host, q, mask, include_self=True)
    ids = ids[ids >= 0]
    assert ids.size > 100
    u, inv = L._distinct(ids)
    wu, winv = np.unique(ids, return_inverse=True)
    assert u.tolist() == wu.tolist() and inv.tolist() == winv.tolist()


@pytest.mark.parametrize("rel", ALL)
def test_layer_codes_by_dict_are_the_rank_codes(rel, monkeypatch):
    """A few nodes are numbered in Python, many by a polars rank: the same names table up to the codes' order,
    and every node decodes to its own [layer, layer_class, depth]."""
    t = load(rel)
    events, _ = L._node_events(t)
    nodes, _ = L._build_tree(t.host, events)
    nl = nodes.select("layer", pl.col("cls").alias("layer_class"), pl.col("ndepth").alias("depth"))
    few, few_code = L._layer_codes(nl)
    monkeypatch.setattr(L, "_FEW_NODES", -1)
    many, many_code = L._layer_codes(nl)
    for names, code in ((few, few_code), (many, many_code)):
        assert names.row(-1) == (L.UNATTRIBUTED, L.UNATTRIBUTED, None)
        assert names[:-1].n_unique() == names.height - 1
        assert names[code[:-1]].equals(nl.cast(names.schema))
        assert code[-1] == names.height - 1
    assert sorted(few.rows(), key=str) == sorted(many.rows(), key=str)


@pytest.mark.parametrize("rel", [TRACES["modules"], TRACES["modules_gpt2"], TRACES["ops_pseudo"], TRACES["ops"]])
def test_layer_table_sums_are_the_string_sums(rel):
    """The table's integer columns (grouped by layer id) against sums over the decoded layer strings."""
    t = load(rel)
    steps = t.steps
    part = partition(t, steps)
    tb = L.layer_table(t, steps, kb=kernel_bound(t), part=part)
    tree = L.attribution(t).tree
    # each layer with itself and every layer above it, by a climb of the parent pointers (the table adds its sums up
    # the tree level by level instead)
    pairs = L.ancestor_pairs(tree)
    anc = pl.DataFrame([tree["layer"].gather(pairs["lid"]), tree["layer"].gather(pairs["alid"]).alias("anc")])
    g = in_steps(t.gpu.filter(pl.col("kind") != "sync").select("i", "ts", "dur"), steps).join(
        L.gpu_layers(t), on="i")
    incl = g.join(anc, on="layer").group_by("anc").agg(pl.col("dur").sum().alias("gpu_ns"), pl.len().alias("kernels"),
                                                       pl.col("dur").filter(pl.col("phase") == "backward").sum()
                                                       .alias("bwd_gpu_ns"))
    own = g.group_by("layer").agg(pl.col("dur").sum().alias("self_gpu_ns"))
    top = in_steps(L._top_ops(t).select("ts", "dur", "layer"), steps)
    cpu = top.join(anc, on="layer").group_by("anc").agg(pl.col("dur").sum().alias("cpu_ns"))
    segs = L.segment_layers(t, part).with_columns(d=pl.col("end") - pl.col("ts"))
    shares = segs.join(anc, on="layer").group_by("anc").agg(pl.col("d").sum().alias("time_ns"))
    want = (tree.select("layer").join(incl.rename({"anc": "layer"}), on="layer", how="left")
            .join(own, on="layer", how="left").join(cpu.rename({"anc": "layer"}), on="layer", how="left")
            .join(shares.rename({"anc": "layer"}), on="layer", how="left").fill_null(0))
    cols = ["gpu_ns", "kernels", "bwd_gpu_ns", "self_gpu_ns", "cpu_ns", "time_ns"]
    got = tb.filter(pl.col("layer") != L.UNATTRIBUTED).select("layer", *cols).fill_null(0)  # (no segment: null)
    assert got.sort("layer").cast({c: pl.Int64 for c in cols}).equals(
        want.select("layer", *cols).sort("layer").cast({c: pl.Int64 for c in cols}))
    un = tb.filter(pl.col("layer") == L.UNATTRIBUTED)
    un_gpu = int(g.filter(pl.col("layer") == L.UNATTRIBUTED)["dur"].sum())
    assert (int(un["gpu_ns"].sum()) if un.height else 0) == un_gpu
    assert int(tb["self_gpu_ns"].sum()) == int(g["dur"].sum()) > 0


@pytest.mark.parametrize("rel", [TRACES["modules"], TRACES["ops_pseudo"]])
def test_layer_of_is_the_mode_of_the_kernels_layer_strings(rel):
    t = load(rel)
    ctx, _ = RuleContext.prepare(t, t.steps)
    gl = L.gpu_layers(t)
    for k in (1, 7, 50, gl.height):
        ids = gl["i"].gather(pl.Series(np.arange(0, gl.height, max(1, gl.height // k))[:k], dtype=pl.UInt32))
        lay = gl.filter(pl.col("i").is_in(ids.implode()))["layer"]
        lay = lay.filter(~lay.str.starts_with("("))
        want = str(lay.mode().sort().first()) if lay.len() else None
        assert ctx.layer_of(ids) == want
    assert ctx.layer_of(gl["i"]) is not None


@pytest.mark.parametrize("rel", [TRACES["ops"], TRACES["ops_pseudo"]])
def test_op_tree_is_the_general_tree(rel):
    """Op nodes alone (the ops fallback) build their tree per layer (`_op_tree`): the same node layers and the same
    tree as the general nesting path."""
    t = load(rel)
    events, source = L._node_events(t)
    ops = events.filter(pl.col("src") == "op")
    assert source == "ops" and ops.height
    fast, fast_tree = L._build_tree(t.host, ops)
    slow, slow_tree = L._build_tree(t.host, ops, ops_alone=False)
    cols = ["i", "pnode", "layer", "label", "cls", "ndepth", "src", "ts", "end"]
    assert fast.select(cols).equals(slow.select(cols))
    assert fast_tree.sort("layer").equals(slow_tree.sort("layer"))
    assert fast_tree["calls"].sum() == ops.height
