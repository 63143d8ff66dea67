"""Cheaper forms in the rules (issue 14, round 5) agree with the direct computations on real bundled traces: chain
lengths and positions without per-group windows, the per-chain aggregation without per-group sorts, the chain gaps
without a per-chain shift, a regex and its exclusion on the distinct names in one pass, the rules that test the
distinct host names before scanning the rows, the low-precision GEMM count from the distinct kernel names."""

from __future__ import annotations

import glob

import polars as pl
import pytest
from conftest import SAMPLES, load
from traceview.rules import elementwise_chain, fp32_gemm, recompile, unfused_optimizer

from traceview.analyses import names
from traceview.analyses.classify import sync_calls
from traceview.analyses.features import host_names
from traceview.analyses.intervals import merge
from traceview.analyses.rowid import join_by_id
from traceview.analyses.whatif import shrink_kernels
from traceview.options import Options
from traceview.ruleapi import RuleContext

CHAIN_TRACES = ["gpu_h200/elementwise_chain_eager.json.gz", "gpu_h200/train_tinygpt_modules.json.gz",
                "gpu_h200_real/hf_gpt2_train_bf16.json.gz"]


def _one(pattern: str) -> str:
    """The path (relative to sample_traces) of the one bundled trace matching `pattern`."""
    (p,) = glob.glob(str(SAMPLES / pattern))
    return p[len(str(SAMPLES)) + 1:]


COMPILE = _one("collected2/compile_recompile_every_step/*.pt.trace.json.gz")
SINGLE_TENSOR = _one("collected2/adamw_single_tensor/*.pt.trace.json.gz")


def _ctx(rel: str, rule):
    t = load(rel)
    ctx, _ = RuleContext.prepare(t, t.steps)
    return ctx.for_rule(rule, Options().options_for(rule))


def _per_chain_sorted(ch: pl.DataFrame) -> pl.DataFrame:
    """The per-chain aggregation as before: each group sorted by `pos`, the groups sorted by chain."""
    per = ch.group_by("chain").agg(
        pl.col("step").first(), pl.col("device").first(), pl.col("stream").first(), pl.col("k").first(),
        pl.col("ts").min(), pl.col("end").max(), pl.col("dur").sum().alias("time"), pl.col("dur").min().alias("min_dur"),
        pl.col("bytes").sum().alias("bytes"), pl.col("bytes").is_null().any().alias("_nob"),
        (pl.col("in0_bytes").sort_by("pos").first() + pl.col("extra_bytes").fill_null(0).sum()
         + pl.col("out_bytes").sort_by("pos").last()).alias("fused_bytes"),
        pl.col("op_name").fill_null("?").sort_by("pos").str.join(" → ").alias("ops"),
        pl.col("name").sort_by("pos").alias("kernels"), pl.col("i").alias("ids")).sort("chain")
    return per


@pytest.mark.parametrize("rel", CHAIN_TRACES)
def test_chain_lengths_positions_and_aggregates_match_the_windowed_forms(rel):
    ctx = _ctx(rel, elementwise_chain)
    ch = elementwise_chain.chains(ctx.trace, ctx.steps, ctx.kb)
    assert ch["chain"].n_unique() > 1
    # k and pos as per-chain windows would give them
    ref = ch.with_columns(_k=pl.len().over("chain"), _pos=pl.int_range(pl.len()).over("chain"))
    assert ref["_k"].cast(pl.UInt32).equals(ch["k"], check_names=False)
    assert ref["_pos"].equals(ch["pos"], check_names=False)
    per = elementwise_chain.per_chain(ch)
    want = _per_chain_sorted(ch)
    same = [c for c in want.columns if c != "fused_bytes"]
    assert per.select(same).equals(want.select(same))
    # the fused bytes: the first input, the extra inputs and the last output, plus what the reference does not
    # count (inputs read from no earlier kernel, outputs no later one reads, a batch norm's second pass): never less
    got = per.select("fused_bytes").to_series().fill_null(-1.0)
    assert (got >= want["fused_bytes"].fill_null(-1.0) - 1e-6).all()


