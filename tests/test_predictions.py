"""Predicted vs measured fix savings (issue 25): each twin's replayed saving (tools/predictions.py) against the
collector's measured unprofiled saving, the issue's bar (±20 % on ≥ 80 % of the covered twins), the table in
docs/predictions.md current, and negative controls quiet."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys

import pytest
from conftest import SAMPLES, iqr

import traceview
from traceview.analyses import fixes
from traceview.analyses.overhead import (
    SHARE_MAX,
    TRACE_TOL,
    host_share,
    share_transform,
)
from traceview.analyses.replay import replay
from traceview.report import analyze, select_steps
from traceview.ruleapi import RuleContext

_spec = importlib.util.spec_from_file_location("predictions", SAMPLES.parent / "tools" / "predictions.py")
P = importlib.util.module_from_spec(_spec)
sys.modules["predictions"] = P
_spec.loader.exec_module(P)

#: (set, problem, fixed) -> the measured miss (predicted vs measured ms): xfail(strict); docs/predictions.md says why
MISSES = {  # fmt: skip
    ("collected3", "gpt2_eager_attn", "gpt2_sdpa"): "4.923 predicted vs 11.995 ms measured (-59%): the eager recording's host is slower on ops the fix does not touch; one process (A/B) measures 7.41 ms, the trace's own process (ab_traced) 8.11 ms, predicted 6.82 there",
    ("collected3", "resnet18_fp32", "resnet18_bf16_cl"): "0.972 predicted vs 2.430 ms measured (-60%): two processes; one process (A/B) measures 7.18 ms, the trace's own process (ab_traced) 4.79 ms, predicted 3.82 there",
    ("collected3", "gpt2_sdpa_single", "gpt2_sdpa"): "4.971 predicted vs 8.895 ms measured (-44%): the foreach twin's untouched forward/backward ops ran 27% faster (another process); one process (A/B) measures 3.92 ms",
    ("collected3", "gpt2_sdpa_item", "gpt2_sdpa_noitem"): "0.406 predicted vs 3.040 ms measured (-87%): the item run's host ran slower everywhere (metadata ops 1.36x); its syncs' waits replay at < 1 ms at any host speed (test_host_sync_twins.py)",
    ("collected3", "adamw_l12_single", "adamw_l12_fused"): "2.520 predicted vs 3.698 ms measured (-32%): the fused twin's untouched forward/backward ops ran 21% faster (another process)",
    ("collected3", "train_syncs_item_b16", "train_syncs_deferred_b16"): "0.043 predicted vs 2.418 ms measured (-98%): the item run's host ran slower everywhere (metadata ops 1.10x; at batch 32 0.62x, and the deferred twin measured 2.1 ms slower); the waits replay at < 0.2 ms at any host speed",
    ("collected4", "input_workers_nw2", "input_workers_nw10"): "8.869 predicted vs 5.616 ms measured (+58%): the problem run's main thread ran its forward ops ~35% faster than every other run of the program (aten::linear median 32 vs 48-58 us, incl. collected5's nw0 with no worker processes); the priced loop is that fast host's",
    ("collected5", "epilogue_bert_eager", "epilogue_bert_fused"): "0.086 predicted vs 1.476 ms measured (-94%): the fused twin's host ran 27% faster on every op the fix does not touch",
    ("collected5", "h2d_resnet18_pageable", "h2d_resnet18_pinned"): "5.952 predicted vs 4.508 ms measured (+32%): the profiler slowed the pageable copy's host staging (6.3-6.8 GB/s traced vs the MLP twin's 8.2-8.6); at that rate the copy is 4.6 ms unprofiled and the rest 12.4 ms, the pinned twin's 12.45",
    ("collected4", "alloc_churn_empty_cache", "alloc_churn"): "7.942 predicted vs 5.234 ms measured (+52%): two processes; the fixed program's process ran its metadata ops 1.7x slower than the churning one's (test_allocator_churn_twins: ratio 0.60), so its measured step (14.09 ms) sits above the fixed step the churning trace replays (11.44 ms, device-bound: 10.9 ms of kernels a step) and the saving it measures below the replayed one; the same program timed in one process on the H100 saved 13.7 ms, 1.5x its driver calls",
    ("collected5", "cpu_adamw_single", "cpu_adamw_foreach"): "0.000 predicted vs 0.214 ms measured (3 % of the step): foreach=True on CPU runs the same per-tensor kernels one after another; cpu-op-overhead advises fused=True and prices foreach at nothing",
}

COVERED = [t for t in P.twins() if t["rule"] and t["measured_ms"] > 0 and t["set"] != "ab_traced"]
#: the same twins measured in the process that took the problem's trace (sample_traces/ab_traced), scored apart
SAME_PROCESS = [t for t in P.twins() if t["set"] == "ab_traced" and t["measured_ms"] > 0 and not t.get("control")
                and t["rule"] and not P.unresolved(t["rounds"], t["measured_ms"])]
#: same-process twins whose rounds spread wider than the saving they measure: listed, not scored
UNRESOLVED = [t for t in P.twins() if t["set"] == "ab_traced" and P.unresolved(t["rounds"], t["measured_ms"])]

#: same-process twins (ab_traced) that miss: xfail(strict), with the spread of their rounds. The rounds run after
#: the capture with CUPTI torn down (TEARDOWN_CUPTI=1), at the pace of the wait steps the pricing is solved to;
#: where the rounds agree (the optimizer, attention s1024, small_batch, elementwise) the miss is the model's
MISSES_SAME_PROCESS = {  # fmt: skip
    ("ab_traced", "resnet50_infer_fp32_ab", "resnet50_infer_bf16_cl_ab"): "0.000 predicted vs 4.649 ms measured (-100%); the rounds in one process measured 4.24 to 5.46 ms; torchvision ResNet-50 served in FP32 under inference_mode, a device-bound step (11.53 ms, its device chain 11.2) whose host speed the measurement leaves open: replayed at the fitted profiler share its host alone takes 11.5 ms, and fp32-conv's transform adds autocast's cost as training programs measured it (a weight cast and its gradient's node, the convolution's dispatch again, native batch norm's statistics), 6.3 ms a step, so the fix replays 5.7 ms slower; the fixed program's own trace runs conv2d at 91 us against 122 and its step measured 6.9 ms",
    ("ab_traced", "adamw_l12_single", "adamw_l12_fused"): "2.212 predicted vs 1.652 ms measured (+34%); the rounds in one process measured 1.556 to 2.255 ms; a host-bound step (0.5 ms of kernels per 3.9 ms): the single-tensor loop's unprofiled host time is what the fix removes. The step after the fix replays at 2.20 ms against 2.23 measured; the problem's rounds ran 3.86 ms a step where the traced run's wait steps, which the pricing is solved to, ran 4.39 (its steps after the capture 3.63-3.81): anchored to the rounds' step it predicts 1.93 (+17 %)",
    ("ab_traced", "elementwise_32mib_eager", "elementwise_32mib_compiled"): "0.051 predicted vs 0.034 ms measured (+50%); the rounds in one process measured 0.019 to 0.043 ms; host-bound fixed twins: the compiled loop's step replays at 0.102 ms against 0.113 measured (the compiled call priced at 5.3 eager ops, 32 us here), and a saving of a quarter of the step inherits four times the step's error",
    ("ab_traced", "elementwise_8mib_eager", "elementwise_8mib_compiled"): "0.017 predicted vs 0.011 ms measured (+48%); the rounds in one process measured 0.000 to 0.019 ms; the fixed step replays at 0.112 ms against 0.114 measured: a saving of a tenth of the step",
    ("ab_traced", "mobilenet_graph", "mobilenet_cuda_graph"): "9.614 predicted vs 13.594 ms measured (-29%): the fixed step is right (3.15 replayed, 3.20 measured), the problem's rounds ran 16.79 ms where the traced run's unprofiled wait steps ran 12.76 in the same process (the host's speed drifts: the same loop against itself ran 24.4 vs 25.1 ms in rounds, 13.2-19.6 ms in fresh processes)",
    ("ab_traced", "bertp_compile", "bertp_compiled"): "6.917 predicted vs 10.710 ms measured (-35%); the rounds in one process measured 9.735 to 16.663 ms; a host-bound step (BERT at sequence 512, its GEMMs padded): Inductor also drops the host work of ops it does not fuse (views, transposes and the dispatch of the GEMMs it calls from its wrapper), which the chain fusion does not price",
    ("ab_traced", "bert_fp32", "bert_bf16"): "27.720 predicted vs 39.842 ms measured (-30%); the rounds in one process measured 33.25 to 41.33 ms; the BF16 step is the host's: replayed at the FP32 trace's host pace, 43.8 ms (36.6 of the FP32 host alone, 7.2 of autocast's casts), where it measured 31.3 in the rounds; the same FP32 program's other recording that day (bert_fp32_tf32) prices its host alone at 32.4, and the BF16 program runs more host work than the FP32 one, so this trace's host priced slow (the fitted share: a device-bound FP32 step leaves its host speed open). Before the host pace held the fix (docs/replay.md), its first step absorbed the window's opening lead (24.6 ms against 46.0 and 45.9 for the two after it) and the mean, 38.8, scored -18 %",
    ("ab_traced", "resnet18_fp32", "resnet18_bf16_cl"): "3.822 predicted vs 4.787 ms measured (-20.2%); the rounds in one process measured 3.62 to 5.39 ms; the BF16 + channels_last step is the host's: replayed at the FP32 trace's host pace, 9.77 ms, against 8.66 measured; the profiler model prices this program's BF16 host 15 % slow on its own trace too (collected3/resnet18_bf16_cl: 13.33 estimated, 11.56 measured, docs/replay.md's held-out table). Before the host pace held the fix, its first step absorbed the window's opening lead (6.94 ms against 9.63 and 9.99) and the mean, 8.85, scored -1 %",
    ("ab_traced", "bert_eager_attn_s512", "bert_sdpa_s512"): "6.570 predicted vs 16.291 ms measured (-60%); the rounds in one process measured 14.79 to 16.31 ms; held out (HF BERT, a model the rule was not developed on): the trace was taken while the host ran slow — its wait steps drifted from 43.9 to 49.7-57.3 ms just before the capture (43.9 again after it and in the rounds), every host call took about 1.6x what the same model's SDPA trace shows (cudaLaunchKernel 9.0 vs 5.7 us), and the profiled step is 106 ms: the pricing, solved to that 49.7 ms, leaves a host of about 44 ms where the fixed step ran 27.7",
    ("ab_traced", "bert_eager_fp32_s512", "bert_sdpa_fp32_s512"): "1.684 predicted vs 3.191 ms measured (-47%); the rounds in one process measured 3.134 to 3.215 ms; held out (recorded after the causal share): the saving is the eager score kernels' 12.5 ms a step less the fused call's, priced at 11.0 ms (the FP32 median, 0.34 of peak, on 8 x 12 heads x 512 tokens, not causal); the measurement puts the fused call at ~9.3 ms (0.40), as the same program at batch 16 runs it (bert_fp32_s512's trace: 0.37 forward, 0.44 backward). A 15 % error in the fused time is a 50 % one in a saving of an eighth of it",
    ("ab_traced", "llama_single", "llama_fused"): "7.422 predicted vs 12.720 ms measured (-42%); the rounds in one process measured 6.482 to 18.282 ms; held out (HF Llama, a model no earlier twin ran): the captured steps ran on a slow, noisy host (67.9-99.1 ms a step traced); outside the optimizer's update loop they took 67.3 ms a step against 53.5 in the capture of the fixed program itself (llama_ctl), so the pricing, solved to the measured 45.35 ms, leaves a fixed step of 37.9 where that program replays at 31.5 and measured 30.2; taking the whole optimizer step off saves 8.49 ms in the replay (tests/rules/test_unfused_optimizer.py), and the fused variant's launches, kernel time and loop match llama_ctl's trace",
    ("ab_traced", "llama_single_r8", "llama_fused"): "7.330 predicted vs 10.342 ms measured (-29%); the rounds in one process measured 2.5 to 13.9 ms; held out (unseen_more, 2026-12-05): the problem's rounds ran 48.97 ms a step where the traced run's wait steps ran 41.49 (-15 %), and the fix brought the step to 41.87: anchored to the rounds' step (--unprofiled-ms) it predicts 8.63 (-17 %)",
    ("ab_traced", "resnet50_empty_cache", "resnet50_ref"): "15.721 predicted vs 20.795 ms measured (-24%); the rounds in one process measured 17.2 to 22.0 ms; held out (unseen2, 2026-12-05): the trace's cudaMalloc / cudaFree take 14.2 ms a step as recorded (64 and 60 calls); the replay removes them whole, the allocator's miss path in the allocating ops and the launches after the calls (_churn_host), and the fixed step replays 10 % above the rounds' (39.4 against 35.6 ms): the problem's host runs every op about 2x slower than the fixed program's own trace, which the trace alone cannot tell from a slow process",
    ("ab_traced", "bert_eager_attn_s256", "bert_sdpa_s256"): "4.024 predicted vs 6.765 ms measured (-41%); the rounds in one process measured 2.9 to 10.9 ms; held out (unseen2, 2026-12-05): HF BERT's eager attention again (as at 512 tokens): the replay keeps the step host-bound after the fix at 27.5 ms where the fixed step ran 26.6; anchored to the rounds' step 3.99 (-41 %)",
    ("ab_traced", "resnet50_empty_cache_r2", "resnet50_ref"): "12.718 predicted vs 19.871 ms measured (-36%); the rounds in one process measured 8.6 to 24.9 ms; resnet50_empty_cache recorded again (repeat2): the fixed step replays within 3 % of the rounds' (27.85 against 28.65 ms) and the problem's step at its wait steps' 40.6 ms where the rounds ran it at 46.3: the problem's pace in the rounds, not the fix",
    ("ab_traced", "bert_empty_cache_h100", "bert_ref_h100"): "3.892 predicted vs 7.394 ms measured (-47%); the rounds in one process measured 6.5 to 10.1 ms; held out on an H100 (churn_heldout, 2026-12-05, recorded after the driver calls were replayed whole; scored as it came): the fix saves 2.8x the 2.67 ms a step of recorded cudaMalloc / cudaFree; the fixed step replays within 8 % (26.1 against 24.1 ms) and the problem at its wait steps' 30.0 ms where the rounds ran it at 32.4 (and the same run after its capture at 20.1): the problem's pace, which its trace does not fix",
    ("ab_traced", "mobilenet_empty_cache_h100", "mobilenet_ref_h100"): "6.929 predicted vs 10.276 ms measured (-33%); the rounds in one process measured 5.9 to 12.9 ms; held out on an H100 (churn_heldout, 2026-12-05, recorded after the driver calls were replayed whole; scored as it came): 1.7x the 5.9 ms a step of recorded driver calls; the problem's step replays at the rounds' (33.8 against 33.5 ms) and the fixed step 9 % slow (26.9 against 24.6): the fixed loop's host ran faster than the churning trace's non-driver host at its solved share",
    ("ab_traced", "alloc_churn_h100", "alloc_churn_ref_h100"): "9.641 predicted vs 13.725 ms measured (-30%); the rounds in one process measured 10.1 to 16.3 ms; held out on an H100 (churn_heldout, 2026-12-05, recorded after the driver calls were replayed whole; scored as it came): 1.5x the 9.1 ms a step of recorded driver calls; the fixed step replays host-bound at 18.1 ms where it ran 14.7 (its GPU work the same with or without the churn: 10.9 ms a step in both H200 traces): the fixed loop's host ran faster than the churning trace's non-driver host at its solved share. Its H200 twin in two processes saved 0.8x its driver calls",
    # Held out on an H100 (2026-12-05, scored as it came): the H200 misses' causes again, and two new ones
    ("ab_traced", "resnet18_fp32_h100", "resnet18_bf16_cl_h100"): "0.000 predicted vs 2.264 ms measured (-100%); the rounds in one process measured 1.4 to 2.8 ms; held out on an H100 (2026-12-05, scored as it came): the FP32 step sits at the device's own chain (14.25 ms of kernels, 14.77 unprofiled), which bounds its unprofiled host only from above; at the fitted share the BF16 + channels_last step replays host-bound at 14.95 ms where it ran 12.52 (the same twin on the H200: 4.83 predicted, 4.79 measured)",
    ("ab_traced", "bert_eager_attn_s512_h100", "bert_sdpa_s512_h100"): "15.222 predicted vs 9.942 ms measured (+53%); the rounds in one process measured 6.6 to 18.2 ms; held out on an H100 (2026-12-05, scored as it came): over where the H200's two recordings of this twin were under (-62 %, -22 %): the host's speed between the trace and the rounds",
    ("ab_traced", "mobilenet_graph_h100", "mobilenet_cuda_graph_h100"): "17.363 predicted vs 22.078 ms measured (-21%); the rounds in one process measured 19.3 to 24.0 ms; held out on an H100 (2026-12-05, scored as it came): the problem's rounds ran 25.3 ms a step against 20.9 in the traced run's wait steps (the host's drift; anchored to the rounds' step: -9 %), the step after the fix within 2 %",
    ("ab_traced", "gpt2_eager_attn_h100", "gpt2_sdpa_h100"): "5.678 predicted vs 7.141 ms measured (-20%); the rounds in one process measured 6.1 to 8.4 ms; held out on an H100 (2026-12-05, scored as it came): the step after the fix within 4 %",
    ("ab_traced", "llama_eager_attn_h100", "llama_sdpa_h100"): "6.939 predicted vs 21.971 ms measured (-68%); the rounds in one process measured 18.1 to 26.9 ms; held out on an H100 (2026-12-05, scored as it came): the fixed program's own trace (llama_eager_attn_h100_fixed) runs 23.0 ms of kernels a step and the step ran 25.6 in the rounds; the problem's unprofiled step, 42.8 ms, sits 3 % above the device's own chain (41.6), the solve takes that excess as host time, and the replay keeps the fixed step host-bound at 36.4",
    ("ab_traced", "bert_fp32_h100", "bert_bf16_h100"): "36.584 predicted vs 28.688 ms measured (+28%); the rounds in one process measured 25.9 to 30.0 ms; held out on an H100 (2026-12-05, scored as it came): the FP32 step is at the device's own chain (73.6 ms), which bounds its host only from above; the BF16 step ran host-bound at 44.5 ms in the rounds (31.3 in the H200's twin), replayed at the FP32 trace's host pace, 37.3",
    ("ab_traced", "gpt2_sdpa_item_h100", "gpt2_sdpa_noitem_h100"): "0.829 predicted vs 3.280 ms measured (-75%); the rounds in one process measured 1.7 to 4.6 ms; held out on an H100 (2026-12-05, scored as it came): the H200's twin of it is unresolved by its rounds (-0.7 to 5.0 ms) and its two-process twin a miss (-87 %); the replay's bound at any host speed is below 1 ms",
    ("ab_traced", "cpu_gpt2w256_single_fused_x16", "cpu_gpt2w256_fused_x16"): "4.354 predicted vs 3.212 ms measured (+36%); the rounds in one process measured 2.45 to 3.59 ms; held out on a 16-core CPU (torch 2.11, 16 OpenMP threads, 2026-12-06, scored as it came): the step after the fix within 4 %, the loop's unprofiled time over-priced; the fused CPU kernel's per-tensor fork and join over GPT-2's ~50 tensors is not modelled",
    # held out: the seventh set of user-written programs in one process each (user7_heldout, H200, 2026-12-06,
    # session 61), their fixed programs against the step in one CUDA graph (user7_graph), and the allocator twins
    # again with rounds in steady state (churn_steady); scored as they came
    ("ab_traced", "qwen2_eager_ab", "qwen2_sdpa_ab"): "3.466 predicted vs 5.034 ms measured (-31%); the rounds in one process measured 3.8 to 9.7 ms; held out (HF Qwen2, eager -> SDPA): the step after the fix replays within 4 % of the rounds' (24.13 against 23.22 ms); the problem's rounds ran 26.0 to 34.7 ms where the traced run stepped 26-27",
    ("ab_traced", "electra_fp32_ab", "electra_bf16_ab"): "18.994 predicted vs 13.457 ms measured (+41%); the rounds in one process measured 9.9 to 19.2 ms; held out (HF ELECTRA FP32 -> BF16): the FP32 step is the device's (59.0 ms in every round and through the traced run), the BF16 step the host's, and its pace wandered: 39.7 to 49.1 ms in these rounds, 24.0 and 25.2 timed alone in fresh processes the same hour (user_programs7_h200), 31-45 in the graph twin's traced run; replayed at 40.26",
    ("ab_traced", "mobilenetv2_fp32_fixed_graph_ab", "mobilenetv2_bf16_cl_cuda_graph_ab"): "11.200 predicted vs 5.505 ms measured (+103%); the rounds in one process measured 5.4 to 9.0 ms; held out (TV101 on MobileNetV2 in BF16): the CUDA-graph step replays within 10 % (11.18 against 10.16 ms); the problem's rounds ran 15.5 to 19.1 ms where the traced run's wait steps ran 22.4 (drift +41 %): anchored to the rounds' step, -17 %",
    ("ab_traced", "electra_fp32_fixed_graph_ab", "electra_bf16_cuda_graph_ab"): "19.535 predicted vs 15.723 ms measured (+24%); the rounds in one process measured 11.8 to 19.3 ms; held out (TV101 on ELECTRA in BF16): the graphed step ran 19.88 ms where the replay's device chain after the fix is 14.09: the capture needs AdamW(capturable=True) and autocast without its weight cache, device work the eager program's trace does not hold",
    ("ab_traced", "bart_empty_cache_fixed_graph_ab", "bart_ref_cuda_graph_ab"): "20.741 predicted vs 27.640 ms measured (-25%); the rounds in one process measured 15.7 to 32.3 ms; held out (TV101 on HF BART in BF16): the problem's rounds ran 35.8 to 52.4 ms where the traced run's wait steps ran 36.1 (drift -25 %): anchored to the rounds' step +15 %; the graphed step ran 20.13 ms against 15.37 replayed (AdamW(capturable=True), autocast without its weight cache)",
    ("ab_traced", "resnet50_empty_cache_steady", "resnet50_ref_steady"): "10.586 predicted vs 18.313 ms measured (-42%); the rounds in one process measured 12.6 to 27.5 ms; the allocator twin again with rounds in steady state (40 steps a run, the first 11 left out): the churning loop stepped 39.4 ms in the rounds where the traced run's wait steps ran 50.8 and its steps after the capture 28 to 56: its pace moves by 2x within one process, which its trace does not fix",
    ("ab_traced", "bert_empty_cache_steady", "bert_ref_steady"): "3.764 predicted vs 9.161 ms measured (-59%); the rounds in one process measured 7.3 to 10.3 ms; steady rounds: the churning loop stepped 20-29 ms through the traced run (wait steps 21.8, the fixed loop 17.8 to 25.6 in the rounds) and 25.2 to 34.3 in the rounds: in the process's first run it churned at about the fixed loop's pace, in the later fresh runs 9 ms slower",
    ("ab_traced", "alloc_churn_empty_cache_steady", "alloc_churn_ref_steady"): "7.644 predicted vs 11.682 ms measured (-35%); the rounds in one process measured 9.6 to 15.0 ms; steady rounds: the traced run stepped 18-21 ms throughout (wait steps 19.9), the rounds' churning loop 21.7 to 27.8; the step after the fix replays within 2 % (12.28 against 12.45): the process's later runs churned slower than its first",
    # held out: the eighth set of user-written programs in one process each (user8_heldout, H100, 2026-12-07, session
    # 63), scored as they came
    ("ab_traced", "wide_resnet_fp32_ab", "wide_resnet_bf16_cl_ab"): "9.376 predicted vs 1.757 ms measured (+434%); the rounds in one process measured 0.40 to 3.28 ms; held out (torchvision Wide ResNet-50-2, FP32 -> BF16 + channels_last): the FP32 step is the device's (29.54-29.57 ms in every round), the BF16 step the host's: 26.3-29.1 ms in these rounds, 16.09 ms (the collector's wait steps) in its own process the same minutes, whose steps after the capture then wandered 18.1 to 41.6 ms; replayed at 20.43",
    # the eighth set's SGD program again on an H200 (user8_sgd, session 64): to foreach (unresolved again in eight
    # rounds) and to fused, what the finding advises
    ("ab_traced", "resnet50_sgd_fused_ab", "resnet50_sgd_fused_ref_ab"): "3.340 predicted vs 5.954 ms measured (-44%); the rounds in one process measured 1.4 to 11.4 ms; the step after the fix replays within 8 % of the rounds' (19.84 against 21.38 ms; the fused program traced alone stepped 23.3); the problem's rounds ran 20.2 to 35.6 ms where the traced run's wait steps ran 23.0 (drift -16 %) and its steps after the capture 26-40: anchored to the rounds' step, -33 %",
    # the two larger fixes the report prices on the eighth set's GPT-NeoX with SDPA (pythia_fixes, H100, session 64)
    ("ab_traced", "pythia_sdpa_compile_ab", "pythia_sdpa_compiled_ab"): "12.554 predicted vs 23.521 ms measured (-47%); the rounds in one process measured 22.7 to 24.4 ms; held out (HF GPT-NeoX under torch.compile): a host-bound step (GPU busy 24 %), and Inductor also drops the eager dispatch of the ops it does not fuse, which fusing the chains does not price; with launch-bound's transform too (the step at the device's pace) the replay leaves 14.76 ms where the compiled step ran 18.59",
    # held out: two more models under torch.compile (compile_model, H100, session 65), scored as they came
    ("ab_traced", "electra_fp32_compile_ab", "electra_bf16_compiled_ab"): "6.103 predicted vs 4.540 ms measured (+34%); the rounds in one process measured 2.6 to 6.5 ms; held out (HF ELECTRA-base in BF16 under torch.compile): a host-bound step (GPU busy 37 %) whose compiled graphs keep about 1130 kernels a step, each launched from Inductor's wrapper at about 1.5 eager ops of host time (compile_blocks_h100.ndjson), which the chain-only transform does not charge (the whole-model transform on branch wip/compiled-model: 4.25 ms, -6 %)",
    ("ab_traced", "qwen2_eager_compile_ab", "qwen2_sdpa_compiled_ab"): "6.643 predicted vs 14.467 ms measured (-54%); the rounds in one process measured 12.2 to 16.7 ms; held out (HF Qwen2 with SDPA under torch.compile): a host-bound step (GPU busy 65 %) where Inductor drops the dispatch and Python of every op it compiles (RMSNorm, rotary, views), not only the chains it fuses; the compiled step ran 11.95 ms; the whole-model transform on branch wip/compiled-model replays it at 15.6 (saving 8.95, -38 %)",
    ("ab_traced", "llama_tiny_compile_ab", "llama_tiny_compiled_ab"): "3.296 predicted vs 4.885 ms measured (-33%); the rounds in one process measured 4.4 to 5.3 ms; held out (HF Llama, 4 layers, batch 1 x 64 tokens, under torch.compile; compile_host, session 65): a host-bound step on both sides; the compiled program's own trace (llama_tiny_compile_ab_fixed) runs 317 kernels a step where the eager step runs 698 and the chains' fusion leaves 587: Inductor fuses well beyond the runs of consecutive pointwise kernels the rule finds, and drops the dispatch and Python of the RMSNorm, rotary and view ops it folds, which the chain fusion does not price",
    ("ab_traced", "effnet_graph", "effnet_cuda_graph"): "1.649 predicted vs 0.329 ms measured (+402%), at info (2.8 % of the step); a device-bound step (33.5 ms of kernels in a CUDA graph, 33.9 eager) whose host time the measurement does not fix",
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
    assert len(SAME_PROCESS) == 118 and set(MISSES_SAME_PROCESS) <= {(t["set"], t["problem"], t["fixed"]) for t in SAME_PROCESS}


def _bar(anchored: bool) -> list[bool]:
    """Each twin scored once: measured in the process that took its trace (ab_traced, CUPTI torn down before the
    rounds) where recorded, else in its two processes; a twin whose rounds there cannot resolve its saving is not
    scored in either (the same-process rounds show the two processes' difference was not the fix's). `anchored`:
    the ab_traced predictions solved to the problem's step in the rounds (`--unprofiled-ms`), not to the traced
    run's wait steps."""
    gone = P.superseded(SAME_PROCESS + UNRESOLVED)
    once = [t for t in COVERED if (t["set"], t["problem"], t["fixed"]) not in gone] + SAME_PROCESS
    scored = [(P.predicted(SAMPLES / t["set"] / t["problem"], t["rule"], t.get("variant"), t["problem_step_ms"])[0]
               if anchored and t["set"] == "ab_traced" else predicted(t["set"], t["problem"], t["rule"], t.get("variant")),
               t["measured_ms"]) for t in once]
    return [abs(p / m - 1) <= P.BAND for p, m in scored if p is not None]


