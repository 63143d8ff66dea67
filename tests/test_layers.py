"""Per-layer view (issue 4) on real traces, cross-checked against the raw JSON."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
from conftest import SAMPLES, load, raw_events

from traceview.analyses import layers as L
from traceview.analyses.classify import kernel_bound, partition
from traceview.analyses.windows import in_steps
from traceview.options import Options
from traceview.ruleapi import RuleContext
from traceview.sections.findings import run_rules


def layer_table(t, steps=None, **kw) -> pl.DataFrame:
    """The layer table with the roofline and the classifier's shares, as the layers section builds it."""
    steps = t.steps if steps is None else steps
    return L.layer_table(t, steps, kb=kernel_bound(t), part=partition(t, steps), **kw)

TINY = "gpu_h200/train_tinygpt_modules.json.gz"
GPT2 = "gpu_h200_real/hf_gpt2_train_bf16.json.gz"


def _table(rel: str, depth: int | None = None) -> pl.DataFrame:
    return layer_table(load(rel), depth=depth)


def _row(table: pl.DataFrame, layer: str) -> dict:
    got = table.filter(pl.col("layer") == layer)
    assert got.height == 1, f"{layer} not in {table['layer'].to_list()}"
    return got.row(0, named=True)


def _total_gpu(rel: str) -> int:
    t = load(rel)
    g = in_steps(t.gpu.filter(pl.col("kind") != "sync").select("ts", "dur"), t.steps)
    return int(g["dur"].sum())


def test_tinygpt_tree() -> None:
    tb = _table(TINY)
    assert L.attribution(load(TINY)).source == "modules"
    root = "TinyGPT_0"
    for layer in (f"{root}/Embedding_0", f"{root}/Linear_8", *[f"{root}/Block_{k}" for k in range(4)]):
        r = _row(tb, layer)
        assert r["fwd_gpu_ns"] > 0 and r["bwd_gpu_ns"] > 0, layer
        assert r["depth"] == 1 and r["parent_layer"] == root
    for k in range(4):
        kids = tb.filter(pl.col("parent_layer") == f"{root}/Block_{k}")["layer_class"].to_list()
        assert kids == ["LayerNorm", "MultiheadAttention", "LayerNorm", "Sequential"], kids
        mlp = tb.filter(pl.col("parent_layer") == f"{root}/Block_{k}/Sequential_{k}")["layer_class"].to_list()
        assert mlp == ["Linear", "GELU", "Linear"], mlp
        for r in tb.filter(pl.col("layer").str.starts_with(f"{root}/Block_{k}/")).iter_rows(named=True):
            assert r["fwd_gpu_ns"] > 0 and r["bwd_gpu_ns"] > 0, r["layer"]
    # pseudo-layers
    assert _row(tb, "Optimizer.step#AdamW.step")["other_gpu_ns"] > 0
    assert _row(tb, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")["cpu_ns"] > 0


@pytest.mark.parametrize("rel", [TINY, GPT2])
def test_gpu_time_is_conserved(rel: str) -> None:
    """Every GPU activity has exactly one layer: per-layer self time + unattributed = total, exactly."""
    t = load(rel)
    gl = L.gpu_layers(t)
    assert gl.height == t.gpu.height and gl["i"].n_unique() == gl.height
    assert gl["layer"].null_count() == 0
    tb = layer_table(t)
    total = _total_gpu(rel)
    assert int(tb["self_gpu_ns"].sum()) == total
    un = int(tb.filter(pl.col("layer") == L.UNATTRIBUTED)["gpu_ns"].sum())
    roots = int(tb.filter((pl.col("depth") == 0) & (pl.col("layer") != L.UNATTRIBUTED))["gpu_ns"].sum())
    assert roots + un == total
    # and kernels alone, from gpu_layers directly
    k = t.kernels.join(gl, on="i")
    assert int(k.group_by("layer").agg(pl.col("dur").sum())["dur"].sum()) == int(t.kernels["dur"].sum())
    # fwd + bwd + other = inclusive total on every row
    assert (tb["fwd_gpu_ns"] + tb["bwd_gpu_ns"] + tb["other_gpu_ns"] == tb["gpu_ns"]).all()
    assert un / total < 0.05  # nearly everything is attributed on these traces


def test_tinygpt_blocks_near_equal() -> None:
    # measured: Block_0..3 = 7.134, 7.107, 7.095, 7.108 ms over 3 steps (max/min 1.006)
    reps = L.repeats(_table(TINY))
    blk = reps.filter(pl.col("layer_class") == "Block").row(0, named=True)
    assert blk["count"] == 4 and blk["members"] == [f"Block_{k}" for k in range(4)]
    assert blk["spread"] < 1.05 and blk["outliers"] == []


def test_block2_forward_matches_raw_json() -> None:
    """Independent check: kernels whose launching op lies inside the `nn.Module: Block_2` slice in time
    (same thread), joined by External id in plain json."""
    ev = raw_events(TINY)
    blocks = [e for e in ev if e.get("cat") == "python_function" and e.get("name") == "nn.Module: Block_2"]
    assert len(blocks) == 3
    ext = {e["args"]["External id"] for e in ev if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})
           and any(e["tid"] == b["tid"] and b["ts"] <= e["ts"] and e["ts"] + e["dur"] <= b["ts"] + b["dur"]
                   for b in blocks)}
    want = sum(e["dur"] for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and e.get("args", {}).get("External id") in ext)
    got = _row(_table(TINY), "TinyGPT_0/Block_2")["fwd_gpu_ns"] / 1000
    assert got == pytest.approx(want, rel=1e-4)


