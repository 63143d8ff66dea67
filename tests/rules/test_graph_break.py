import json

import polars as pl
import rulekit as k

LABELS = json.loads((k.SAMPLES / "gpu_h200_compile/labels.json").read_text())


def test_fires_on_graph_break():
    lab = LABELS["compile_graph_break"]
    assert lab["expected"] == "graph-break"
    (f,) = k.findings("gpu_h200_compile/compile_graph_break.json.gz", "TV103")
    ev = f["evidence"]
    assert f["rule"] == "graph-break" and f["steps"] == [1, 2, 3]
    assert ev["regions_per_call"] == lab["graphs_per_call"] == 2 and ev["breaks"] == 3 * lab["graph_breaks_per_call"]
    # `if h.sum() > 0`: the break is Tensor.__bool__ -> aten::is_nonzero, which reads the GPU value on the host
    assert ev["break_op"] == "aten::is_nonzero" and ev["syncs_with_gpu"] is True
    assert ev["resumed_regions"] == ["Torch-Compiled Region: 1/0"]
    # independent: per break, the GPU idles from the end of the first graph's last kernel to the start of the
    # resumed graph's first kernel; one graph would launch that kernel one launch interval after its last one
    t = k.trace("gpu_h200_compile/compile_graph_break.json.gz")
    calls = t.host.filter(pl.col("name").str.starts_with("## Call CompiledFxGraph")).sort("ts")
    first_calls = calls.filter(pl.col("name") == calls["name"][0])
    resumed = t.host.filter(pl.col("name") == "Torch-Compiled Region: 1/0").sort("ts")
    pace = ev["graph_launch_interval_us"] * 1000
    assert 20_000 < pace < 60_000  # ~45 µs between the launches of one profiled graph
    kern = t.gpu.filter(pl.col("kind") == "compute")
    expected = 0
    for c, r in zip(first_calls.iter_rows(named=True), resumed.iter_rows(named=True), strict=True):
        a = kern.filter(pl.col("launch_ts").is_between(c["ts"], c["end"]))
        b = kern.filter(pl.col("launch_ts").is_between(r["ts"], r["end"]))
        a_end, a_launch, b_start = int(a["end"].max()), int(a["launch_ts"].max()), int(b["ts"].min())
        expected += b_start - (a_end + max(0, a_launch + pace - a_end))
    # plus the fusion across the break: add_mul_relu -> sum -> gt_sum | mul_sub_tanh as one chain; less the 1.5 µs
    # device-to-host copy of the sync inside each gap
    assert ev["kernels_fusable_across_break"] == 4 and ev["fusion_savings_us"] > 0
    gaps = f["savings_us"] * 1000 - ev["fusion_savings_us"] * 1000
    assert 0 <= expected - gaps < 3 * 2000
    assert "torch.where" in f["fix"] and "fullgraph=True" in f["fix"]


def test_silent_without_break():
    assert LABELS["compile_no_break"]["expected"] == "none"
    assert k.findings("gpu_h200_compile/compile_no_break.json.gz", "TV103") == []