@pytest.mark.parametrize("rel", CHAIN_TRACES)
def test_chain_removes_match_the_per_chain_shift(rel):
    ctx = _ctx(rel, elementwise_chain)
    ch = elementwise_chain._chains(ctx)
    # the reference: chains re-sorted and each kernel's previous end taken inside its chain
    per = elementwise_chain._per_chain(ctx).select("chain", (pl.col("fused_time") / pl.col("time")).alias("_r"))
    k = ch.join(per, on="chain").select("i", (pl.col("dur") * pl.col("_r")).cast(pl.Int64).alias("new_dur"))
    tails = shrink_kernels(ctx.trace, k, sync_calls(ctx.trace))
    g = ch.sort("chain", "pos").with_columns(_gts=pl.col("end").shift().over("chain"))
    g = join_by_id(g, "i", ctx.trace.gpu, pl.col("op").alias("_op"))
    g = join_by_id(g, "_op", ctx.trace.host, pl.col("dur").alias("_host"))
    g = g.filter(pl.col("pos") > 0).with_columns(_gap=(pl.col("ts") - pl.col("_gts")).clip(lower_bound=0))
    g = g.with_columns(_frac=pl.min_horizontal(pl.lit(1.0), pl.col("_host").fill_null(0).sum().over("chain")
                                               / pl.col("_gap").sum().over("chain")).fill_nan(0.0))
    gaps = g.filter(pl.col("_gap") > 0).select(
        ts=pl.col("_gts"), end=pl.col("_gts") + (pl.col("_gap") * pl.col("_frac")).cast(pl.Int64))
    want = merge(pl.concat([tails, gaps.filter(pl.col("end") > pl.col("ts"))]))
    got = elementwise_chain.removes(ctx)
    assert got.equals(want)
    assert got.height > 0


def test_contains_unless_is_both_regexes_on_every_row(monkeypatch):
    g = load("gpu_h200_real/hf_gpt2_train_bf16.json.gz").gpu
    rows = pl.col("name").str.contains("(?i)gemm|kernel") & ~pl.col("name").str.contains("(?i)bf16|elementwise")
    want = g.filter(rows)["i"]
    assert g.filter(names.contains(g, "(?i)gemm|kernel", unless="(?i)bf16|elementwise"))["i"].equals(want)  # per row
    monkeypatch.setattr(names, "_MIN_ROWS", 0)  # the distinct-names path
    assert g.filter(names.contains(g, "(?i)gemm|kernel", unless="(?i)bf16|elementwise"))["i"].equals(want)
    assert 0 < want.len() < g.height


@pytest.mark.parametrize("rel", [COMPILE, "gpu_h200/train_tinygpt_modules.json.gz"])
def test_compile_spans_match_the_row_scan(rel, monkeypatch):
    ctx = _ctx(rel, recompile)
    h = ctx.trace.host.filter((pl.col("cat") == "cpu_op") & pl.col("name").str.contains(recompile.COMPILE_RE))
    got = recompile.compile_spans(ctx)
    assert got["i"].to_list() == [i for i in h["i"].to_list() if i in set(got["i"].to_list())]
    assert set(got["i"].to_list()) <= set(h["i"].to_list())
    assert got.columns == ["i", "name", "tid", "ts", "end", "step"]
    assert (got.height > 0) == (rel == COMPILE)
    # the rows scanned whatever the names say: the same frame
    monkeypatch.setattr(recompile, "host_names", lambda *_: pl.Series(["dynamo"]))
    assert recompile.compile_spans(ctx).equals(got)
    want = host_names(ctx.trace, "cpu_op")
    assert sorted(want.to_list()) == sorted(ctx.trace.host.filter(pl.col("cat") == "cpu_op")["name"].unique().to_list())


def test_compile_spans_empty_frame_keeps_the_schema():
    with_spans = recompile.compile_spans(_ctx(COMPILE, recompile))
    without = recompile.compile_spans(_ctx("gpu_h200/train_tinygpt_modules.json.gz", recompile))
    assert without.height == 0 and without.schema == with_spans.schema