def test_the_bar_is_the_docs_headline():
    # outside the xfail tests below (a strict xfail passes on any AssertionError, a wrong count included): the
    # scoreboard counted here is the one docs/predictions.md states, twin for twin
    hits = _bar(anchored=False)
    m = re.search(r"Within ±20 %: \*\*(\d+) of (\d+)\*\*", (SAMPLES.parent / "docs/predictions.md").read_text())
    assert m and (sum(hits), len(hits)) == (int(m[1]), int(m[2])) and len(hits) == 148


@pytest.mark.xfail(strict=True, reason="105 of 148 (71 %) since the tenth set (session 69: a UNet in FP32, a DLRM-style recommender's foreach AdamW -> fused and a GRUCell recurrence -> one CUDA graph, all three hits), 102 of 145 since the ninth set (session 68: BERT-base served in FP32 -> BF16 and HF Whisper eager -> SDPA hits, ResNet-50 served in FP32 a miss), 100 of 142 since five more compiled models (session 65: HF ELECTRA and Qwen2 "
                   "misses; HF GPT-2 and BERT at batch 1-2 hits, Llama a miss), 98 of 137 since GPT-NeoX's two larger fixes (session 64: its CUDA graph a hit, "
                   "its torch.compile a miss) and 95 of 131 since the seventh set's one-process twins (session 61: "
                   "three of ten resolved savings within ±20 %, held out and scored as they came) and the fixed loop's "
                   "own pace (unfused-optimizer's fix lets the host lead: GPT-2 on the H100 -32 -> -10 %), after 91 of "
                   "120 with the H100 twins of 2026-12-05/06 (14 of their 24); docs/predictions.md")
