"""`traceview layers` on a trace without GPU activity: CPU time per layer, not a GPU table of zeros."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import SAMPLES, raw_events
from test_cpu import in_steps, nesting, rel, steps_of


def layers(path: str, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "traceview", "layers", str(SAMPLES / path), "--width", "100", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def top_level_op_us(path: str) -> tuple[float, int]:
    """Every top-level op's time in the profiler steps (stdlib JSON) and the number of steps."""
    ev = raw_events(path)
    steps = steps_of(ev)
    _, op_parent = nesting(ev)
    top = sum(
        e["dur"]
        for k, e in enumerate(ev)
        if e.get("cat") == "cpu_op" and op_parent.get(k) is None and in_steps(e, steps) is not None
    )
    return top, len(steps)


@pytest.mark.parametrize("path", ["cpu_trace_example_torch2.13.json.gz", rel("tinygpt_train")])
def test_cpu_trace_layers_show_cpu_time(path: str) -> None:
    out = layers(path)
    assert "CPU time per layer" in out and "GPU time per layer" not in out
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)$", line)
        if m:  # a root layer (no indentation): fwd bwd other total % ops
            rows[m.group(1)] = float(m.group(5))
    top, n = top_level_op_us(path)
    # the root layers and (unattributed) hold every top-level op of the steps: ms per step, 3 decimals per row
    assert len(rows) >= 3 and sum(rows.values()) == pytest.approx(
        top / 1000 / n, abs=0.001 * len(rows) + 0.01
    )


def test_cpu_layers_json_and_depth() -> None:
    path = rel("tinygpt_train")
    doc = json.loads(layers(path, "--format", "json"))
    (t,) = doc["traces"]
    assert t["layers"]["total_gpu_us"] == 0.0 and t["cpu"]["steps"] == t["layers"]["steps"]
    by = {r["layer"]: r for r in t["cpu"]["layers"]}
    assert by["blocks.0"]["fwd_us"] > 0 and by["blocks.0"]["bwd_us"] > 0
    shallow = layers(path, "--depth", "1")
    # depth 1: TinyGPT and its children, not the blocks' own children
    assert "  blocks.0 " in shallow and "blocks.0.attn" not in shallow and "attn" not in shallow