@pytest.mark.parametrize("rel", [SINGLE_TENSOR, "gpu_h200/seed_single_gemm_eager.json.gz"])
def test_optimizer_spans_shortcut_only_when_no_annotation_matches(rel, monkeypatch):
    ctx = _ctx(rel, unfused_optimizer)
    got = unfused_optimizer.optimizer_spans(ctx, 2)
    has = host_names(ctx.trace, "user_annotation").str.contains(unfused_optimizer.OPT_RE).any()
    assert has == (rel == SINGLE_TENSOR) and (got.height > 0) == has
    # the rows scanned whatever the names say: the same frame
    monkeypatch.setattr(unfused_optimizer, "host_names", lambda *_: pl.Series(["Optimizer.step#AdamW.step"]))
    again = unfused_optimizer.optimizer_spans(ctx, 2)
    assert again.sort("i").equals(got.sort("i")) if got.height else again.equals(got)  # (join: rows in any order)


@pytest.mark.parametrize("rel", ["gpu_h200_real/hf_gpt2_train_bf16.json.gz", "gpu_h200/train_tinygpt_modules.json.gz"])
def test_low_precision_gemm_count_is_the_row_count(rel):
    g = load(rel).gpu
    want = g.filter((pl.col("kind") == "compute") & pl.col("name").str.contains(fp32_gemm.LOW_PRECISION_RE)
                    & pl.col("name").str.contains(r"(?i)gemm|xmma|cutlass|nvjet|conv")).height
    assert fp32_gemm._count_low_precision_gemms(g) == want
    assert (want > 0) == ("bf16" in rel)


@pytest.mark.parametrize("rel", ["nccl_h200x2/ddp_balanced/rank0.1795959685011564177.pt.trace.json.gz",
                                 "gpu_h200/train_tinygpt_modules.json.gz"])
def test_next_on_stream_is_the_per_stream_shift(rel):
    from traceview.rules.gemm_epilogue import _next_on_stream

    g = load(rel).gpu.select("i", "device", "stream", "ts", "op").sort("device", "stream", "ts", maintain_order=True)
    for n in (1, 2):
        want = g.select(pl.col("i").shift(-n).over("device", "stream"))["i"]
        assert g.select(_next_on_stream("i", n))["i"].equals(want)
        assert want.null_count() >= n * g.select("device", "stream").n_unique()  # each stream's last rows: none


@pytest.mark.parametrize("rel", CHAIN_TRACES + [COMPILE])
def test_events_per_step_is_the_per_category_count(rel):
    from traceview.analyses.overhead import COST_US, events_per_step
    from traceview.model import RUNTIME_CATS

    t = load(rel)
    lo, hi = int(t.steps["cpu_ts"].min()), int(t.steps["cpu_end"].max())
    per_cat = dict(t.host.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi)).group_by("cat").len().iter_rows())
    kinds = {"op": ["cpu_op", "user_annotation"], "runtime": list(RUNTIME_CATS), "python": ["python_function"]}
    want = {k: round(sum(per_cat.get(c, 0) for c in cats) / t.steps.height, 1) for k, cats in kinds.items()}
    got = events_per_step(t, t.steps)
    assert got == want and list(got) == list(COST_US)
    assert got["op"] > 0 and got["runtime"] > 0