def test_the_issue_bar():
    hits = _bar(anchored=False)
    assert sum(hits) >= 0.8 * len(hits)


@pytest.mark.xfail(strict=True, reason="103 of 145 (71 %) since the ninth set (session 68), 101 of 142 since session 65's compiled models (100 of 137 in session 64, 98 of 131 since the seventh set, 92 of 120 before): anchored to the rounds' "
                   "problem step, the misses that remain are host-bound fixed steps whose pace the process sets, "
                   "device-bound problem steps whose host speed the measurement does not fix, and the allocator churn "
                   "(docs/predictions.md)")
def test_the_issue_bar_anchored_to_the_rounds():
    # the saving is measured on the rounds' host; the traced run's wait steps ran up to 24 % apart from it on
    # host-bound steps (tools/predictions.py, anchored_table): solved to the rounds' own problem step, the bar holds
    hits = _bar(anchored=True)
    assert sum(hits) >= 0.8 * len(hits)


def test_unresolved_twins_are_the_ones_their_rounds_cannot_resolve():
    # listed, not scored: the interquartile range of the rounds' savings exceeds the median saving (numpy's
    # percentiles, an independent computation of the quartiles: conftest.iqr); every other same-process twin's rounds
    # resolve it
    assert {t["problem"] for t in UNRESOLVED} == {"gpt2_sdpa_item", "train_syncs_item_b16", "epilogue_bert_eager",
                                                   "gpt2_vocab_padded", "bert_eager_attn_s128", "llama_eager_attn",
                                                   "llama_ctl", "llama_item", "gpt2_vocab_h100",
                                                   "train_syncs_item_b16_h100", "epilogue_bert_eager_h100",
                                                   "effnet_graph_h100", "llama_empty_cache_h100",
                                                   "cpu_gpt2_single_foreach", "bart_empty_cache_ab",
                                                   "resnet50_sgd_loop_ab", "resnet50_sgd_foreach_ab", "lora_llama_ab"}
    for t in UNRESOLVED:
        assert iqr(t["rounds"]) > t["measured_ms"] > 0
    for t in SAME_PROCESS:
        assert iqr(t["rounds"]) <= t["measured_ms"], t["problem"]


