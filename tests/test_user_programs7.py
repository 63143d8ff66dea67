"""The seventh set of held-out programs (sample_traces/user_programs7_h200: HF Qwen2 with eager attention, HF GPT-NeoX
trained with single-tensor AdamW, HF BART calling empty_cache() every step, HF ELECTRA and torchvision MobileNetV2
trained in FP32; each with its fixed twin, recorded on an H200 with `traceview collect` at its defaults) — recorded
while the rules they exercise were being reworked and kept from that work. Each program and its fix were also timed
alone (fixes_h200.ndjson) and in one process with the problem's trace (sample_traces/ab_traced/*_ab, scored in
tests/test_predictions.py)."""

from __future__ import annotations

import statistics

import pytest
from conftest import SAMPLES, estimate_errors, pair_savings, run_doc, timed_runs

SET = SAMPLES / "user_programs7_h200"
RUNS = ("qwen2_eager", "pythia_adamw_loop", "bart_empty_cache", "electra_fp32", "mobilenetv2_fp32")
FIXED_RULE = {"qwen2_eager": "materialized-attention", "pythia_adamw_loop": "unfused-optimizer",
              "bart_empty_cache": "allocator-churn", "electra_fp32": "fp32-gemm", "mobilenetv2_fp32": "fp32-conv"}


def test_unprofiled_step_estimate_against_the_collector() -> None:
    """The issue's bar on runs not used to fit: median error at most 10 %, worst at most 30 % (as they came: median
    +4 %, worst +23 %, ELECTRA's BF16 twin, a host-bound step the profiler slowed 2.1x)."""
    err = estimate_errors(SET, RUNS)
    assert statistics.median(abs(e) for e in err.values()) <= 0.10, err
    assert max(abs(e) for e in err.values()) <= 0.30, err


@pytest.mark.parametrize("run", RUNS)
def test_fixed_twins_raise_nothing_above_info_for_their_fix(run: str) -> None:
    assert all(f["severity"] == "info" for f in run_doc(SET / f"{run}_fixed")["findings"]
               if f["rule"] == FIXED_RULE[run])


@pytest.mark.parametrize("run", RUNS)
def test_each_problem_raises_its_rule(run: str) -> None:
    """Each program's own problem is found, above info, and it is the largest saving of its rule's findings; BART's
    empty_cache() is the exception: at info, its saving a few percent of a launch-bound step."""
    fs = [f for f in run_doc(SET / run)["findings"] if f["rule"] == FIXED_RULE[run]]
    assert fs
    if run == "bart_empty_cache":
        assert all(f["severity"] == "info" for f in fs)
    else:
        assert max(fs, key=lambda f: f["savings_us"])["severity"] in ("warning", "error")


def test_the_programs_timed_alone_ran_two_alternated_pairs() -> None:
    """The timing file is what the tests above and MANIFEST.md read: two problem and two fixed runs of every program,
    80 steps each, and the measured savings MANIFEST.md quotes (steps 10 on, means)."""
    got = {r: [round(s, 2) for s in pair_savings(timed_runs(SET, r))] for r in RUNS}
    assert got == {"qwen2_eager": [3.89, 4.64], "pythia_adamw_loop": [13.57, 6.31], "bart_empty_cache": [-2.93, 5.18],
                   "electra_fp32": [33.63, 32.85], "mobilenetv2_fp32": [10.85, 14.23]}
