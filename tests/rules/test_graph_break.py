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


HOOK = "collected5/gpt2c_hook_item/rank0.1796199718723237147.pt.trace.json.gz"


def _nested_regions(rel: str, outer: str) -> int:
    """Independent (stdlib json): regions whose innermost enclosing region on the same thread is named `outer`,
    inside the recorded ProfilerStep# spans."""
    import gzip

    ev = json.load(gzip.open(k.SAMPLES / rel))["traceEvents"]
    x = [e for e in ev if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in x if e["name"].startswith("ProfilerStep#")]
    reg = [e for e in x if e.get("cat") == "cpu_op" and e["name"].startswith("Torch-Compiled Region")]
    n = 0
    for r in reg:
        if not any(a <= r["ts"] < b for a, b in steps):
            continue
        around = [o for o in reg if o is not r and o["tid"] == r["tid"] and o["ts"] <= r["ts"]
                  and o["ts"] + o["dur"] >= r["ts"] + r["dur"] and o["dur"] > r["dur"]]
        if around and max(around, key=lambda o: o["ts"])["name"] == outer:
            n += 1
    return n


def test_hook_item_breaks_every_block_of_compiled_gpt2():
    # HF GPT-2 under torch.compile with a forward hook on each of its 4 blocks that logs `.item()`: Dynamo compiles
    # each block's call as its own region, the block's forward and the hook as regions inside it (the hook's graph
    # ends at the .item(), which runs eagerly), and the model's frame around them: the siblings after the first
    # nested region are breaks too (the latest region to start before one is a closed sibling, not its frame)
    fs = {f["evidence"]["compiled_function"]: f for f in k.findings(HOOK, "TV103")}
    block = fs["Torch-Compiled Region: 8/0"]["evidence"]
    assert block["calls"] == 12 and block["breaks"] == _nested_regions(HOOK, "Torch-Compiled Region: 8/0") == 24
    model = fs["Torch-Compiled Region: 3/0"]["evidence"]
    assert model["breaks"] == _nested_regions(HOOK, "Torch-Compiled Region: 3/0") == 21
    assert model["break_op"] == "aten::item" and model["syncs_with_gpu"] is True
    assert "Torch-Compiled Region: 8/0" in model["resumed_regions"]
    # the fixed twin keeps the norm on the GPU: one graph, nothing to find
    assert k.findings("collected5/gpt2c_hook_tensor/rank0.1796199754235630232.pt.trace.json.gz", "TV103") == []