def test_held_out_twins():
    """The twins recorded after the model's last fit, on models no other set has (tools/ab_labels.py HELD_OUT),
    each within the band of its in-process measurement: ViT (GEMMs; BERT, recorded with it, a miss since the host's
    own pace holds the fixed step: MISSES_SAME_PROCESS), ConvNeXt (GEMMs and convolutions
    replayed together, as autocast changes both), MobileNetV3's single-tensor AdamW, DDP accumulation on GPT-2
    without no_sync() (the reducer's bucket copies of three micro-batches in four); and, recorded after unaligned-gemm's
    model was set, BERT's 30522-token head at sequence 512 and GPT-2's 50257 in TF32; and, recorded after fp32-gemm's
    autocast variant was set, FP32 -> BF16 autocast on GPT-2 at batch 32 and BERT at sequence 512 (ViT-B/16 at batch
    16, the third, is a miss: MISSES_SAME_PROCESS); and FP32 -> TF32 on GPT-2 and ConvNeXt-T, recorded after the TF32
    variant priced misaligned GEMMs on the fallback kernel (BERT, the third, a miss); and FP32 -> BF16 on GPT-2 at 1024
    tokens, recorded after attention's FLOPs were read in the flash / memory-efficient ops' own layout (its FP32 eager
    attention -> SDPA twin, recorded with it, is a miss); and, recorded after the fused-attention model counted a causal
    call's blocks, FP32 eager attention -> SDPA on GPT-2 at 512 tokens and FP32 -> BF16 on GPT-2 at 256 tokens x 32
    (BERT's non-causal FP32 attention, the third, a miss); and HF Llama FP32 -> BF16 (grouped-query attention on the
    math backend in FP32, flash in BF16: fp32-gemm's and materialized-attention's transforms together), a model no
    earlier twin ran (its single-tensor -> fused AdamW twin is a miss)."""
    held = [t for t in SAME_PROCESS if t["problem"] in {"vit_fp32", "convnext_fp32", "mobilenet_single",
                                                        "ddp_accum4_gpt2", "bert_vocab_s512", "gpt2_tf32_vocab",
                                                        "gpt2_fp32_b32", "bert_fp32_s512", "gpt2_fp32_tf32",
                                                        "convnext_fp32_tf32", "gpt2_fp32_s1024",
                                                        "gpt2_eager_fp32_s512", "gpt2_fp32_s256", "llama_fp32"}]
    assert len(held) == 14
    for t in held:
        p = predicted(t["set"], t["problem"], t["rule"], t.get("variant"))
        assert abs(p / t["measured_ms"] - 1) <= P.BAND, (t["problem"], p, t["measured_ms"])


