"""The projected step time (traceview/sections/projection.py): timeline invariants, and each fix's predicted saving
against the measured saving of its eager/fixed twin (sample_traces/collected2: unprofiled CUDA-event step
times of both runs, same machine and session)."""

from __future__ import annotations

import functools
import json

import pytest
from conftest import SAMPLES

from traceview.report import analyze
from traceview.sections.projection import unprofiled_step_us

C2 = SAMPLES / "collected2"
LABELS = json.loads((C2 / "labels.json").read_text())


@functools.cache
def entry(rel: str) -> dict:
    rep = analyze([SAMPLES / rel])
    assert not rep.errors
    return rep.traces[0]


# (problem run, fixed run, the rule whose fix the twin applies). The bar: the replayed saving within
# ±20 % of the measured one; the known misses are xfail(strict) with their measured numbers (the timeline
# projection they replace was within 25 % on some of them: the replay's transform is the principled model, its
# misses are named here, not hidden by a wider band).
def _miss(reason: str):
    return pytest.mark.xfail(strict=True, reason=reason)


PAIRS = [
    ("fp32_gemm_highest", "fp32_gemm_tf32", "fp32-gemm"),
    # (the projection prices the fix the finding advises, fused=True: the foreach twin measures about as much)
    ("adamw_single_tensor", "adamw_fused", "unfused-optimizer"),
    ("adamw_single_tensor", "adamw_foreach", "unfused-optimizer"),
    ("compile_recompile_every_step", "compile_stable_shape", "recompile"),
    ("tiny_ops_n64_eager", "tiny_ops_n64_cudagraph", "launch-bound"),
    ("tiny_ops_n64_eager", "tiny_ops_n64_reduce_overhead", "launch-bound"),
    ("train_gradnorm_item_b64", "train_gradnorm_deferred_b64", "host-sync"),
    ("train_gradnorm_item_b32", "train_gradnorm_deferred_b32", "host-sync"),
    ("cnn_input_nw0", "cnn_input_nw8", "input-bound"),
    # (a kernel the fix removes takes the device's gap before it: 16 small kernels and their ~1 µs gaps a step)
    ("fragmented_eager", "fragmented_compiled", "elementwise-chain"),
    ("compile_graph_break", "compile_no_break", "graph-break"),
    # (+17 %: the compiled loop's step held at the host's own pace, docs/replay.md; +27 % before, a miss)
    ("elementwise_chain_eager", "elementwise_chain_compiled", "elementwise-chain"),
]
TOL = 0.20


def _run(name: str) -> str:
    return f"collected2/{name}"


def _fix(e: dict, rule: str) -> dict:
    return next(f for f in e["projection"]["fixes"] if f["rule"] == rule)


@pytest.mark.parametrize(("problem", "fixed", "rule"), PAIRS)
def test_predicted_saving_vs_measured_twin(problem, fixed, rule):
    tol = TOL
    measured = LABELS[problem]["unprofiled_step_ms"] - LABELS[fixed]["unprofiled_step_ms"]
    assert LABELS[problem]["twin"] in (fixed, LABELS[fixed]["twin"]) or fixed in LABELS[problem].get("also_fixed_by", {})
    p = entry(_run(problem))["projection"]
    assert p["unprofiled_source"] == "measured"
    assert p["unprofiled_step_us"] == pytest.approx(LABELS[problem]["unprofiled_step_ms"] * 1000, abs=1)
    fx = _fix(entry(_run(problem)), rule)
    # the twin measures the fix alone: a fix whose time a larger fix saves too reports the remainder, and alone
    predicted = fx.get("alone_savings_us", fx["savings_us"]) / 1000
    err = (predicted - measured) / measured
    assert abs(err) <= tol, f"{problem}: predicted {predicted:.3f} ms, measured {measured:.3f} ms ({err:+.0%})"


def test_removing_syncs_on_a_launch_bound_loop_predicts_little():
    # measured: -2.06 ms (the deferred twin is slower: host speed varies by up to ~25 % between processes on a
    # launch-bound loop); the projection keeps the host-sync saving small against the 7.1 ms step
    p = entry(_run("train_syncs_item"))["projection"]
    assert _fix(entry(_run("train_syncs_item")), "host-sync")["savings_us"] < 0.1 * p["unprofiled_step_us"]


@pytest.mark.parametrize("rel", [_run("compile_graph_break"), _run("adamw_single_tensor"), _run("fragmented_eager"),
                                 "gpu_h200_compile/fp32_gemm_no_tf32.json.gz", "gpu_h200/train_tinygpt_modules.json.gz"])
def test_replayed_projection_invariants(rel):
    e = entry(rel)
    p = e["projection"]
    assert p["step_us"] == pytest.approx(e["summary"]["avg_step_us"], rel=1e-3) or e["warnings"]
    base = p["replayed_unprofiled_step_us"]
    assert 0 < base <= p["step_us"] + 0.01  # the profiler's cost only takes time off
    for f in p["fixes"]:
        assert 0 <= f["savings_us"] <= base
        assert f["step_us"] == pytest.approx(base - f["savings_us"], abs=0.01)
        # the projection's number is the findings' number: a rule's findings together carry its saving
        got = sum(x["savings_us"] for x in e["findings"] if x["rule"] == f["rule"])
        assert got == pytest.approx(f["savings_us"], abs=0.002 * max(1, len(e["findings"])))
    # every fix applied together in one replay: at least the largest single fix (a transform only takes time
    # off), never below zero, never summed
    saved = base - p["all_fixed_unprofiled_step_us"]
    assert max(f["savings_us"] for f in p["fixes"]) - 0.01 <= saved <= base
    assert p["all_fixed_unprofiled_step_us"] > 0


def test_fp32_fix_projects_the_tf32_twin():
    # gpu_h200_compile twins (profiled GEMM kernels, no manifest): TF32 GEMM 2.66 ms vs FP32 21.5 ms
    e = entry("gpu_h200_compile/fp32_gemm_no_tf32.json.gz")
    p = e["projection"]  # no manifest: the unprofiled step is the trace's own estimate
    assert p["unprofiled_source"] == "estimate"
    assert p["unprofiled_step_us"] == pytest.approx(e["profiling"]["estimated_unprofiled_step_us"], abs=0.01)
    fp32 = _fix(entry("gpu_h200_compile/fp32_gemm_no_tf32.json.gz"), "fp32-gemm")
    twin = entry("gpu_h200_compile/fp32_gemm_tf32.json.gz")
    gemm = [k for k in twin["top_kernels"] if "gemm" in k["name"]][0]["mean_us"]
    fp32_gemm = [k for k in entry("gpu_h200_compile/fp32_gemm_no_tf32.json.gz")["top_kernels"] if "gemm" in k["name"]][0]
    assert fp32["traced_savings_us"] == pytest.approx(fp32_gemm["mean_us"] - gemm, rel=0.1)


def test_unprofiled_source_prefers_the_measurement():
    assert unprofiled_step_us(None) == (None, None, None)
    assert unprofiled_step_us({"unprofiled_step_ms": 2.0, "profiled_step_ms": 3.0}) == (2000.0, "measured", 3000.0)
    # the measurement wins over the estimate; the estimate stands in without one
    assert unprofiled_step_us({"estimated_unprofiled_step_us": 1500.0, "unprofiled_step_ms": 2.0}) == (2000.0, "measured", None)
    assert unprofiled_step_us({"estimated_unprofiled_step_us": 1500.0}) == (1500.0, "estimate", None)
