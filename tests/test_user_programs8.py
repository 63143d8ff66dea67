"""The eighth set of held-out programs (sample_traces/ab_traced/*_ab: HF GPT-NeoX with eager attention, torchvision Wide
ResNet-50-2 trained in FP32, HF T5 reading `loss.item()` every step, torchvision ResNet-50 with single-tensor SGD and
RegNetY-1.6GF calling `empty_cache()` every step; each traced in the process that then timed it against its fix in
ABBA rounds, and each fixed program traced alone (`*_ab_fixed`), on an H100, 2026-12-07) — recorded before any rule
or model change saw them, and scored as they came (their savings in tests/test_predictions.py)."""

from __future__ import annotations

import statistics

import pytest
from conftest import SAMPLES, estimate_errors, finding, run_doc

SET = SAMPLES / "ab_traced"
RUNS = ("pythia_eager_ab", "wide_resnet_fp32_ab", "t5_item_ab", "resnet50_sgd_loop_ab", "regnet_empty_cache_ab")
FIXED_RULE = {"pythia_eager_ab": "materialized-attention", "wide_resnet_fp32_ab": "fp32-conv",
              "t5_item_ab": "host-sync", "resnet50_sgd_loop_ab": "unfused-optimizer",
              "regnet_empty_cache_ab": "allocator-churn"}


def test_unprofiled_step_estimate_against_the_collector() -> None:
    """The issue's bar on runs not used to fit: median error at most 10 %, worst at most 30 % (as they came: median
    +6.5 %, worst +19 %, T5's `.item()` loop, a host-bound step the profiler slowed 2x)."""
    err = estimate_errors(SET, RUNS)
    assert statistics.median(abs(e) for e in err.values()) <= 0.10, err
    assert max(abs(e) for e in err.values()) <= 0.30, err


@pytest.mark.parametrize("run", RUNS)
def test_fixed_twins_raise_nothing_above_info_for_their_fix(run: str) -> None:
    assert all(f["severity"] == "info" for f in run_doc(SET / f"{run}_fixed")["findings"]
               if f["rule"] == FIXED_RULE[run])


@pytest.mark.parametrize("run", ["pythia_eager_ab", "wide_resnet_fp32_ab", "regnet_empty_cache_ab"])
def test_each_problem_raises_its_rule(run: str) -> None:
    fs = [f for f in run_doc(SET / run)["findings"] if f["rule"] == FIXED_RULE[run]]
    assert fs and max(fs, key=lambda f: f["savings_us"])["severity"] in ("warning", "error")


def test_a_fix_measured_slower_is_not_advised() -> None:
    """T5 without its per-step `loss.item()` ran slower in every round (−5.1 to −11.4 ms: the host-bound loop paced
    otherwise once it no longer waits): host-sync prices the sync at under 1 % of the step and keeps it at info."""
    doc = run_doc(SET / "t5_item_ab")
    hs = finding(doc, "host-sync")
    assert hs["severity"] == "info" and hs["savings_us"] < 0.01 * doc["profiling"]["unprofiled_step_ms"] * 1000


def test_the_optimizers_own_loop_is_named_as_such() -> None:
    """ResNet-50's `SGD(foreach=False)`: launch-bound's largest loop over tensors (mul_ → add_ → add_, once for each
    of the model's 161 parameter tensors) runs inside `Optimizer.step#SGD.step`, so the fix names the optimizer's
    own flag, not an EMA or a hand-written update; unfused-optimizer prices the same loop, alone about what
    launch-bound saves (its own saving is then what is left once launch-bound's fix is in). The foreach twin has no
    such loop."""
    doc = run_doc(SET / "resnet50_sgd_loop_ab")
    lb = finding(doc, "launch-bound")
    loop = lb["evidence"]["loop"]
    assert loop["optimizer"] == "SGD" and loop["iterations_per_step"] == 161 and loop["kind"] == "tensors"
    assert lb["fix"].startswith("Many of the launches come from SGD.step's own loop over the parameters")
    assert "SGD(..., fused=True)" in lb["fix"] and "EMA" not in lb["fix"].split("Otherwise:")[0]
    uo = finding(doc, "unfused-optimizer")
    assert uo["evidence"]["estimated_parameters"] == 161
    alone = uo["evidence"]["after_larger_fixes"]["alone_savings_us"]
    assert 0.8 * lb["savings_us"] <= alone <= 1.2 * lb["savings_us"]
    fixed = run_doc(SET / "resnet50_sgd_loop_ab_fixed")
    assert not [f for f in fixed["findings"] if (f["evidence"].get("loop") or {}).get("optimizer")]


def test_the_terminal_labels_a_saving_left_after_a_larger_fix() -> None:
    """The projection line said "each alone" over every fix, while unfused-optimizer's number there (as in its finding
    and the JSON) is what is left once launch-bound's fix is in: it now says so, with the fix's saving alone."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(SET / "resnet50_sgd_loop_ab"), "--width",
                          "1000"], capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("Projected step"))
    uo = finding(run_doc(SET / "resnet50_sgd_loop_ab"), "unfused-optimizer")
    after = uo["evidence"]["after_larger_fixes"]
    assert after["fixes"] == ["launch-bound"]
    assert (f"TV203 −{uo['savings_us'] / 1000:.2f} ms/step after TV101 (−{after['alone_savings_us'] / 1000:.2f} "
            "alone)") in line
    assert "each alone unless after another:" in line