def test_every_twin_with_a_rule_is_scored_and_the_misses_are_real():
    # the misses named above are twins of the labels (no stale entry), and the covered set is what the labels say
    keys = {(t["set"], t["problem"], t["fixed"]) for t in COVERED}
    assert set(MISSES) <= keys
    assert len(COVERED) == 48


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
    # held out (recorded after the model's last fit): HF BERT's .item() per step (-0.19 ms, rounds -3.6 to 1.5) and
    # EfficientNet-B0 in bf16 + channels_last (-1.90 ms: depthwise convolutions, a host-bound step)
    ("ab_traced/bert_small_item", "host-sync"),
    ("ab_traced/effnet_fp32", "fp32-conv"),
    # EfficientNet-B0 torch.compile'd: 2.77 ms slower (its chains end in training batch norms, two passes fused)
    ("ab_traced/effnet_compile", "elementwise-chain"),
    # held out: FP32 -> BF16 autocast on batch-1 steps, host-bound both ways (-3.2, -0.4, -4.9 ms: the casts)
    ("ab_traced/bert_fp32_tiny", "fp32-gemm"),
    ("ab_traced/gpt2_fp32_tiny", "fp32-gemm"),
    ("ab_traced/vit_fp32_tiny", "fp32-gemm"),
    ("ab_traced/vit_fp32_tiny", "fp32-conv"),
    # held out: Swin-T FP32 -> BF16 autocast measured 7.7 ms slower (a host-bound step); HF Llama's fused AdamW
    ("ab_traced/swin_fp32", "fp32-gemm"),
    ("ab_traced/swin_fp32", "fp32-conv"),
    ("ab_traced/llama_ctl", "unfused-optimizer"),
])
def test_negative_control_fix_is_at_most_info(rel, rule):
    assert [f["severity"] for f in _findings(rel) if f["rule"] == rule and f["severity"] != "info"] == []