def test_backward_follows_sequence_number() -> None:
    """Backward kernels of a block's MLP land on its Linear layers, through Sequence number."""
    t = load(TINY)
    hl = L.host_layers(t).join(t.host.select("i", "name"), on="i")
    mm = hl.filter(pl.col("name") == "AddmmBackward0")
    assert mm.height and (mm["phase"] == "backward").all()
    assert mm["layer_class"].is_in(["Linear", "MultiheadAttention"]).all()


def test_gpt2_blocks() -> None:
    tb = _table(GPT2)
    base = "GPT2LMHeadModel_0/GPT2Model_0"
    for k in range(12):
        blk = f"{base}/GPT2Block_{k}"
        r = _row(tb, blk)
        assert r["fwd_gpu_ns"] > 0 and r["bwd_gpu_ns"] > 0
        kids = tb.filter(pl.col("parent_layer") == blk)
        for cls in ("GPT2Attention", "GPT2MLP"):
            c = kids.filter(pl.col("layer_class") == cls).row(0, named=True)
            assert c["fwd_gpu_ns"] > 0 and c["bwd_gpu_ns"] > 0, (blk, cls)
    head = _row(tb, "GPT2LMHeadModel_0/Linear_0")
    assert head["fwd_gpu_ns"] > 0 and head["bwd_gpu_ns"] > 0
    blk = L.repeats(tb).filter(pl.col("layer_class") == "GPT2Block").row(0, named=True)
    # measured: 12 blocks 1.445-1.449 ms per step (max/min 1.003)
    assert blk["count"] == 12 and blk["spread"] < 1.1


def test_depth_collapses() -> None:
    tb = _table(TINY, depth=1)
    assert tb["depth"].max() == 1
    assert _row(tb, "TinyGPT_0/Block_0")["gpu_ns"] == _row(_table(TINY), "TinyGPT_0/Block_0")["gpu_ns"]


def test_fallback_to_annotations_and_ops() -> None:
    """Traces without module frames still get a layer per GPU activity."""
    for rel in ("gpu_h200/seed_relu_linear_m4096.json.gz", "gpu_h200/compute_bound_gemm.json.gz"):
        t = load(rel)
        tb = layer_table(t)
        assert L.attribution(t).source in ("annotations", "ops")
        assert int(tb["self_gpu_ns"].sum()) == _total_gpu(rel)
        assert tb.filter(pl.col("layer") != L.UNATTRIBUTED).height > 0


