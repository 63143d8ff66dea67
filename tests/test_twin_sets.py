"""The recorded twin sets (sample_traces/collected3, collected4, collected5): labels are current, each twin's
saving is the difference of the collector's own steady step times, and each recorded step's period as traceview
measures it agrees with the collector's timing of that step."""

from __future__ import annotations

import functools
import importlib.util
import json
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT

from traceview.report import analyze

_spec = importlib.util.spec_from_file_location("labels", ROOT / "tools" / "labels.py")
L = importlib.util.module_from_spec(_spec)
sys.modules["labels"] = L
_spec.loader.exec_module(L)

SETS = [s for s in L.SETS if (ROOT / "sample_traces" / s / "labels.json").is_file()]


def _labels(name: str) -> dict:
    return json.loads((ROOT / "sample_traces" / name / "labels.json").read_text())


def _steady_ms(name: str, run: str) -> float:
    """The steady unprofiled step, recomputed from the run's own files (not through tools/labels.py)."""
    d = ROOT / "sample_traces" / name / run
    if name == "collected3":  # the manifest's median over all wait steps
        return json.loads((d / "manifest.json").read_text())["step_time"]["unprofiled_ms_median"]
    wait = json.loads((d / "rank0.collect.json").read_text())["unprofiled_step_ms"]
    if run.startswith(("input_workers_", "cnn_input_")):  # DataLoader: throughput once the buffer drained
        return statistics.fmean(wait[len(wait) // 2 :])
    return statistics.median(wait[1:])


@pytest.mark.parametrize("name", SETS)
def test_labels_and_manifest_are_generated_from_the_runs(name):
    doc, md = L.build(name)
    assert doc == _labels(name), f"run `python tools/labels.py {name}`"
    assert md == (ROOT / "sample_traces" / name / "MANIFEST.md").read_text()
    assert doc["twins"] and all(
        t["problem"] in doc["runs"] and t["fixed"] in doc["runs"] for t in doc["twins"]
    )
    for t in doc["twins"]:
        assert t["measured_fix_saving_ms"] == pytest.approx(
            _steady_ms(name, t["problem"]) - _steady_ms(name, t["fixed"]), abs=1e-3
        )


def test_collected3_dataloader_runs_are_left_untimed():
    runs = _labels("collected3")["runs"]
    assert sorted(r for r, v in runs.items() if v["unprofiled_step_ms"] is None) == sorted(L.C3_NOT_STEADY)


#: runs whose recorded steps traceview and the collector bound differently: xfail(strict), with the numbers
PERIOD_MISSES = {
    (
        "collected5",
        "epilogue_mlp_compiled",
    ): "steps 2-3 span 2.074 ms in the trace (ProfilerStep#) and 2.228 ms "
    "between the collector's CUDA events (-6.9 %, 0.154 ms): the last traced step is 0.975 ms against 1.111 ms",
}
RUNS = [
    pytest.param(
        name,
        run,
        id=f"{name}/{run}",
        marks=[pytest.mark.xfail(strict=True, reason=PERIOD_MISSES[(name, run)])]
        if (name, run) in PERIOD_MISSES
        else [],
    )
    for name in SETS
    for run in sorted(_labels(name)["runs"])
]


@pytest.mark.parametrize(("name", "run"), RUNS)
def test_traced_step_periods_match_the_collectors_timing(name, run):
    d = ROOT / "sample_traces" / name / run
    collect = json.loads((d / "rank0.collect.json").read_text())
    cuda_ms = collect["profiled_step_ms"]
    steps = analyze([str(d / _labels(name)["runs"][run]["trace"])]).to_dict()["traces"][0]["steps"]
    ours = [s["dur_us"] / 1e3 for s in steps]
    assert len(ours) == len(cuda_ms) == 3
    # the same 3 recorded steps on both sides; their boundaries differ by where each marks a step (the
    # collector at optimizer.step(), the trace at ProfilerStep#), so compare spans of steps; the first one's
    # period also holds the profiler's start, which traceview leaves out as a recording edge
    assert sum(ours[1:]) == pytest.approx(sum(cuda_ms[1:]), rel=0.05, abs=0.15), (run, ours, cuda_ms)


def test_held_out_runs_are_not_calibration_inputs():
    """The profiler-cost fit (tools/fit_overhead.py) never fits on the twin sets: its calibration list names no
    run of them (the tool reads collected3 only to score it), and the analyzer itself never names them."""
    split = json.loads((ROOT / "tools/overhead_split.json").read_text())
    assert split["calibration"] and split["held_out"] == "collected3"
    assert not [r for r in split["calibration"] if r.split("/")[0] in L.SETS]
    for r in split["calibration"]:
        assert (ROOT / "sample_traces" / r / "manifest.json").is_file(), r
    for name in L.SETS:
        out = subprocess.run(
            ["git", "grep", "-l", name, "--", "traceview"], cwd=ROOT, capture_output=True, text=True
        )
        assert out.stdout.strip() == "", out.stdout


#: collected5 twins whose verdict is wrong today: (problem, fixed) -> what the analyzer says (xfail strict)
VERDICT_MISSES = {
    ("gpt2_b1_eager", "gpt2_b1_reduce_overhead"): "the reduce-overhead twin (already CUDA graphs) still gets "
    "launch-bound at error, 0.45 ms a step on a 0.82 ms measured step (GPU busy 0.31 ms)",
}
C5 = _labels("collected5")["twins"] if "collected5" in SETS else []


@functools.cache
def _findings(name: str, run: str) -> tuple[tuple[str, str], ...]:
    rep = analyze([str(ROOT / "sample_traces" / name / run / _labels(name)["runs"][run]["trace"])]).to_dict()
    return tuple((f["rule"], f["severity"]) for f in rep["traces"][0]["findings"])


@pytest.mark.parametrize(
    "t",
    [
        pytest.param(
            t,
            id=f"{t['problem']}->{t['fixed']}",
            marks=[pytest.mark.xfail(strict=True, reason=VERDICT_MISSES[(t["problem"], t["fixed"])])]
            if (t["problem"], t["fixed"]) in VERDICT_MISSES
            else [],
        )
        for t in C5
        if t["measured_fix_saving_ms"] > 0
    ],
)
def test_collected5_problem_fires_its_rule_and_the_fixed_twin_does_not_warn(t):
    """The labels name the rule each problem run shows: it fires there (any severity) and not above info on the
    fixed twin, whose step the fix already took."""
    assert t["rule"] in {r for r, _ in _findings("collected5", t["problem"])}
    assert [s for r, s in _findings("collected5", t["fixed"]) if r == t["rule"] and s != "info"] == []