def _prepared(rel: str) -> RuleContext:
    """The rule context of the run folder `rel` (under sample_traces/) over its steps, as the report prepares it."""
    trace = traceview.load(str(next((SAMPLES / rel).glob("*.pt.trace.json*"))))
    return RuleContext.prepare(trace, select_steps(trace, None))[0]


def _for_rule(ctx: RuleContext, name: str) -> tuple:
    """(the rule `name`'s module, `ctx` as that rule sees it with its default options)."""
    from traceview.rules import BY_NAME

    from traceview.options import Options

    mod = BY_NAME[name]
    return mod, ctx.for_rule(mod, Options().options_for(mod))


@functools.cache
def _declared(rel: str, rule: str, variant: str | None) -> bool:
    """Whether `rule` prices the fix made as `variant` on the trace `rel`: no variant, a rule with one fix, or one of
    the variants it declares there (`fix_variants`). A negative control of a variant the rule never advises says
    nothing about its finding (cpu-op-overhead advises fused=True and declares no foreach variant: on CPU foreach
    runs the same per-tensor kernels)."""
    from traceview.rules import BY_NAME

    if variant is None or not hasattr(BY_NAME[rule], "fix_variants"):
        return True
    mod, rc = _for_rule(_prepared(rel), rule)
    return variant in mod.fix_variants(rc)


def _negatives() -> list:
    """Every twin measured to save nothing (median <= 0) with a rule that prices its fix, each a pytest param: one whose
    rounds straddle zero wider than its median (interquartile range > |median|, the rule `P.unresolved` applies to
    savings) does not show the fix saves nothing, so a finding above info there is an xfail(strict) with its numbers."""
    out = []
    for t in P.twins():
        if t["measured_ms"] > 0 or not t["rule"]:
            continue
        rel = f"{t['set']}/{t['problem']}"
        for rule in t["rule"].split("+"):
            loud = UNRESOLVED_LOUD.get(t["problem"])
            marks = [pytest.mark.xfail(strict=True, reason=loud)] if loud else []
            out.append(pytest.param(rel, rule, t, marks=marks, id=f"{rel}:{rule}"))
    return out