def test_cli_layers_json(capsys: pytest.CaptureFixture[str]) -> None:
    from traceview.cli.main import main

    assert main(["layers", str(SAMPLES / TINY), "--format", "json", "--depth", "1", "--step", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sec = doc["traces"][0]["layers"]
    assert sec["source"] == "modules" and sec["steps"] == [2]
    names = {r["name"] for r in sec["layers"]}
    assert {"Embedding_0", "Block_3", "Linear_8"} <= names
    assert max(r["depth"] for r in sec["layers"]) == 1
    total = sum(r["self_gpu_us"] for r in sec["layers"])  # depth-collapsed rows: self of the shown only
    assert total <= sec["total_gpu_us"] + 1e-6
    assert sec["repeats"][0]["class"] == "Block"


def test_cli_layers_text(capsys: pytest.CaptureFixture[str]) -> None:
    from traceview.cli.main import main

    assert main(["layers", str(SAMPLES / GPT2), "--depth", "3"]) == 0
    out = capsys.readouterr().out
    assert "GPT2Block_11" in out and "GPT2MLP_0" in out and "Repeated layers" in out


def test_analyze_has_layers_section() -> None:
    from traceview.report import analyze_trace

    entry = analyze_trace(load(TINY))
    sec = entry["layers"]
    assert sec["coverage_pct"] > 95
    assert sec["phases_gpu_us"]["backward"] > sec["phases_gpu_us"]["forward"] > 0


def test_findings_carry_layer() -> None:
    t = load(TINY)
    found, _ = run_rules(RuleContext.prepare(t, t.steps)[0], Options())
    if not found:
        pytest.skip("no findings on this trace")
    assert all(f.get("layer") for f in found), [(f["code"], f.get("layer")) for f in found]
    # and the layer table counts them in their layer and its ancestors
    f = pl.DataFrame([{"layer": x["layer"], "code": x["code"]} for x in found])
    tb = layer_table(t, findings=f)
    for x in found:
        r = _row(tb, x["layer"])
        assert r["findings"] >= 1 and x["code"] in r["finding_codes"]
    assert _row(tb, "TinyGPT_0")["findings"] == len([x for x in found if x["layer"].startswith("TinyGPT_0")])


def _collected_module_traces() -> list:
    d = SAMPLES / "collected"
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.rglob("*.json*")):
        if not p.name.endswith((".json", ".json.gz")) or "manifest" in p.name:
            continue
        try:
            import gzip

            head = (gzip.open(p, "rt") if p.name.endswith(".gz") else open(p)).read(4_000_000)  # noqa: SIM115
        except OSError:
            continue
        if re.search(r'"module::[A-Za-z_]\w*\.\d+', head):
            out.append(p)
    return out


def test_collected_trace_has_readable_paths() -> None:
    """A trace recorded by `traceview collect --modules --stack` (sample_traces/collected) names layers by
    their attribute path from the root model, next to the profiler's Class_n."""
    assert _collected_module_traces(), "the collected tinygpt run with module:: annotations is bundled"
    import traceview

    job = traceview.load(SAMPLES / "collected/train_tinygpt_modules")
    t = job.traces[0] if hasattr(job, "traces") else job
    table = layer_table(t)
    names = dict(zip(table["layer"].to_list(), table["name"].to_list(), strict=True))
    for k in range(4):
        assert names[f"blocks.{k}"] == f"Block_{k}"
        for sub in ("ln1", "attn", "ln2", "mlp"):
            assert f"blocks.{k}.{sub}" in names
    assert names["emb"] == "Embedding_0" and names["head"].startswith("Linear_")
    fwd = dict(zip(table["layer"].to_list(), table["fwd_gpu_ns"].to_list(), strict=True))
    bwd = dict(zip(table["layer"].to_list(), table["bwd_gpu_ns"].to_list(), strict=True))
    assert all(fwd[f"blocks.{k}"] > 0 and bwd[f"blocks.{k}"] > fwd[f"blocks.{k}"] for k in range(4))


def test_gpt2_repeats_group_by_class_and_shapes() -> None:
    """GPT-2's four Conv1D layers per block compute on four weight shapes: four groups of 12 without outliers,
    not two groups of 24 whose members all look like outliers. The weight shapes come from the raw JSON."""
    weights = {tuple(e["args"]["Input Dims"][2]) for e in raw_events(GPT2)
               if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"}
    assert {(768, 2304), (768, 768), (768, 3072), (3072, 768)} <= weights
    reps = L.repeats(_table(GPT2))
    conv = reps.filter(pl.col("layer_class") == "Conv1D")
    assert conv.height == 4 and conv["count"].to_list() == [12] * 4
    assert all(o == [] for o in reps["outliers"].to_list()), reps.select("kind", "outliers")
    labels = conv["shapes"].to_list()
    for w in [(768, 2304), (768, 768), (768, 3072), (3072, 768)]:
        (hit,) = [s for s in labels if s.endswith(f"[{w[0]}, {w[1]}]")]
        assert hit.startswith("addmm ")
    # wte [50257, 768] and wpe [1024, 768] are different layers, not one repeated "Embedding"
    assert reps.filter(pl.col("layer_class") == "Embedding").height == 0
    blocks = reps.filter(pl.col("layer_class") == "GPT2Block").row(0, named=True)
    assert blocks["count"] == 12 and blocks["outliers"] == []


def test_embedding_roofline_counts_rows_read() -> None:
    """The embedding lookup (an `aten::gather` over an index expanded along the row, stride 0) reads one row
    per token, not the whole 50257 x 768 table: bytes = rows read + distinct indices + output, from the raw
    event's Input Dims / Input Strides; every such kernel then runs below the H200's HBM bandwidth."""
    from traceview.analyses import roofline

    t = load(GPT2)
    raw = [e for e in raw_events(GPT2) if e.get("cat") == "cpu_op" and e["name"] == "aten::gather"]
    assert raw
    costs = roofline.op_costs(t).join(t.host.select(pl.col("i").alias("op"), "ts"), on="op")
    kb = roofline.kernel_bound(t)
    t0 = t.meta.t0_us
    for e in raw:
        (table, _, index, _, _), (_, _, istride, _, _) = e["args"]["Input Dims"], e["args"]["Input Strides"]
        rows = index[0]
        assert istride == [1, 0]  # one index value per row, expanded along the row
        want = rows * table[1] * 4 + rows * 8 + rows * table[1] * 4
        got = costs.filter((pl.col("op_name") == "aten::gather")
                           & ((pl.col("ts") - round((e["ts"] - t0) * 1000)).abs() <= 1))
        assert got["bytes"].to_list() == [want]
    ker = t.gpu.join(kb.filter(pl.col("op_name") == "aten::gather").select("i", "bytes"), on="i", suffix="_rf")
    assert ker.height == len(raw)
    spec = L.device_peaks(t)
    achieved = (ker["bytes_rf"] / (ker["dur"] * 1e-9)).to_list()
    assert max(achieved) < spec.hbm_tbps * 1e12, achieved  # was 7.9x the peak counting the whole table
    # the op-level ratio to the old whole-table count: 25.2 MB vs 154.4 MB + 25.2 MB per lookup
    assert roofline.op_cost("aten::gather", [[50257, 768], [], [4096, 768], [], [4096, 768]],
                            ["float", "Scalar", "long int", "Scalar", "float"], None,
                            [[768, 1], [], [1, 0], [], [768, 1]])[2] == 4096 * 768 * 8 + 4096 * 8


def test_index_select_reads_the_selected_slices() -> None:
    from traceview.analyses import roofline

    # index_select(x[1000, 64], dim=1, idx[10]): 1000 x 10 elements read and written, 10 indices
    cat, _, byts, _ = roofline.op_cost("aten::index_select", [[1000, 64], [], [10]], ["float", "Scalar", "long int"],
                                       ["", "1", ""])
    assert (cat, byts) == ("elementwise", 1000 * 10 * 4 * 2 + 10 * 8)
    # fill_ writes its output and reads nothing
    assert roofline.op_cost("aten::fill_", [[1024, 768], []], ["float", "Scalar"])[2] == 1024 * 768 * 4
