"""Predicted vs measured fix savings (issue 25): each twin's replayed saving (tools/predictions.py) against the
collector's measured unprofiled saving, the issue's bar (±20 % on ≥ 80 % of the covered twins), the table in
docs/predictions.md current, and negative controls quiet."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys

import pytest
from conftest import SAMPLES

import traceview
from traceview.analyses import fixes
from traceview.analyses.overhead import COST_US, HOST_SHARE, SHARE_MAX, profiler_transform
from traceview.analyses.replay import replay
from traceview.report import analyze, select_steps
from traceview.ruleapi import RuleContext

_spec = importlib.util.spec_from_file_location("predictions", SAMPLES.parent / "tools" / "predictions.py")
P = importlib.util.module_from_spec(_spec)
sys.modules["predictions"] = P
_spec.loader.exec_module(P)

#: (set, problem, fixed) -> the measured miss (predicted vs measured ms): xfail(strict); docs/predictions.md says why
MISSES = {  # fmt: skip
    ("collected3", "gpt2_eager_attn", "gpt2_sdpa"): "3.823 predicted vs 11.995 ms measured (-68%): the eager recording's host is slower on ops the fix does not touch; one process (A/B) measures 7.41 ms",
    ("collected3", "gpt2_sdpa_single", "gpt2_sdpa"): "5.725 predicted vs 8.895 ms measured (-36%): the foreach twin's untouched forward/backward ops ran 27% faster (another process); one process (A/B) measures 3.92 ms",
    ("collected3", "gpt2_sdpa_single", "gpt2_sdpa_fused"): "6.741 predicted vs 5.310 ms measured (+27%): the fused twin's untouched forward/backward ops ran 15% faster than the single-tensor run's (another process); one process (A/B) measures 2.14 ms",
    ("collected3", "gpt2_sdpa_item", "gpt2_sdpa_noitem"): "0.410 predicted vs 3.040 ms measured (-87%): the item run's host ran slower everywhere (metadata ops 1.36x); its syncs' waits replay at < 1 ms at any host speed (test_host_sync_twins.py)",
    ("collected3", "adamw_l12_single", "adamw_l12_fused"): "2.630 predicted vs 3.698 ms measured (-29%): the fused twin's untouched forward/backward ops ran 21% faster (another process)",
    ("collected3", "elementwise_32mib_eager", "elementwise_32mib_compiled"): "0.129 predicted vs 0.059 ms measured (+117%): host-bound twins; the compiled call (Dynamo guards, wrapper, Triton launcher) traced 246 µs/step here against 127 µs for the same program in collected2 (measured 270 vs 229 µs), and the fix prices it as one eager op (docs/predictions.md)",
    ("collected3", "train_syncs_item_b16", "train_syncs_deferred_b16"): "0.043 predicted vs 2.418 ms measured (-98%): the item run's host ran slower everywhere (metadata ops 1.10x; at batch 32 0.62x, and the deferred twin measured 2.1 ms slower); the waits replay at < 0.2 ms at any host speed",
    ("collected4", "gpt2_eager_attn_s1024", "gpt2_sdpa_s1024"): "6.015 predicted vs 8.742 ms measured (-31%): a near-device-bound measurement read as a slow host",
    ("collected4", "small_batch_c4_graph", "small_batch_c128_graph"): "1.244 predicted vs 1.673 ms measured (-26%)",
    ("collected4", "input_workers_nw2", "input_workers_nw10"): "8.448 predicted vs 5.616 ms measured (+50%): the problem run's main thread ran its forward ops ~35% faster than every other run of the program (aten::linear median 32 vs 48-58 us, incl. collected5's nw0 with no worker processes); the priced loop is that fast host's",
    ("collected5", "epilogue_bert_eager", "epilogue_bert_fused"): "0.086 predicted vs 1.476 ms measured (-94%): the fused twin's host ran 27% faster on every op the fix does not touch",
    ("collected5", "h2d_resnet18_pageable", "h2d_resnet18_pinned"): "5.952 predicted vs 4.508 ms measured (+32%): the profiler slowed the pageable copy's host staging (6.3-6.8 GB/s traced vs the MLP twin's 8.2-8.6); at that rate the copy is 4.6 ms unprofiled and the rest 12.4 ms, the pinned twin's 12.45",
    ("collected5", "gpt2c_recompile", "gpt2c_mark_dynamic"): "3288.878 predicted vs 2616.195 ms measured (+26%): the compile runs 1.31x slower profiled here, 1.13x on collected2's recompile twin; the fix removes it at its traced length (docs/predictions.md)",
    ("collected5", "cpu_adamw_single", "cpu_adamw_foreach"): "cpu-op-overhead has no replay model (a CPU-only trace); 0.214 ms measured",
}

COVERED = [t for t in P.twins() if t["rule"] and t["measured_ms"] > 0 and t["set"] != "ab_traced"]
#: the same twins measured in the process that took the problem's trace (sample_traces/ab_traced), scored apart
SAME_PROCESS = [t for t in P.twins() if t["set"] == "ab_traced" and t["measured_ms"] > 0]

#: same-process twins (ab_traced) that miss: xfail(strict), with the spread of their rounds. Where the rounds agree
#: (small_batch, elementwise, empty_cache, h2d) the miss is the model's; where they spread by more than the band
#: (the GPT-2 and ResNet twins) runs of one program moved host speed within one process (docs/predictions.md)
MISSES_SAME_PROCESS = {  # fmt: skip
    ("ab_traced", "gpt2_sdpa_item", "gpt2_sdpa_noitem"): "0.661 predicted vs 2.741 ms measured (-76%); the rounds in one process measured 1.209 to 4.232 ms",
    ("ab_traced", "gpt2_eager_attn", "gpt2_sdpa"): "3.668 predicted vs 8.111 ms measured (-55%); the rounds in one process measured 4.362 to 11.476 ms",
    ("ab_traced", "gpt2_sdpa_single_f", "gpt2_sdpa_fused"): "4.030 predicted vs 10.127 ms measured (-60%); the rounds in one process measured 6.228 to 12.099 ms",
    ("ab_traced", "gpt2_sdpa_empty_cache", "gpt2_sdpa_ref"): "5.307 predicted vs 12.839 ms measured (-59%); the rounds in one process measured 11.527 to 15.407 ms",
    ("ab_traced", "gpt2_fp32", "gpt2_sdpa"): "35.361 predicted vs 24.107 ms measured (+47%); the rounds in one process measured 23.031 to 28.551 ms",
    ("ab_traced", "gpt2_eager_attn_s1024", "gpt2_sdpa_s1024"): "5.816 predicted vs 8.577 ms measured (-32%); the rounds in one process measured 6.829 to 10.585 ms",
    ("ab_traced", "resnet18_fp32", "resnet18_bf16_cl"): "4.604 predicted vs 0.241 ms measured (+1806%); the rounds in one process measured -0.967 to 1.475 ms",
    ("ab_traced", "adamw_l12_single", "adamw_l12_fused"): "2.776 predicted vs 3.671 ms measured (-24%); the rounds in one process measured 2.971 to 5.667 ms",
    ("ab_traced", "elementwise_32mib_eager", "elementwise_32mib_compiled"): "0.100 predicted vs 0.067 ms measured (+50%); the rounds in one process measured 0.064 to 0.074 ms",
    ("ab_traced", "h2d_resnet18_pageable", "h2d_resnet18_pinned"): "5.050 predicted vs 8.217 ms measured (-39%); the rounds in one process measured 6.679 to 8.934 ms",
    ("ab_traced", "small_batch_c4_graph", "small_batch_c128_graph"): "1.247 predicted vs 1.915 ms measured (-35%); the rounds in one process measured 1.903 to 1.935 ms",
}


@functools.cache
def predicted(set_: str, problem: str, rule: str, variant: str | None = None) -> float | None:
    return P.predicted_ms(SAMPLES / set_ / problem, rule, variant)


def _param(t: dict):
    key = (t["set"], t["problem"], t["fixed"])
    reason = MISSES.get(key) or MISSES_SAME_PROCESS.get(key)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    prefix = "same-process-" if t["set"] == "ab_traced" else ""
    return pytest.param(t, marks=marks, id=f"{prefix}{t['problem']}->{t['fixed']}")


# the two-process twins (COVERED) and the same-process ones (SAME_PROCESS) are checked alike, scored apart
@pytest.mark.parametrize("t", [_param(t) for t in COVERED + SAME_PROCESS])
def test_predicted_within_20_pct_of_measured(t):
    p = predicted(t["set"], t["problem"], t["rule"], t.get("variant"))
    assert p is not None, f"{t['rule']} has no replay model"
    assert abs(p / t["measured_ms"] - 1) <= P.BAND, f"{p:.3f} predicted vs {t['measured_ms']:.3f} ms measured"


def test_same_process_labels_are_current():
    spec = importlib.util.spec_from_file_location("ab_labels", SAMPLES.parent / "tools" / "ab_labels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--check"]) == 0, "sample_traces/ab_traced labels are stale: python tools/ab_labels.py"
    labels = json.loads((SAMPLES / "ab_traced/labels.json").read_text())
    for t in labels["twins"]:  # the saving is the median of the rounds' differences, as ab_twin.py measures it
        r = sorted(t["per_round_saving_ms"])
        assert min(r) <= t["measured_fix_saving_ms"] <= max(r)
    assert len(SAME_PROCESS) == 12 and set(MISSES_SAME_PROCESS) <= {(t["set"], t["problem"], t["fixed"]) for t in SAME_PROCESS}


@pytest.mark.xfail(strict=True, reason="33 of 46 covered twins within ±20 % (72 %) where the issue asks for 80 % (docs/predictions.md)")
def test_the_issue_bar():
    scored = [(predicted(t["set"], t["problem"], t["rule"], t.get("variant")), t["measured_ms"]) for t in COVERED]
    hits = [abs(p / m - 1) <= P.BAND for p, m in scored if p is not None]
    assert len(hits) == 46
    assert sum(hits) >= 0.8 * len(hits)


def test_every_twin_with_a_rule_is_scored_and_the_misses_are_real():
    # the misses named above are twins of the labels (no stale entry), and the covered set is what the labels say
    keys = {(t["set"], t["problem"], t["fixed"]) for t in COVERED}
    assert set(MISSES) <= keys
    assert len(COVERED) == 47


def test_docs_table_is_current():
    assert P.main(["--check"]) == 0, "docs/predictions.md is stale: python tools/predictions.py --write"


@functools.cache
def _findings(rel: str) -> list[dict]:
    rep = analyze([SAMPLES / rel])
    assert not rep.errors
    return rep.traces[0]["findings"]


# negative controls: a fix measured to save nothing must not be raised above info
@pytest.mark.parametrize(("rel", "rule"), [
    ("collected3/gpt2_sdpa", "unfused-optimizer"),  # foreach -> fused measured -3.6 ms
    ("collected2/train_syncs_item", "host-sync"),  # the deferred twin measured -2.06 ms
])
def test_negative_control_fix_is_at_most_info(rel, rule):
    assert [f["severity"] for f in _findings(rel) if f["rule"] == rule and f["severity"] != "info"] == []


@pytest.mark.parametrize("rel", [
    "collected2/fp32_gemm_tf32", "collected2/compile_no_break", "collected2/gemm_bf16_n4096",
    # its loss (log_softmax → nll_loss → argmax → …) and grad-norm (norm → clamp → _foreach_mul_ …) runs split at
    # their reductions and multi-tensor kernels: no chain left worth a finding (elementwise-chain warned before)
    "collected2/train_gradnorm_deferred_b64",
    pytest.param("collected2/cnn_input_nw8", marks=pytest.mark.xfail(strict=True, reason=(
        "launch-bound error at 5.31 ms/step and elementwise-chain at 3.09 ms replayed against the measured 17.9 ms "
        "unprofiled step (~10 ms of GPU work: labels allow launch-bound); no twin measures either fix"))),
])
def test_expected_none_raises_nothing_above_info(rel):
    assert [(f["rule"], f["severity"]) for f in _findings(rel) if f["severity"] != "info"] == []


def test_no_saving_exceeds_its_step():
    for rel in ("collected2/train_syncs_item", "collected3/gpt2_sdpa_single", "collected2/compile_recompile_every_step"):
        rep = analyze([SAMPLES / rel]).traces[0]
        step = rep["projection"]["replayed_unprofiled_step_us"]
        assert all(f["savings_us"] <= step for f in rep["findings"])
        assert sum(f["savings_us"] for f in rep["findings"] if f["rule"] == "recompile") <= step


def test_a_device_bound_measurement_keeps_the_fitted_host_share():
    # resnet18_fp32's measured unprofiled step (13.467 ms, manifest.json) is below what the replay reaches even with
    # the host all but stripped (the device chain: GPU busy 13.05 ms a step): the measurement does not fix the host
    # share, and pricing keeps the fitted one instead of the largest (which let the fp32-conv fix save 7.66 ms)
    run = SAMPLES / "collected3" / "resnet18_fp32"
    measured_ns = json.loads((run / "manifest.json").read_text())["step_time"]["unprofiled_ms_median"] * 1e6
    t = traceview.load(str(next(run.glob("*.pt.trace.json*"))))
    ctx, _ = RuleContext.prepare(t, select_steps(t, None))
    floor = replay(t, ctx.steps, [profiler_transform(t, {**COST_US, "host_share": SHARE_MAX})]).mean()
    assert measured_ns < floor
    priced = fixes.pricing_transform(ctx)
    assert priced.host_share == HOST_SHARE
    assert replay(t, ctx.steps, [priced]).mean() <= floor * 1.01
