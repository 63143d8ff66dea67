"""The ninth set of held-out programs (sample_traces/ab_traced/*_ab: HF BERT-base and torchvision ResNet-50 served in
FP32 under `inference_mode` with each batch's predictions copied to the host, a DCGAN trained in FP32, HF Whisper with
eager attention, and ResNet-18 fed by a side-stream prefetcher; each traced in the process that then timed it against
its fix in ABBA rounds, and each fixed program traced alone (`*_ab_fixed`), on an H100, 2026-12-07, session 68) —
recorded before any rule or model change saw them (their savings in tests/test_predictions.py).

What they found: a serving loop's blocking `.cpu()` copy held every fix of the step at zero. The copy, queued behind
the step's kernels, was read as a call whose own time is its whole wait (every call of its name waited, so the
shortest was a wait too) and whose copy's launch latency was the queue's; BERT's FP32 -> BF16 saving was priced at
0.55 ms (`info`) where the rounds measured 26.5 ms. Both are principles of the graph now (docs/replay.md).
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from conftest import SAMPLES, estimate_errors, finding, run_doc

import traceview
from traceview.analyses.replay_graph import build

SET = SAMPLES / "ab_traced"
RUNS = ("bert_infer_fp32_ab", "resnet50_infer_fp32_ab", "dcgan_fp32_ab", "whisper_eager_ab", "prefetch_stream_ab")
FIXED_RULE = {"bert_infer_fp32_ab": "fp32-gemm", "resnet50_infer_fp32_ab": "fp32-conv", "dcgan_fp32_ab": "fp32-conv",
              "whisper_eager_ab": "materialized-attention"}
INPUT_RULES = ("input-bound", "loader-workers", "pageable-memcpy", "host-sync")


def _trace(run: str):
    return traceview.load(str(next((SET / run).glob("*.pt.trace.json*"))))


def test_a_blocking_copy_queued_behind_the_step_waits_for_the_queue_not_for_itself() -> None:
    """BERT's `.cpu()` of each batch's labels: a pageable DtoH `cudaMemcpyAsync` of 27 ms, queued behind the step's
    kernels. Its copy started 27.5 ms after the call began (the queue, not a launch latency) and every call of the
    name waited; the graph keeps the copy's latency at the trace's typical one and the call's own time at its
    wake-up, so the unmodified replay still ends each step where the trace did (fidelity) while a faster device
    lets the call return sooner."""
    t = _trace("bert_infer_fp32_ab")
    g = build(t)
    names = g.a_name.cast(str).to_numpy()
    (calls,) = np.nonzero(names == "cudaMemcpyAsync")
    assert calls.size == 3 and (g.a_end[calls] - g.a_ts[calls] > 26_000_000).all()
    assert (g.a_wait[calls] >= 0).all()
    assert (g.a_own[calls] == g.a_wake[calls]).all() and (g.a_own[calls] < 50_000).all()
    copies = g.a_wait[calls]  # the copy each call waited for
    assert (np.asarray(g.d_lat)[copies] < 50_000).all()
    fid = run_doc(SET / "bert_infer_fp32_ab")["replay"]["fidelity"]
    assert fid["max_error_pct"] < 1.0


def test_fp32_serving_gets_its_precision_fix_first() -> None:
    """FP32 BERT-base at 64 x 128 tokens, GPU busy 96 %: fp32-gemm is what to fix first, and its saving is the
    rounds' (26.5 ms a step, 24.96 to 28.45 across rounds; TF32, the fix the finding advises, priced alike)."""
    doc = run_doc(SET / "bert_infer_fp32_ab")
    f = finding(doc, "fp32-gemm")
    assert f["severity"] == "error"
    assert 24.96 * 0.8 <= f["savings_us"] / 1000 <= 28.45 * 1.2
    assert doc["classification"]["primary"] == "gpu_compute"
    assert max(doc["findings"], key=lambda x: x["savings_us"])["rule"] == "fp32-gemm"


@pytest.mark.parametrize("run", sorted(FIXED_RULE))
def test_fixed_twins_raise_nothing_above_info_for_their_fix(run: str) -> None:
    assert all(f["severity"] == "info" for f in run_doc(SET / f"{run}_fixed")["findings"]
               if f["rule"] == FIXED_RULE[run])


def test_whisper_eager_attention_is_found_on_all_three_score_shapes() -> None:
    """Whisper's encoder self-attention over 1500 frames, its decoder's over 64 tokens and the decoder's
    cross-attention from 64 tokens to 1500 frames: three score shapes, all eager; SDPA saved 24.0 ms a step."""
    f = finding(run_doc(SET / "whisper_eager_ab"), "materialized-attention")
    assert f["severity"] in ("warning", "error") and 24.0 * 0.8 <= f["savings_us"] / 1000 <= 24.0 * 1.2


@pytest.mark.parametrize("run", ["prefetch_stream_ab", "prefetch_stream_ab_fixed"])
def test_a_side_stream_prefetcher_raises_no_input_finding(run: str) -> None:
    """Pinned batches copied on a side stream a step ahead (`non_blocking`, `wait_stream`): the input costs the step
    nothing (the rounds against the batches resident on the GPU: +0.98 ms, -1.08 to +1.17), so no input, copy or
    sync rule may say otherwise."""
    doc = run_doc(SET / run)
    assert [(f["rule"], f["severity"]) for f in doc["findings"]
            if f["rule"] in INPUT_RULES and f["severity"] != "info"] == []
    assert doc["classification"]["primary"] != "input"


@pytest.mark.parametrize("run", [*RUNS, *(r + "_fixed" for r in RUNS)])
def test_replay_fidelity(run: str) -> None:
    fid = run_doc(SET / run)["replay"]["fidelity"]
    assert fid["mean_error_pct"] <= 3.0 and fid["max_error_pct"] <= 8.0


def test_unprofiled_step_estimate_against_the_collector() -> None:
    """As they came: median |error| 4 %, every run within 20 % but the one below."""
    err = estimate_errors(SET, RUNS)
    assert statistics.median(abs(e) for e in err.values()) <= 0.10, err
    assert max(abs(e) for k, e in err.items() if k != "bert_infer_fp32_ab_fixed") <= 0.30, err


@pytest.mark.xfail(strict=True, reason="BERT-base served in BF16 (the FP32 program's fix, traced alone) is a host-bound "
                   "step the profiler slowed 2.9x (19.7 ms traced, 6.76 unprofiled), estimated 10.1 ms (+50 %): "
                   "its solved host share is 0.66 against the fitted 0.49; not inference_mode as such: the 35 scored "
                   "host-bound runs without a backward solve to the fitted share (median -0.02, docs/predictions.md)")
def test_unprofiled_step_estimate_of_bf16_serving() -> None:
    err = estimate_errors(SET, ("bert_infer_fp32_ab",))
    assert abs(err["bert_infer_fp32_ab_fixed"]) <= 0.30, err
