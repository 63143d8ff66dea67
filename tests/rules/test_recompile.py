import json

import polars as pl
import pytest
import rulekit as k

LABELS = json.loads((k.SAMPLES / "gpu_h200_compile/labels.json").read_text())


def test_fires_on_recompile_every_step():
    lab = LABELS["compile_recompile_every_step"]
    assert lab["expected"] == "recompile"
    (f,) = k.findings("gpu_h200_compile/compile_recompile_every_step.json.gz", "TV104")
    ev = f["evidence"]
    assert f["count"] == ev["compiles"] == lab["recompiles_in_active_steps"] == 3
    assert ev["steps_with_compiles"] == [1, 2, 3]
    assert ev["recompiled_regions"] == ["Torch-Compiled Region: 3/2", "Torch-Compiled Region: 3/3",
                                       "Torch-Compiled Region: 3/4"]
    # independent: the outermost `dynamo` spans plus the autotuning after them, per step ~0.53 s of a 0.54 s step
    t = k.trace("gpu_h200_compile/compile_recompile_every_step.json.gz")
    dyn = t.host.filter(pl.col("name") == "dynamo")
    assert dyn.height == 3
    assert float(dyn["dur"].sum()) / 1000 < f["cost_us"] < float(t.steps["end"].max() - t.steps["ts"].min()) / 1000
    assert f["savings_pct"] > 95 and f["severity"] == "error"
    # the autotuning benchmarks' kernels run inside the compile and are removed with it
    assert ev["autotune_gpu_time_us"] > 0
    assert f["savings_us"] == pytest.approx(f["cost_us"], rel=0.02)
    assert "mark_dynamic" in f["fix"] and "TORCH_LOGS=recompiles" in f["fix"]


@pytest.mark.parametrize("name", ["compile_no_break", "compile_graph_break"])
def test_silent_without_compiles_in_steps(name):
    assert k.findings(f"gpu_h200_compile/{name}.json.gz", "TV104") == []