#: negative controls whose rounds do not resolve the sign of the saving, and the rule raises above info there
UNRESOLVED_LOUD = {
    "bert_eager_attn_s256_h100": "materialized-attention warns (4.22 ms) where the median round measured -0.81 ms, "
                                 "rounds +2.2, +11.8, -3.9, -4.5 (IQR 8.6 ms): a host-bound step whose pace moved "
                                 "between rounds; at 512 tokens the same program saved 9.9 ms",
    "mobilenetv2_fp32_ab": "fp32-conv errs (6.94 ms) where the median round measured -1.05 ms, rounds -3.1 to +1.8 "
                           "(IQR 3.3 ms); the same two programs timed alone in fresh processes the same hour saved "
                           "12.0 and 14.2 ms (user_programs7_h200)",
}


@pytest.mark.parametrize(("rel", "rule", "t"), _negatives())
def test_every_negative_control_is_quiet(rel, rule, t):
    """Every twin whose fix measured no saving, the labels' own list (not a chosen one): its rule at most info. Where
    the rounds straddle zero wider than their median the measurement does not resolve the sign: those raised above
    info are listed (UNRESOLVED_LOUD) and must stay unresolved, so a re-measured twin that resolves fails here."""
    if not _declared(rel, rule, t.get("variant")):
        pytest.skip(f"{rule} does not price the {t['variant']} variant (test_negative_controls_cover_the_labels)")
    rounds = t.get("rounds") or []
    if t["problem"] in UNRESOLVED_LOUD:
        assert len(rounds) >= 4 and iqr(rounds) > abs(t["measured_ms"])
    assert [f["severity"] for f in _findings(rel) if f["rule"] == rule and f["severity"] != "info"] == []


def test_negative_controls_cover_the_labels():
    # the labels' negative twins with a rule: 20 twins (the tenth set's synchronize-to-time loop the last), 22 (twin,
    # rule) pairs (two FP32 -> BF16 twins name both precision rules); cpu_gpt2_single's foreach twin is the one whose
    # variant its rule does not declare
    negs = [t for t in P.twins() if t["measured_ms"] <= 0 and t["rule"]]
    assert len(negs) == 20
    assert len(_negatives()) == 22
    assert [t["problem"] for t in negs if not all(_declared(f"{t['set']}/{t['problem']}", r, t.get("variant"))
                                                  for r in t["rule"].split("+"))] == ["cpu_gpt2_single"]


@pytest.mark.parametrize("rel", [
    "collected2/fp32_gemm_tf32", "collected2/compile_no_break", "collected2/gemm_bf16_n4096",
    # its loss (log_softmax → nll_loss → argmax → …) and grad-norm (norm → clamp → _foreach_mul_ …) runs split at
    # their reductions and multi-tensor kernels: no chain left worth a finding (elementwise-chain warned before)
    "collected2/train_gradnorm_deferred_b64",
    # eight DataLoader workers: the input sets the step; its batch-norm chains (add_ → cudnn_batch_norm,
    # silu/relu backward → its backward) read their inputs twice fused: no saving (elementwise-chain warned before)
    "collected2/cnn_input_nw8",
])
def test_expected_none_raises_nothing_above_info(rel):
    assert [(f["rule"], f["severity"]) for f in _findings(rel) if f["severity"] != "info"] == []


def test_no_saving_exceeds_its_step():
    for rel in ("collected2/train_syncs_item", "collected3/gpt2_sdpa_single", "collected2/compile_recompile_every_step"):
        rep = analyze([SAMPLES / rel]).traces[0]
        step = rep["projection"]["replayed_unprofiled_step_us"]
        assert all(f["savings_us"] <= step for f in rep["findings"])
        assert sum(f["savings_us"] for f in rep["findings"] if f["rule"] == "recompile") <= step


def _run_at_floor(rel: str) -> tuple:
    """(trace, its rule context, the manifest's step_time, the replay with SHARE_MAX of the host taken off: the
    device's own chain, ns) of the collected run `rel`."""
    step_time = json.loads((SAMPLES / rel / "manifest.json").read_text())["step_time"]
    ctx = _prepared(rel)
    t = ctx.trace
    floor = replay(t, ctx.steps, [share_transform(t, SHARE_MAX)]).mean()
    return t, ctx, step_time, floor


def test_a_device_bound_measurement_keeps_the_fitted_host_share():
    # resnet18_fp32's measured unprofiled step (13.467 ms, manifest.json) is below what the replay reaches even with
    # the host all but stripped (the device chain: GPU busy 13.05 ms a step): the measurement does not fix the host
    # share, and pricing keeps the fitted one (at this trace's launch floor: overhead.host_share) instead of the
    # largest (which let the fp32-conv fix save 7.66 ms)
    t, ctx, step_time, floor = _run_at_floor("collected3/resnet18_fp32")
    measured_ns = step_time["unprofiled_ms_median"] * 1e6
    assert measured_ns < floor
    priced = fixes.pricing_transform(ctx)
    assert priced.host_share == host_share(t)
    assert replay(t, ctx.steps, [priced]).mean() <= floor * 1.01


def test_a_host_bound_measurement_beyond_the_dispatch_share_deflates_the_long_intervals():
    # gpt2c_recompile recompiles in every step: 9.8 s of its two steps' 10.4 s of host time sit in intervals over
    # replay.HOST_SHARE_MAX_NS, which the dispatch share scales only up to it. Its measured unprofiled step
    # (manifest.json: 2853.9 ms, the median of the collector's wait steps) is below what the replay reaches with
    # SHARE_MAX of every shorter interval (about 3330 ms), and the step is host-bound (GPU busy < 100 ms a step):
    # the profiler slowed the compilation too. Pricing keeps the fitted dispatch share and solves the long
    # intervals' share to the measurement, and reproduces it (before: the replay stayed at ~3360 ms, and the fix
    # saved more than the measured step)
    t, ctx, step_time, floor = _run_at_floor("collected5/gpt2c_recompile")
    measured_ns = step_time["unprofiled_ms_median"] * 1e6
    assert measured_ns < 0.9 * floor
    priced = fixes.pricing_transform(ctx)
    assert priced.host_share == host_share(t) and 0 < priced.long_share < priced.host_share
    assert replay(t, ctx.steps, [priced]).mean() == pytest.approx(measured_ns, rel=0.01)
    # the fix's saving is below the measured step, and the step it leaves is the fixed twin's (labels.json: the
    # mark_dynamic run measured 63.4 ms unprofiled)
    labels = json.loads((SAMPLES / "collected5" / "labels.json").read_text())["runs"]
    saved = predicted("collected5", "gpt2c_recompile", "recompile", None) * 1e6
    assert saved < measured_ns
    assert (measured_ns - saved) / 1e6 == pytest.approx(labels["gpt2c_mark_dynamic"]["unprofiled_step_ms"], rel=0.2)


