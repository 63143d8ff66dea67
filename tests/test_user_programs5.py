"""The fifth set of held-out programs (sample_traces/user_programs5_h100: RoBERTa with eager attention, OPT trained
with single-tensor AdamW, ResNet-34 calling empty_cache() every step, VGG-11-BN in FP32, ResNeXt-50 in bf16 NCHW,
a per-image CutMix loop; each with its fixed twin, recorded on an H100 with `traceview collect` at its defaults),
analysed as they came, against each program and its fix timed alone (fixes_h100.ndjson, two alternated runs)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES, finding, pair_savings, run_doc, run_rank, steady_ms, timed_runs

SET = SAMPLES / "user_programs5_h100"
RUNS = ("roberta_eager", "opt_adamw_loop", "resnet34_empty_cache", "vgg_fp32", "resnext_bf16_nchw", "cutmix_loop")


def _saved(prog: str) -> list[float]:
    """The measured saving of each alternated pair of the first round: the program's mean step less its fixed
    twin's (steps 11 on)."""
    return pair_savings([r for r in timed_runs(SET, prog) if "round" not in r])


def _findings(run: str) -> list[dict]:
    return run_doc(SET / run)["findings"]


def _finding(run: str, rule: str) -> dict:
    return finding(run_doc(SET / run), rule)


@pytest.mark.parametrize(("run", "rule"), [
    ("roberta_eager", "materialized-attention"),  # 8.67 ms against 8.71 / 8.28
    ("opt_adamw_loop", "unfused-optimizer"),  # 7.13 against 7.51 / 5.60 (the fused variant the text advises)
    ("vgg_fp32", "fp32-conv"),  # 10.70 against 10.11 / 10.07
    # as it came 5.36 (the transposes only, -56 %); with PyTorch's NCHW batch norms and cuDNN's untransposed 1x1
    # convolutions priced at their channels_last rates (a model built on ResNet-50, never on this trace): 11.69
    ("resnext_bf16_nchw", "fp32-conv"),
])
def test_saving_against_the_fix_timed_alone(run: str, rule: str) -> None:
    """Each pair's measured saving brackets: the prediction within ±20 % of the pairs' mean and inside the range
    the two pairs span widened by 20 %."""
    saved = _saved(run)
    got = _finding(run, rule)["savings_us"] / 1000
    assert 0.8 * np.mean(saved) <= got <= 1.2 * np.mean(saved)
    assert 0.8 * min(saved) <= got <= 1.2 * max(saved)


def test_empty_cache_saving_inside_the_spread_of_its_measurements() -> None:
    """ResNet-34's two problem runs stepped at 25.9 and 18.5 ms (the first run's steps wander 17-32 ms), so the
    measured saving is 11.9 or 6.9 ms; the collector's unprofiled steps of the traced run (18.4-21.0 ms) side with
    the second. The finding's 7.33 ms is inside that spread and within 20 % of the second pair."""
    lo, hi = sorted(_saved("resnet34_empty_cache"))
    f = _finding("resnet34_empty_cache", "allocator-churn")
    assert f["severity"] == "error" and "empty_cache()" in f["fix"]
    got = f["savings_us"] / 1000
    assert 0.8 * lo <= got <= 1.2 * hi and abs(got / lo - 1) <= 0.2


def test_cutmix_loop_is_a_negative_control() -> None:
    """Batching the per-image CutMix saved nothing (the loop's ~32 copies hide under ResNet-18's GPU work: -1.6 and
    +0.3 ms), so no finding may claim that batching it saves more than a tenth of the step."""
    assert np.mean(_saved("cutmix_loop")) < 0.5
    tr = run_doc(SET / "cutmix_loop")
    step = tr["profiling"]["estimated_unprofiled_step_us"]
    for f in tr["findings"]:
        loop = (f.get("evidence") or {}).get("loop")
        if loop:
            assert f["savings_us"] <= 0.1 * step


@pytest.mark.parametrize("run", RUNS)
def test_fixed_twins_raise_nothing_above_info_for_their_fix(run: str) -> None:
    fixed_rule = {"roberta_eager": "materialized-attention", "opt_adamw_loop": "unfused-optimizer",
                  "resnet34_empty_cache": "allocator-churn", "vgg_fp32": "fp32-conv",
                  "resnext_bf16_nchw": "fp32-conv", "cutmix_loop": None}[run]
    for f in _findings(f"{run}_fixed"):
        if f["rule"] == fixed_rule:
            assert f["severity"] == "info", f["title"]


@pytest.mark.parametrize("run", [r + s for r in RUNS for s in ("", "_fixed")])
def test_unprofiled_step_estimate_against_the_collector(run: str) -> None:
    """The profiler-cost estimate from the trace alone against the collector's CUDA-event median of the same
    program's unprofiled steps: within 10 % on eleven of the twelve runs; the per-image CutMix loop (64 Python
    iterations, each a few slices and a copy under the profiler) within 25 %."""
    tr = run_doc(SET / run)
    measured = run_rank(SET / run)["unprofiled_step_ms_median"]
    err = tr["profiling"]["estimated_unprofiled_step_us"] / 1000 / measured - 1
    assert abs(err) <= (0.25 if run == "cutmix_loop" else 0.10), err


def _round2(args: list[str]) -> list[float]:
    """RoBERTa's second round (a later device session): mean steps of each run of `roberta_eager ARGS`."""
    return [steady_ms(r) for r in timed_runs(SET, "roberta_eager") if r.get("round") == 2 and r["args"] == args]


def test_unaligned_vocabulary_saving_against_the_padded_twin() -> None:
    """TV208 leads on RoBERTa (its vocabulary of 50265): the padded twin (50304, `--pad-vocab`) timed alone, alternated
    with the program, saved 11.58 and 9.91 ms; TV208 prices 9.74 on the trace (-16 %, -2 %) and 9.77 on the SDPA twin's
    trace, whose padding saved 9.76 (33.15 -> 23.39 ms). Both fixes priced together (38.42 -> 19.49 ms unprofiled)
    against both measured (39.7 -> 23.4 ms) stay within 20 % too."""
    problem, padded = _round2([]), _round2(["--pad-vocab"])
    assert len(problem) == len(padded) == 2
    f = _finding("roberta_eager", "unaligned-gemm")
    assert f["severity"] == "error" and "50304" in f["fix"]
    for p, q in zip(problem, padded, strict=True):
        assert abs(f["savings_us"] / 1000 / (p - q) - 1) <= 0.2
    (sdpa,), (both,) = _round2(["--fixed"]), _round2(["--fixed", "--pad-vocab"])
    g = _finding("roberta_eager_fixed", "unaligned-gemm")
    assert abs(g["savings_us"] / 1000 / (sdpa - both) - 1) <= 0.2
    proj = run_doc(SET / "roberta_eager")["projection"]  # (every fix replayed at once, not the findings summed)
    saved = proj["replayed_unprofiled_step_us"] - proj["all_fixed_unprofiled_step_us"]
    assert abs(saved / 1000 / (np.mean(problem) - both) - 1) <= 0.2
