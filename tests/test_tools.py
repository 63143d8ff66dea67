"""tools/inflate_trace.py: a tiled trace analyzes like the original, N times over (ids stay one-to-one)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES

SRC = SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz"


def analyze(path) -> dict:
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["traces"][0]


def test_tiled_trace_repeats_the_original(tmp_path) -> None:
    out = tmp_path / "big.json.gz"
    r = subprocess.run([sys.executable, str(ROOT / "tools/inflate_trace.py"), str(SRC), str(out), "--copies", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    one, three = analyze(SRC), analyze(out)
    assert [s["step"] for s in three["steps"]] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    # every copy's steps are the original's: the same tb_plugin windows and GPU busy time, step by step (a step's
    # period also depends on its neighbours: the last one of a copy runs until the next copy's first begins)
    for k, s in enumerate(three["steps"]):
        ref = one["steps"][k % 3]
        assert s["tb_dur_us"] == pytest.approx(ref["tb_dur_us"], abs=0.002) and s["gpu_busy_us"] == pytest.approx(
            ref["gpu_busy_us"], abs=0.002)
        if k % 3 == 1:  # a middle step has the same neighbours in every copy: the same period
            assert s["dur_us"] == pytest.approx(ref["dur_us"], abs=0.002)
    # kernels still find the op that launched them (correlation / External id stay one-to-one)
    assert [(k["name"], k["count"], k["op"] is None) for k in three["top_kernels"]] == [
        (k["name"], 3 * k["count"], k["op"] is None) for k in one["top_kernels"]]
    assert [(o["op"], o["calls"], o["kernels"]) for o in three["top_ops"]] == [
        (o["op"], 3 * o["calls"], 3 * o["kernels"]) for o in one["top_ops"]]
    assert three["metadata"]["event_counts"]["kernel"] == 3 * one["metadata"]["event_counts"]["kernel"]


def test_tiny_events_trace_is_what_it_says(tmp_path) -> None:
    """tools/tiny_events.py (the 10 M tiny events benchmark): every kernel is linked to its op, steps as asked."""
    out = tmp_path / "tiny.json.gz"
    r = subprocess.run([sys.executable, str(ROOT / "tools/tiny_events.py"), str(out), "--events", "3000",
                        "--ops-per-step", "100"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "3010"  # 1000 ops x 3 events + 10 step annotations
    t = analyze(out)
    assert [s["step"] for s in t["steps"]] == list(range(10))
    assert [(k["name"], k["count"], k["op"]) for k in t["top_kernels"]] == [("add_kernel", 1000, "aten::add")]
    assert [(o["op"], o["calls"], o["kernels"]) for o in t["top_ops"]] == [("aten::add", 1000, 1000)]
    # 1 µs kernels every 4 µs: the GPU is busy a quarter of each full step
    assert all(s["gpu_busy_us"] == pytest.approx(100.0, abs=0.01) for s in t["steps"][:-1])


@pytest.mark.parametrize("rel", ["ab_traced/resnet18_fp32", "collected4/conv_fp32", "ab_traced/bert_eager_attn_s128",
                                 "collected4/attn_flash_s2048"])
def test_no_op_beats_its_device(rel) -> None:
    # tools/limits.py: FP32 convolutions on TF32 kernels (149-255 % of the FP32 peak), the loss's and copy_'s bytes
    # (6x and 1.35x the bandwidth) and flash attention's layout were each a row here before the model was fixed
    sys.path.insert(0, str(ROOT / "tools"))
    import limits

    path = next((SAMPLES / rel).glob("*.pt.trace.json*"))
    assert limits.over(path).height == 0
