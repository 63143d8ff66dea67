"""torch.compile twins of session 65 (sample_traces/ab_traced/*_tiny_compile_ab: HF GPT-2, BERT and Llama at batch
1-2 x 64 tokens, where the host decides the step; each problem traced in the process that then timed it against
the compiled program in ABBA rounds, and each compiled program traced alone, `*_fixed`, on an H100). Their savings
are scored in tests/test_predictions.py; here, what the compiled traces say about the fix elementwise-chain
advises."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import SAMPLES, run_doc
from traceview.rules import BY_NAME

import traceview
from traceview.options import Options
from traceview.report import rule_context, select_steps

SET = SAMPLES / "ab_traced"
RUNS = ("gpt2_tiny_compile_ab", "bert_tiny_compile_ab", "llama_tiny_compile_ab")


def _kernels_per_step(run: str) -> tuple[float, float]:
    """(kernels launched a step, kernels the chain fusion leaves a step) of a trace."""
    t = traceview.load(str(next((SET / run).glob("*.pt.trace.json*"))))
    ctx, _, _ = rule_context(t, select_steps(t, None), None)
    g = ctx.trace.gpu.filter(pl.col("launch").is_not_null() & (pl.col("launch_ts") >= ctx.lo)
                             & (pl.col("launch_ts") < ctx.hi))
    m = BY_NAME["elementwise-chain"]
    tf = m.fix_transform(ctx.for_rule(m, Options().options_for(m)))
    gone = 0 if tf is None else sum(v == 0 for v in tf.gpu_dur.values())
    return g.height / ctx.steps.height, (g.height - gone) / ctx.steps.height


@pytest.mark.parametrize("run", RUNS)
def test_the_compiled_program_raises_no_chain_and_stays_launch_bound(run: str) -> None:
    """The fix applied: no elementwise chain left to fuse; at batch 1 the compiled step still waits on the host, and
    launch-bound says so (the next step is CUDA graphs: `mode="reduce-overhead"`)."""
    doc = run_doc(SET / f"{run}_fixed")
    assert not [f for f in doc["findings"] if f["rule"] == "elementwise-chain" and f["severity"] != "info"]
    assert [f["severity"] for f in doc["findings"] if f["rule"] == "launch-bound"] == ["error"]


@pytest.mark.parametrize("run", RUNS)
def test_inductor_keeps_fewer_kernels_than_the_chains_leave(run: str) -> None:
    """Inductor fuses beyond the runs of consecutive pointwise kernels the rule finds (into reductions, norms, the
    GEMMs' epilogues): the compiled step launches at most 80 % of what the chain fusion leaves of the eager step
    (as recorded: GPT-2 352 against 545, BERT 841 against 1089, Llama 317 against 587)."""
    eager, left = _kernels_per_step(run)
    compiled, _ = _kernels_per_step(f"{run}_fixed")
    assert left < eager and compiled <= 0.8 * left, (eager, left, compiled)


@pytest.mark.parametrize("run", RUNS)
def test_the_compiled_step_was_faster_in_every_round(run: str) -> None:
    r = json.loads((SET / run / "ab_result.json").read_text())
    assert min(r["per_round_saving_ms"]) > 0 and r["fixed_step_ms"] < r["problem_step_ms"]


#: the training twins compiled whole whose fix is torch.compile alone (elementwise-chain's COMPILE_RATIO)
COMPILED_WHOLE = ("gpt2p_compile", "bertp_compile", "pythia_sdpa_compile_ab", "electra_fp32_compile_ab",
                  "qwen2_eager_compile_ab", *RUNS)


def test_the_compile_ratio_is_what_the_twins_measured() -> None:
    """COMPILE_RATIO (lowest, median, highest of measured saving over the priced one) recomputed from the twins'
    rounds and today's prediction: a change to the rule's pricing must restate it."""
    import statistics
    import sys

    from conftest import ROOT, ab_twins

    sys.path.insert(0, str(ROOT / "tools"))
    import predictions as P

    from rules.elementwise_chain import COMPILE_RATIO

    r = [ab_twins()[t]["measured_fix_saving_ms"] / P.predicted_ms(SET / t, "elementwise-chain")
         for t in COMPILED_WHOLE]
    assert len(r) == 8
    assert COMPILE_RATIO == (round(min(r), 2), round(statistics.median(r), 2), round(max(r), 2)), r


def _chain_fixes(rel: str) -> list[str]:
    return [f["fix"] for f in run_doc(SAMPLES / rel)["findings"] if f["rule"] == "elementwise-chain"]


def test_the_fix_says_what_compiling_the_whole_model_adds_where_the_host_holds_the_step() -> None:
    doc = run_doc(SET / "pythia_sdpa_compile_ab")
    prof = doc["profiling"]
    idle = 100 * (1 - prof["gpu_busy_per_step_us"] / (prof["unprofiled_step_ms"] * 1000))
    (fix,) = _chain_fixes("ab_traced/pythia_sdpa_compile_ab")
    assert f"with the GPU idle {idle:.0f} % of this step without the profiler" in fix and 45 <= idle <= 55
    # the GPU holds the step (a 128 MiB chain): no note; already compiled: no note
    assert all("Compiled whole" not in f for f in _chain_fixes("ab_traced/elementwise_128mib_eager"))
    assert _chain_fixes("collected2/compile_no_break")
    assert all("Compiled whole" not in f for f in _chain_fixes("collected2/compile_no_break"))
