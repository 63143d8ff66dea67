"""The sixth set of held-out programs (sample_traces/user_programs6_h100: HF ViT-B/16 with eager attention, ConvNeXt-T
trained with single-tensor AdamW, Swin-T calling empty_cache() every step, ConvNeXt-T in bf16 NCHW; each with its
fixed twin, recorded on an H100 with `traceview collect` at its defaults) — recorded while the rules they exercise
were being reworked and kept from that work — against each program and its fix timed alone (fixes_h100.ndjson)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES, finding, pair_savings, run_doc, run_rank, timed_runs

SET = SAMPLES / "user_programs6_h100"
RUNS = ("hf_vit_eager", "convnext_adamw_loop", "swin_empty_cache", "convnext_bf16_nchw")
FIXED_RULE = {"hf_vit_eager": "materialized-attention", "convnext_adamw_loop": "unfused-optimizer",
              "swin_empty_cache": "allocator-churn", "convnext_bf16_nchw": "fp32-conv"}


def _saved(prog: str) -> list[float]:
    """Each alternated pair's measured saving: the program's median step less its fixed twin's (steps 12 on; a
    median: two of the eight runs have a few 2-3x outlier steps)."""
    return pair_savings(timed_runs(SET, prog), stat=np.median)


def _finding(run: str, rule: str) -> dict:
    return finding(run_doc(SET / run), rule)


def test_vit_attention_saving_against_sdpa_timed_alone() -> None:
    """TV205 on HF ViT-B/16 (197 tokens, 12 heads): within 20 % of both pairs (17.40 and 17.30 ms measured)."""
    got = _finding("hf_vit_eager", "materialized-attention")["savings_us"] / 1000
    assert all(abs(got / s - 1) <= 0.2 for s in _saved("hf_vit_eager"))


OPTIM = ("ConvNeXt-T's single-tensor AdamW: the program alone measured 11.8 and 4.1 ms saved by the fused optimizer "
         "(its problem runs stepped 40.7 and 32.8 ms), the traced process's own unprofiled steps 3.6 (32.4 -> 28.8); "
         "the finding prices 3.74 (3.24 as it came): inside the traced process's measurement, not within 20 % of "
         "the first run alone")
ALLOC = ("Swin-T with empty_cache(): 26.2 / 19.1 ms measured against 11.88 priced (11.41 as it came): the driver calls, "
         "their waits and the allocator's slow path; the loop's other host work also runs slower under the churn, "
         "which one trace cannot tell from a slower process")


@pytest.mark.parametrize(("run", "reason"), [
    pytest.param("convnext_adamw_loop", OPTIM, marks=pytest.mark.xfail(strict=True, reason=OPTIM)),
    pytest.param("swin_empty_cache", ALLOC, marks=pytest.mark.xfail(strict=True, reason=ALLOC)),
])
def test_saving_against_the_fix_timed_alone(run: str, reason: str) -> None:
    """Known misses, strict: each must stay a miss until the model reaches them (then this fails and says so)."""
    saved = _saved(run)
    got = _finding(run, FIXED_RULE[run])["savings_us"] / 1000
    assert all(abs(got / s - 1) <= 0.2 for s in saved), reason


def test_convnext_in_nchw_is_a_negative_control() -> None:
    """ConvNeXt-T's depthwise 7x7 and pointwise convolutions run as fast in NCHW as in channels_last (0.49 and 0.35
    ms of 29 measured): no layout finding may claim more than a tenth of the step."""
    assert max(_saved("convnext_bf16_nchw")) < 1.0
    tr = run_doc(SET / "convnext_bf16_nchw")
    step = tr["profiling"]["estimated_unprofiled_step_us"]
    assert all(f["savings_us"] <= 0.1 * step or f["severity"] == "info"
               for f in tr["findings"] if f["rule"] == "fp32-conv")


@pytest.mark.parametrize("run", RUNS)
def test_fixed_twins_raise_nothing_above_info_for_their_fix(run: str) -> None:
    assert all(f["severity"] == "info" for f in run_doc(SET / f"{run}_fixed")["findings"]
               if f["rule"] == FIXED_RULE[run])


@pytest.mark.parametrize("run", [r + s for r in RUNS for s in ("", "_fixed")])
def test_unprofiled_step_estimate_against_the_collector(run: str) -> None:
    """Within 8 % of the collector's CUDA-event median on all eight runs (+0.7 to +7.4 % as they came)."""
    tr = run_doc(SET / run)
    measured = run_rank(SET / run)["unprofiled_step_ms_median"]
    assert abs(tr["profiling"]["estimated_unprofiled_step_us"] / 1000 / measured - 1) <= 0.08
