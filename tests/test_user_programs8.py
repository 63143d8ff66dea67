"""The eighth set of held-out programs (sample_traces/ab_traced/*_ab: HF GPT-NeoX with eager attention, torchvision Wide
ResNet-50-2 trained in FP32, HF T5 reading `loss.item()` every step, torchvision ResNet-50 with single-tensor SGD and
RegNetY-1.6GF calling `empty_cache()` every step; each traced in the process that then timed it against its fix in
ABBA rounds, and each fixed program traced alone (`*_ab_fixed`), on an H100, 2026-12-07) — recorded before any rule
or model change saw them, and scored as they came (their savings in tests/test_predictions.py)."""

from __future__ import annotations

import statistics

import pytest
from conftest import SAMPLES, ab_twins, estimate_errors, finding, iqr, run_doc

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


def _labels(problem: str) -> dict:
    return ab_twins()[problem]


def test_the_sgd_program_again_foreach_unresolved_fused_resolved() -> None:
    """The SGD program again on an H200 (`record_ab_traced.sh user8_sgd`, eight rounds): to `foreach=True` its rounds
    still spread wider than the saving (−8.6 to +8.1 ms around 3.4: unresolved twice), to `fused=True` — what the
    finding advises — every round saved (1.4 to 11.4 ms, 5.95 at the median). The finding on that trace advises the
    fused variant and prices it; the step after it replays within 10 % of the rounds' fused step, while the saving
    misses (−44 %, MISSES_SAME_PROCESS): the problem's rounds ran 16 % slower than the traced run's wait steps."""
    import sys

    sys.path.insert(0, str(SAMPLES.parent / "tools"))
    import predictions as P

    fe, fu = _labels("resnet50_sgd_foreach_ab"), _labels("resnet50_sgd_fused_ab")
    assert iqr(fe["per_round_saving_ms"]) > fe["measured_fix_saving_ms"] > 0
    assert min(fu["per_round_saving_ms"]) > 0 and iqr(fu["per_round_saving_ms"]) <= fu["measured_fix_saving_ms"]
    uo = finding(run_doc(SET / "resnet50_sgd_fused_ab"), "unfused-optimizer")
    assert "fused=True" in uo["fix"] and uo["evidence"]["estimated_parameters"] == 161
    saving, base = P.predicted(SET / "resnet50_sgd_fused_ab", "unfused-optimizer", "fused")
    assert abs((base - saving) / fu["fixed_step_ms"] - 1) <= 0.10


def test_the_fused_program_traced_alone_ran_its_host_ops_slower_under_the_profiler() -> None:
    """The profiler-cost model's worst run (+42.5 % from the trace alone): the fused SGD program traced alone stepped
    23.2 ms unprofiled, as the problem's traced run did (23.2), but 66 ms profiled against 42: the same forward and
    backward ops (the same calls, the same kernels) took 1.5-2.2x the host time under the profiler in that process.
    A trace alone cannot tell that from a slower program: the estimate's band reaches down to the measured step, and
    the report says profiling may explain the launch-bound verdict."""
    fixed, problem = run_doc(SET / "resnet50_sgd_fused_ab_fixed"), run_doc(SET / "resnet50_sgd_fused_ab")
    a, b = ({o["op"]: o for o in d["top_ops"]} for d in (fixed, problem))
    slower = []
    for op in ("aten::native_batch_norm", "aten::convolution_backward", "aten::native_batch_norm_backward",
               "aten::cudnn_convolution"):
        assert a[op]["calls"] == b[op]["calls"] == 159 and a[op]["kernels"] == b[op]["kernels"]
        slower.append(a[op]["cpu_us"] / b[op]["cpu_us"])
    assert 1.4 < min(slower) and max(slower) < 2.4, slower
    pf, pp = fixed["profiling"], problem["profiling"]
    assert abs(pf["unprofiled_step_ms"] / pp["unprofiled_step_ms"] - 1) < 0.02
    assert pf["profiled_step_ms"] > 1.5 * pp["profiled_step_ms"]
    lo = pf["estimated_unprofiled_step_band_us"][0] / 1000
    assert abs(lo / pf["unprofiled_step_ms"] - 1) < 0.02
    assert pf["launch_bound_may_be_artifact"]


def test_the_t5_loss_reads_are_below_what_its_host_pace_resolves() -> None:
    """Why T5 ran slower without `.item()` (session 63: −6.9 ms, every round): each way of reading the loss timed
    against not reading it at all, in one process each, four ABBA rounds (`record_ab_traced.sh t5_read`, H200,
    t5_read_h200.ndjson). The unread loop itself ran 53 to 84 ms a step across the twelve rounds, and every read's
    rounds straddle zero (item −15.8 to +3.5 ms, detach −13.8 to +6.8, synchronize() −4.0 to +5.6): the sync's own
    cost (host-sync prices it at 0.47 ms of a 57.6 ms step) is far below this host's pace, which moves by a third
    between fresh runs of the same program. host-sync keeps it at info (above)."""
    import json

    runs = [json.loads(x) for x in (SET / "t5_read_h200.ndjson").read_text().splitlines()]
    assert [r["problem"].rsplit(" ", 1)[-1] for r in runs] == ["item", "detach", "sync"]
    assert all(r["fixed"].endswith("--read none") and r["rounds"] == 4 for r in runs)
    unread = [ms for r in runs for ms in r["per_round_fixed_ms"]]
    assert max(unread) / min(unread) > 1.4
    for r in runs:
        s = r["per_round_saving_ms"]
        assert min(s) < 0 < max(s) and iqr(s) > abs(r["saving_ms"]) * 0.9 > 0, r["problem"]


def test_the_same_program_in_two_processes_is_priced_at_each_ones_pace() -> None:
    """GPT-NeoX with SDPA traced twice on one H100 minutes apart (`record_ab_traced.sh pythia_fixes`): one process
    stepped 40.0 ms unprofiled, the other 29.9 — the same program, a third apart in host pace. Each report solves the
    profiler's cost to its own process's step, so launch-bound's saving follows the pace (18.4 against 8.5 ms); in
    the second process the whole step captured in one CUDA graph measured 9.23 ms saved (rounds 7.6 to 16.2, the
    graphed step 20.71 in every round), and the replay leaves 21.41 (+3 %)."""
    fast, slow = run_doc(SET / "pythia_sdpa_graph_ab"), run_doc(SET / "pythia_sdpa_compile_ab")
    pf, ps = fast["profiling"], slow["profiling"]
    assert ps["unprofiled_step_ms"] > 1.25 * pf["unprofiled_step_ms"]
    for d in (fast, slow):
        assert d["projection"]["replayed_unprofiled_step_us"] / 1000 == pytest.approx(
            d["profiling"]["unprofiled_step_ms"], rel=0.01)
    lb_fast, lb_slow = finding(fast, "launch-bound")["savings_us"], finding(slow, "launch-bound")["savings_us"]
    assert lb_slow > 1.8 * lb_fast
    g = _labels("pythia_sdpa_graph_ab")
    assert min(g["per_round_saving_ms"]) > 0 and iqr(g["per_round_saving_ms"]) <= g["measured_fix_saving_ms"]
    left = pf["unprofiled_step_ms"] - lb_fast / 1000
    assert abs(left / g["fixed_step_ms"] - 1) <= 0.05
