"""torch.compile on the CPU (sample_traces/cpu_compile, torch 2.13 Inductor, collectors/examples/cpu_compile.py): a
step that recompiles is found and priced on a trace without GPU activity, cross-checked against the compile spans
read from the JSON with the standard library; the stable compiled step raises nothing about compiling."""

from __future__ import annotations

import re

import pytest
from conftest import SAMPLES, raw_events
from hostile import analyze_json

# Dynamo's frame compile as torch 2.13 names it (the rule's own pattern is not used: this is the independent count)
FRAME = re.compile(r"^_compile\.compile_inner( \(dynamo_timed\))?$")
PHASES = re.compile(r"^(dynamo|entire_frame_compile|_compile\.compile_inner|compile_fx_inner|inductor_compile|"
                    r"backend_compile|CachingAutotuner\.benchmark_all_configs|async_compile\.precompile)"
                    r"( \(dynamo_timed\))?$")


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _doc(capsys, name: str) -> dict:
    rc, doc, err = analyze_json(capsys, SAMPLES / "cpu_compile" / name)
    assert rc == 0, err
    return doc["traces"][0]


def test_recompile_every_step_on_cpu(capsys):
    rel = "cpu_compile/recompile_every_step.json.gz"
    ev = [e for e in raw_events(rel) if e.get("ph") == "X"]
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in ev
             if e["name"].startswith("ProfilerStep#")}
    assert sorted(steps) == [2, 3, 4] and not any(e.get("cat") == "kernel" for e in ev)
    per_step = {s: _union_us([(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "cpu_op"
                              and PHASES.match(e["name"]) and a <= e["ts"] < b]) for s, (a, b) in steps.items()}
    frames = sum(1 for e in ev if FRAME.match(e["name"]))  # one per frame compile (2.13: the timed name only)
    assert all(v > 10_000 for v in per_step.values())  # every step compiles for tens of ms

    t = _doc(capsys, "recompile_every_step.json.gz")
    (f,) = [f for f in t["findings"] if f["code"] == "TV104"]
    assert f["steps"] == [2, 3, 4] and f["count"] == frames == 3
    assert {int(k): v for k, v in f["evidence"]["savings_per_step_us"].items()} == pytest.approx(per_step, rel=1e-3)
    # replayed on the host in unprofiled terms (every saving is): the compile time less the profiler's cost of the
    # ops recorded inside it, never more than the traced compile time
    assert 0.99 * sum(per_step.values()) / 3 <= f["savings_us"] <= sum(per_step.values()) / 3
    window = sum(b - a for a, b in steps.values())
    assert f["savings_pct"] == pytest.approx(100 * sum(per_step.values()) / window, abs=2)
    assert f["severity"] == "error" and "the GPU waited" not in f["fix"] and "CPU" in f["fix"]
    assert "torch.compile recompiles inside the steps" in t["verdict_text"] and "TV104" in t["verdict_text"]


def test_stable_compiled_step_raises_no_recompile(capsys):
    ev = raw_events("cpu_compile/compiled_stable.json.gz")
    assert any(e.get("name", "").startswith("Torch-Compiled Region") for e in ev)  # it runs compiled
    t = _doc(capsys, "compiled_stable.json.gz")
    assert [f for f in t["findings"] if f["code"] == "TV104"] == []
    assert "recompil" not in t["verdict_text"]
