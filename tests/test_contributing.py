"""docs/contributing.md's "Add a rule", done: a minimal rule written as one module, registered with one line
in the RULES table, runs end to end — the contract checker accepts it, `traceview analyze --select` runs it,
its finding is in the JSON document and the text report — and its number agrees with the classifier's
`cpu_launch` time and with the built-in launch-bound rule, which measure the same thing."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

from conftest import ROOT, SAMPLES
from traceview.rules import BY_NAME, RULES

from traceview import docs
from traceview.cli.main import main

RULE = '''"""TV199 late-launch-demo: the GPU idles while the CPU launches the next kernel (a contributing.md example).

## What it detects
The time the classifier labels `cpu_launch` inside the analysed steps.

## Why it is slow
The CPU issues kernels more slowly than the GPU runs them.

## How to fix
Launch fewer, larger pieces of work (CUDA graphs, torch.compile).

## Evidence
That time, from the `Evidence` struct below.

## Options
- `moderate_pct` (3.0): share of step time at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): share at which it is an error (XProf's high threshold).

## References
- docs/contributing.md.
"""

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.replay import Transform
from traceview.evidence import Meta
from traceview.ruleapi import XPROF_SEVERITY, Finding, RuleContext

CODE = "TV199"
NAME = "late-launch-demo"
CLASS = "cpu_launch"
SEVERITY = "warning"
TITLE = "GPU idles while the CPU launches (demo)"
FIX = "Launch fewer, larger pieces of work."
OPTIONS = {**XPROF_SEVERITY}


class Evidence(msgspec.Struct, kw_only=True):
    cpu_launch_us: Annotated[float, Meta(description="the `cpu_launch` time over all analysed steps (µs)")]


def check(ctx: RuleContext) -> list[Finding]:
    seg = ctx.class_time(CLASS)
    cost = int((seg["end"] - seg["ts"]).sum()) if seg.height else 0
    if cost == 0:
        return []
    steps = sorted(set(seg["step"].to_list()))
    return [ctx.finding(cost_ns=cost, count=seg.height, steps=steps, evidence=Evidence(cpu_launch_us=cost / 1000))]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix replayed: the kernel launch calls in the steps leave the host path (one graph launch)."""
    h = ctx.trace.host
    rows = h.filter((pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi) & (pl.col("name") == "cudaLaunchKernel"))
    return Transform(NAME, host_removed=rows["i"].to_list()) if rows.height else None
'''


def _new_rule(tmp_path: Path, monkeypatch):
    """Step 1 (the module) and step 2 (its line in RULES) of docs/contributing.md, in a temporary module."""
    f = tmp_path / "late_launch_demo.py"
    f.write_text(RULE)
    spec = importlib.util.spec_from_file_location("traceview.rules.late_launch_demo", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(RULES, "TV199", mod)  # the one line: "TV199": late_launch_demo,
    monkeypatch.setitem(BY_NAME, mod.NAME, mod)
    return mod


def test_a_new_rule_runs_end_to_end(tmp_path: Path, monkeypatch) -> None:
    mod = _new_rule(tmp_path, monkeypatch)
    assert docs.problems(mod) == []  # the contract and the docstring sections
    # its evidence keys are documented from its Evidence struct (docs/rules.md, `traceview rule TV199`)
    assert "- `cpu_launch_us` (float): the `cpu_launch` time over all analysed steps (µs)" in docs.rule_doc(mod)
    assert "| TV199 [`late-launch-demo`](rules.md#tv199-late-launch-demo) | `cpu_launch_us` float |" in (
        docs.evidence_table())
    trace = str(SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz")
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    assert main(["analyze", trace, "--format", "json", "--select", "TV199,TV101"]) == 0
    (t,) = json.loads(buf.getvalue())["traces"]
    by_code = {f["code"]: f for f in t["findings"]}
    assert set(by_code) == {"TV199", "TV101"}
    demo, builtin = by_code["TV199"], by_code["TV101"]
    assert demo["rule"] == "late-launch-demo" and demo["class"] == "cpu_launch"
    # the same time three ways: the demo rule, the classification section, the built-in launch-bound rule
    assert demo["cost_us"] > 0 and demo["evidence"]["cpu_launch_us"] == demo["cost_us"]
    assert abs(demo["cost_us"] - t["classification"]["time_us"]["cpu_launch"]) < 0.01
    assert abs(demo["cost_us"] - builtin["cost_us"]) < 0.01
    # its saving is its fix_transform replayed (per step, the profiler's cost taken off): removing only the launch
    # calls saves less than the built-in rule's CUDA-graph transform (which also drops the launching ops), and
    # more than nothing — the GPU is idle ~92 % of this step (labels.json: dominant cpu_launch_bound)
    alone = demo["evidence"]["after_larger_fixes"]["alone_savings_us"]
    assert 0 < alone < builtin["savings_us"] <= t["projection"]["replayed_unprofiled_step_us"]
    # nothing is added up: the built-in launch-bound fix saves more and covers the same launches, so once it is
    # made the demo's fix saves next to nothing: the demo finding is info and reports only that remainder (its
    # evidence says after what, and what it saves alone)
    assert builtin["severity"] == "error" and demo["severity"] == "info"
    assert demo["evidence"]["after_larger_fixes"]["fixes"] == ["launch-bound"]
    assert demo["savings_us"] == demo["evidence"]["after_larger_fixes"]["savings_us"] < 0.05 * alone
    assert {f["rule"]: f["model"] for f in t["projection"]["fixes"]}["late-launch-demo"] == "replay"
    # and the text report lists it
    buf2 = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf2)
    assert main(["analyze", trace, "--select", "TV199", "--width", "200"]) == 0
    assert "late-launch-demo" in buf2.getvalue()


def test_the_documented_steps_are_the_real_ones() -> None:
    text = (ROOT / "docs/contributing.md").read_text()
    for needle in ("rules/<slug>.py", "`RULES` in `rules/__init__.py`", "SECTIONS", "FORMATS",
                   "python -m traceview.docs", "python tools/golden.py", "class Evidence(msgspec.Struct, kw_only=True)",
                   "evidence=Evidence("):
        assert needle in text, needle
    from traceview.formatters import FORMATS
    from traceview.report import SECTIONS

    assert FORMATS["json"] == "json" and SECTIONS