def _features_by_name_tests(t, kb):
    """features.detect as first written: each distinct-name test its own query, cpu ops and annotations together."""
    from traceview.analyses import features as F
    from traceview.model import RUNTIME_CATS

    h = t.host.select("cat", "name")
    ops = h.filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))["name"].unique()
    rt = h.filter(pl.col("cat").is_in(RUNTIME_CATS))["name"].unique()
    kn = t.gpu.filter(pl.col("kind") == "compute")["name"]
    dl = ops.filter(ops.str.starts_with("enumerate(DataLoader)#"))
    workers = None
    if dl.len():
        workers = bool(dl.str.contains(F.WORKERS_RE).any()) or not bool(dl.str.contains(F.SINGLE_PROCESS_RE).any())
    return F.Features(
        cuda_graphs=bool(rt.str.contains(F.GRAPH_LAUNCH_RE).any() or t.gpu["graph"].fill_null(False).any()),
        compiled=bool(ops.str.contains(F.COMPILED_REGION_RE).any()),
        triton_kernels=int(kn.str.contains(F.TRITON_RE).sum()),
        compiling=bool(ops.str.contains(F.COMPILE_RE).any()),
        fused_optimizer=bool(ops.str.contains(F.FUSED_OPT_RE).any() or kn.str.contains(r"(?i)fused_adam|fused_sgd").any()),
        foreach_optimizer=bool(ops.str.contains(F.FOREACH_RE).any()),
        low_precision=bool(kn.str.contains(F.LOW_PRECISION_RE).any() or bool((kb["bpe"] <= 2).any())),
        dataloader_workers=workers)


FEATURE_TRACES = [COMPILE, SINGLE_TENSOR, _one("collected2/adamw_fused/*.pt.trace.json.gz"),
                  _one("collected2/tiny_ops_n64_cudagraph/*.pt.trace.json.gz"),
                  _one("collected2/cnn_input_nw8/*.pt.trace.json.gz"), *CHAIN_TRACES]


def test_features_match_one_query_per_name_test():
    from traceview.analyses import classify
    from traceview.analyses.features import detect

    seen = set()
    for rel in FEATURE_TRACES:
        t = load(rel)
        kb = classify.kernel_bound(t)
        got = detect(t, kb)
        assert got == _features_by_name_tests(t, kb), rel
        seen |= {k for k, v in got.to_dict().items() if v}
    # every feature is present in some trace: each test is exercised both ways
    assert seen == set(detect(load(CHAIN_TRACES[0])).to_dict())


@pytest.mark.parametrize("rel", ["gpu_h200_memory/memory_pressure_empty_cache.json.gz",
                                 _one("kineto_resnet50/resnet50_num_workers_0/*.pt.trace.json.gz")])
def test_memory_events_fill_totals_only_where_missing(rel):
    from traceview.analyses import memory
    from traceview.analyses.windows import host_step_of

    t = load(rel)
    m = t.memory.filter(pl.col("device_type") == memory.GPU_DEVICE_TYPE).select(
        "ts", "tid", "bytes", "total_allocated", "total_reserved", pl.col("device_id").alias("device"))
    run = pl.col("bytes").cum_sum().over("device")
    want = m.sort("ts").with_columns(total_allocated=pl.col("total_allocated").fill_null(
        run - run.min().over("device").clip(upper_bound=0)))
    want = host_step_of(want, t.steps, "ts").filter(pl.col("step").is_not_null()).sort("ts")
    got = memory.gpu_events(t, t.steps)
    assert got.equals(want) and got.height > 0
    assert (m["total_allocated"].null_count() == m.height) == ("kineto" in rel)  # both paths


def test_memory_step_summary_once_per_host_spans():
    from traceview.analyses import memory

    t = load("gpu_h200_memory/memory_pressure_empty_cache.json.gz")
    got = memory.step_summary(t, t.steps)
    assert got is memory.step_summary(t, t.steps.select("step", "cpu_ts", "cpu_end"))  # one computation
    assert got.equals(memory.per_step(memory.gpu_events(t, t.steps))) and got.height > 0


@pytest.mark.parametrize("rel", CHAIN_TRACES)
def test_classification_with_the_callers_shares_is_the_same(rel):
    from traceview.analyses import classify

    t = load(rel)
    ctx, _ = RuleContext.prepare(t, t.steps)
    own = classify.classification(t, ctx.steps, ctx.part, ctx.kb)
    assert classify.classification(t, ctx.steps, ctx.part, ctx.kb, classify.shares(ctx.part)) == own
    assert own["steps"] and own["dominant"]