def test_a_trace_that_is_not_the_timed_steps_never_deflates_its_long_intervals():
    # collected3/cnn_input_nw2's capture stalled for input (steps of 61, 273 and 68 ms profiled, manifest.json) where
    # the timed unprofiled steps (18-31 ms) still ran from the prefetch buffer: its long host intervals are waits for
    # the worker processes, which no profiler cost explains. Its traced step is 2x the collector's profiled median,
    # beyond TRACE_TOL, so the measurement sets no long-interval share (the dispatch share alone, as before)
    _, ctx, step_time, _ = _run_at_floor("collected3/cnn_input_nw2")
    prof_ns = step_time["profiled_ms_median"] * 1e6
    assert float((ctx.steps["end"] - ctx.steps["ts"]).mean()) > (1 + TRACE_TOL) * prof_ns
    assert fixes.pricing_transform(ctx).long_share == 0.0


@pytest.mark.parametrize("problem", ["mobilenet_graph", "vit_fp32", "elementwise_128mib_eager"])
def test_the_step_after_the_fix_is_the_reports_replayed_step_less_the_saving(problem):
    # the scoreboard's second lens (tools/predictions.py `fixed_step_table`), against the report a user reads:
    # its projection's replayed unprofiled step (an independent path: analyze, not the tool's own replay) less the
    # tool's saving, and against the fixed twin's rounds in labels.json; the errors documented in
    # docs/predictions.md (MobileNet's graph right on the step though its saving misses; ViT-B/16's BF16 step at
    # batch 64, +25 %: held at the FP32 trace's host pace, 43.0 ms, where the same BF16 host work measured 34.4 here
    # and 45.7 at batch 32 (+3 % before the host pace, its device chain having run through the window's opening
    # lead); the compiled elementwise loop's step, +6 %, the host's pace too (-12 % before))
    (t,) = [t for t in P.twins() if t["set"] == "ab_traced" and t["problem"] == problem]
    p, base = P.predicted(SAMPLES / "ab_traced" / problem, t["rule"], t.get("variant"))
    proj = analyze([SAMPLES / "ab_traced" / problem]).traces[0]["projection"]
    assert base * 1000 == pytest.approx(proj["replayed_unprofiled_step_us"], rel=1e-3)
    err = (base - p) / t["fixed_step_ms"] - 1
    bounds = {"mobilenet_graph": (-0.05, 0.05), "vit_fp32": (0.2, 0.3), "elementwise_128mib_eager": (0.0, 0.1)}
    lo, hi = bounds[problem]
    assert lo < err < hi, err


#: the precision twins (fp32-gemm's autocast variant, fp32-conv's BF16 + channels_last), their rounds' sign
PRECISION = [t for t in P.twins() if t["set"] == "ab_traced" and (
    ("fp32-gemm" in t["rule"] and t["variant"] == "autocast") or "fp32-conv" in t["rule"])]


#: held out on an H100: the FP32 step at the device's own chain leaves the host's unprofiled speed open; at the fitted
#: share the fix replays 0.1 ms slower where every round measured it 1.4-2.8 ms faster (MISSES_SAME_PROCESS)
SLOWER_MISSES = {"resnet50_infer_fp32_ab": "replayed 5.7 ms slower, measured 4.2 to 5.5 ms faster in every round: a device-bound "
                                           "FP32 serving step whose host speed the measurement leaves open, and autocast's "
                                           "cost priced as training programs pay it (MISSES_SAME_PROCESS)",
                 "resnet18_fp32_h100": "replayed 0.097 ms slower, measured 1.4 to 2.8 ms faster in every round: the host "
                                       "speed a device-bound FP32 step leaves open",
                 "mobilenetv2_fp32_ab": "replayed 6.9 ms faster, measured 1.05 ms slower (rounds -3.1 to +1.8): the BF16 + "
                                        "channels_last program ran 24.8 to 29.7 ms a step in these rounds and 11.9 / 14.7 "
                                        "timed alone in fresh processes the same hour (12.0 and 14.8 ms saved there; "
                                        "user_programs7_h200): a host-bound fixed step whose pace the process sets"}


@pytest.mark.parametrize("t", [pytest.param(t, marks=[pytest.mark.xfail(strict=True, reason=SLOWER_MISSES[t["problem"]])]
                                            if t["problem"] in SLOWER_MISSES else []) for t in PRECISION],
                         ids=[t["problem"] for t in PRECISION])
def test_a_precision_fix_measured_slower_is_replayed_slower(t):
    """Autocast adds casts (an eager op each, an autograd node each gradient's): on a step the host sets, the BF16 program runs slower. The replay of
    the twin's fix lengthens the step exactly where the rounds measured it slower (BERT, GPT-2 and ViT at batch 1,
    Swin-T, EfficientNet-B0, ResNet-50, DenseNet-121: `fixes.slower_by_us`, which the rules' evidence and fix text report), and
    never where every round measured a saving; the savings clip that at zero, so a slower fix is never a saving."""
    ctx = _prepared(f"ab_traced/{t['problem']}")
    tfs = []
    for name in t["rule"].split("+"):
        mod, rc = _for_rule(ctx, name)
        got = mod.fix_variants(rc) if t["variant"] and hasattr(mod, "fix_variants") else {}
        tf = got[t["variant"]] if t["variant"] in got else mod.fix_transform(rc)
        if tf is not None:
            tfs.append(tf)
    slower = fixes.slower_by_us(ctx, tfs)
    if min(t["rounds"]) > 0:
        assert slower == 0.0
    if t["measured_ms"] < 0:  # the median round slower (a round or two may straddle zero on a host-bound step)
        assert slower > 0.0
    assert len(PRECISION) == 33 and sum(x["measured_ms"] < 0 for x in PRECISION) == 9


def test_the_rules_say_when_their_fix_would_cost_time():
    # Swin-T FP32 -> BF16 measured 7.7 ms slower: fp32-gemm (info, TF32 advised) says autocast would add 2.5 ms;
    # EfficientNet-B0 in BF16 + channels_last 1.9 ms slower: fp32-conv says its change adds 4.0 ms
    (g,) = [f for f in _findings("ab_traced/swin_fp32") if f["rule"] == "fp32-gemm"]
    assert g["severity"] == "info" and g["evidence"]["autocast_slower_us"] > 1000
    assert "autocast would cost time" in g["fix"]
    (c,) = [f for f in _findings("ab_traced/effnet_fp32") if f["rule"] == "fp32-conv"]
    assert c["severity"] == "info" and c["savings_us"] == 0 and c["evidence"]["fix_slower_us"] > 1000
    assert "would cost time" in c["fix"]
    # a fix measured to save: nothing of the kind
    (h,) = [f for f in _findings("ab_traced/gpt2_fp32_s256") if f["rule"] == "fp32-gemm"]
    assert h["evidence"]["autocast_slower_us"] == 0 and "cost time" not in h["fix"]
