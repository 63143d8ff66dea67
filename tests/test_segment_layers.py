"""layers.segment_layers: the per-thread binary search (few threads) names the same layer per classifier
segment as the cross join + as-of join over every thread it replaces."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import load
from traceview.analyses import layers as L
from traceview.analyses.tree import call_tree
from traceview.ruleapi import RuleContext


@pytest.mark.parametrize("rel", ["gpu_h200/train_tinygpt_modules.json.gz", "gpu_h200_real/hf_gpt2_train_bf16.json.gz"])
def test_few_threads_search_equals_cross_join(rel, monkeypatch):
    t = load(rel)
    # two host threads with layered ops (main + autograd): the multi-thread path
    top = L._top_ops(t).filter(pl.col("layer") != L.UNATTRIBUTED)
    assert top.select("pid", "tid").unique().height == 2
    ctx, _ = RuleContext.prepare(t, t.steps)
    fast = L.segment_layers(t, ctx.part)
    monkeypatch.setattr(L, "_FEW_THREADS", 0)
    slow = L.segment_layers(t, ctx.part)
    assert fast.equals(slow)
    # most segments get a layer; their total time matches segment by segment
    named = fast.filter(pl.col("layer") != L.UNATTRIBUTED)
    assert named.height > fast.height // 2
    assert int((fast["end"] - fast["ts"]).sum()) == int((ctx.part["end"] - ctx.part["ts"]).sum())


@pytest.mark.parametrize("rel", ["gpu_h200/train_tinygpt_modules.json.gz", "gpu_h200_real/hf_gpt2_train_bf16.json.gz"])
def test_open_at_equals_asof_join(rel):
    """`_open_at`'s binary search finds, per segment midpoint, the same GPU activity and host op as polars' as-of
    join it replaces (the last row started at or before the time, ties included; none once that row has ended)."""
    t = load(rel)
    ctx, _ = RuleContext.prepare(t, t.steps)
    q = ctx.part.select(t=(pl.col("ts") + pl.col("end")) // 2)
    g = (t.gpu.select(pl.col("ts").alias("_s"), pl.col("end").alias("_e")).sort("_s").with_row_index("_p"))
    h = (t.host.filter(pl.col("cat") == "cpu_op").select(pl.col("ts").alias("_s"), pl.col("end").alias("_e"))
         .sort("_s").with_row_index("_p"))
    # starts rounded down to 10 µs: ties, where the search must take the last row, as the join does
    tied = h.with_columns(pl.col("_s") // 10_000 * 10_000)
    assert tied["_s"].is_duplicated().sum() > 100
    for rows in (g, h, tied):
        want = (q.join_asof(rows, left_on="t", right_on="_s", strategy="backward")
                .select(pl.when(pl.col("t") < pl.col("_e")).then(pl.col("_p")).fill_null(-1))[:, 0].to_numpy())
        got = L._open_at(q, rows, "_s", "_e")
        assert (got == want).all()
        assert (got >= 0).sum() > q.height // 4  # most midpoints fall in an activity or op
    assert (L._open_at(q, g.head(0), "_s", "_e") == -1).all()


def test_top_rows_are_the_cpu_op_roots():
    """The kept top-level op rows are the cpu_ops at depth 0 of the cpu_op call tree (built by `call_tree`, not by
    the running maximum `roots` uses), in host order."""
    t = load("gpu_h200/train_tinygpt_modules.json.gz")
    top = L.top_level_ops(t)
    ops = t.host.filter(pl.col("cat") == "cpu_op")
    want = ops.filter(call_tree(ops)["depth"] == 0)
    assert top.height == want.height > 100
    assert top["i"].equals(want["i"])
    assert top.columns == ["i", "name", "pid", "tid", "ts", "end", "dur"]


def test_shape_signatures_cover_the_layers_of_forward_ops_with_dims():
    """Each layer with a signature runs (itself or in a sub-layer) a forward cpu_op with tensor dims, and every such
    layer has one: checked against a plain join of the host rows with `host_layers` (no mask or position lookup)."""
    t = load("gpu_h200_real/hf_gpt2_train_bf16.json.gz")
    sig = L.shape_signatures(t)
    ops = (t.host.filter((pl.col("cat") == "cpu_op") & (pl.col("input_dims").cat.len_bytes() > 2))
           .select("i", d=pl.col("input_dims").cast(pl.String)).filter(pl.col("d").str.contains(r"\d"))
           .join(L.host_layers(t).filter(pl.col("phase") == "forward"), on="i"))
    tree = L.attribution(t).tree
    pairs = L.ancestor_pairs(tree)
    anc = pl.DataFrame([tree["layer"].gather(pairs["lid"]), tree["layer"].gather(pairs["alid"]).alias("anc")])
    want = set(ops.join(anc, on="layer")["anc"].to_list())
    assert len(want) > 100
    assert set(sig["layer"].to_list()) == want
    assert sig["shapes"].null_count() == 0 and sig["shape_sig"].n_unique() > 10


@pytest.mark.parametrize("chunk", [1 << 20, 1000])
def test_class_time_equals_group_by(chunk, monkeypatch):
    """The layer table's time per (layer, class): `_class_time`'s chunked bincount against a polars group-by of the
    segments (integer sums), one chunk and many."""
    monkeypatch.setattr(L, "_CHUNK", chunk)
    t = load("gpu_h200_real/hf_gpt2_train_bf16.json.gz")
    ctx, _ = RuleContext.prepare(t, t.steps)
    part = ctx.part
    lid = L._segment_codes(t, part).to_numpy().astype("uint32")
    got = L._class_time(part, lid).sort("lid", "cls")
    want = (part.select(pl.col("cls").cast(pl.String), dur=pl.col("end") - pl.col("ts"))  # (ctx.part's: an Enum)
            .hstack([pl.Series("lid", lid, pl.UInt32)])
            .group_by("lid", "cls").agg(pl.col("dur").sum()).select("lid", "cls", "dur").sort("lid", "cls"))
    assert part.height > 3 * chunk or chunk > part.height
    assert got.height > 20 and got["cls"].n_unique() >= 4
    assert got.equals(want)
    assert int(got["dur"].sum()) == int((part["end"] - part["ts"]).sum())


def test_enum_partition_gives_the_same_layer_table():
    """`partition(enum=True)` (the layer view's own copy: the classes as an Enum, a byte per segment) holds the same
    segments as the cached string partition, and the layer table's class shares from it are the same."""
    from traceview.analyses import classify

    t = load("gpu_h200_real/hf_gpt2_train_bf16.json.gz")
    kb = classify.kernel_bound(t)
    text = classify.partition(t, t.steps, kb)
    codes = classify.partition(t, t.steps, kb, keep=False, enum=True)
    assert codes["cls"].dtype == classify.CLASS_ENUM and text["cls"].dtype == pl.String
    assert codes.with_columns(pl.col("cls").cast(pl.String)).equals(text)
    assert text["cls"].n_unique() >= 4
    a = L.layer_table(t, t.steps, kb=kb, part=text)
    b = L.layer_table(t, t.steps, kb=kb, part=codes)
    assert "share_gpu_compute" in a.columns and a["dominant"].drop_nulls().len() > 10
    assert a.equals(b)


def test_kernel_bound_without_shapes_equals_the_split_costs(monkeypatch):
    """A trace whose ops have no shapes gets its kernels' costs as null literals (no column of nulls per kernel): the
    same frame as the general path (costs joined and split over the kernels), forced here by one extra op cost for
    an op no kernel launched."""
    from traceview.analyses import roofline as R

    t = load("collected2/tiny_ops_n64_cudagraph/rank0.1796114981447180096.pt.trace.json.gz")
    fast = R.kernel_bound(t)
    assert fast.height > 500 and fast["flops"].null_count() == fast.height
    real = R.op_costs

    def with_extra(trace, ids=None):
        c = real(trace, ids)
        extra = pl.DataFrame({"op": [2**31], "flops": [1.0]}, schema={"op": c.schema["op"], "flops": pl.Float64})
        return pl.concat([c, extra], how="diagonal_relaxed")

    monkeypatch.setattr(R, "op_costs", with_extra)
    slow = R.kernel_bound(t)
    assert fast.equals(slow)
    assert fast["bound"].n_unique() == 2 and (fast["source"] == "name").all()
