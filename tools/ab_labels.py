"""Write sample_traces/ab_traced/labels.json and MANIFEST.md from the runs' own `ab_result.json` and manifests.

Each run of `collectors/examples/record_ab_traced.sh` is one process (`collectors/examples/ab_twin.py` under
`traceview collect`): the problem's trace, its unprofiled wait steps (the collector's CUDA events) and the
problem and its fix timed in ABBA rounds without the profiler. The saving measured there is the truth the
prediction from that trace is checked against (`tools/predictions.py`, set `ab_traced`). What each twin is
and which rule must price it are declared here. Run from the repo root: `python tools/ab_labels.py`
(rewrites both files; a test checks they are current).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

SET = Path(__file__).resolve().parent.parent / "sample_traces" / "ab_traced"

#: run → (fixed twin's name, the rule that prices the fix, the fix variant where the rule has several, the set
#: holding the same twin measured in two processes, if any)
TWINS: dict[str, tuple[str, str, str | None, str | None]] = {
    "gpt2_sdpa_item": ("gpt2_sdpa_noitem", "host-sync", None, "collected3"),
    "gpt2_eager_attn": ("gpt2_sdpa", "materialized-attention", None, "collected3"),
    "gpt2_sdpa_single": ("gpt2_sdpa", "unfused-optimizer", "foreach", "collected3"),
    "gpt2_sdpa_single_f": ("gpt2_sdpa_fused", "unfused-optimizer", "fused", "collected3"),
    "gpt2_sdpa_empty_cache": ("gpt2_sdpa_ref", "allocator-churn", None, "collected4"),
    "gpt2_fp32": ("gpt2_sdpa", "fp32-gemm", "autocast", "collected3"),
    "gpt2_eager_attn_s1024": ("gpt2_sdpa_s1024", "materialized-attention", None, "collected4"),
    "resnet18_fp32": ("resnet18_bf16_cl", "fp32-conv", None, "collected3"),
    "train_syncs_item_b16": ("train_syncs_deferred_b16", "host-sync", None, "collected3"),
    "adamw_l12_single": ("adamw_l12_fused", "unfused-optimizer", "fused", "collected3"),
    "elementwise_32mib_eager": ("elementwise_32mib_compiled", "elementwise-chain", None, "collected3"),
    "epilogue_bert_eager": ("epilogue_bert_fused", "gemm-epilogue", None, "collected5"),
    "h2d_resnet18_pageable": ("h2d_resnet18_pinned", "pageable-memcpy", None, "collected5"),
    "small_batch_c4_graph": ("small_batch_c128_graph", "small-grid", None, "collected4"),
    # DataLoader twins: long-lived loaders alternating in one process (collectors/examples/loader_ab.py)
    "input_workers_nw2": ("input_workers_nw10", "loader-workers", None, "collected4"),
    "cnn_input_nw3": ("cnn_input_nw12", "loader-workers", None, "collected4"),
    # held out: models no other set has, recorded on 2026-12-03 after the model's last fit (record_ab_traced.sh
    # `heldout`); a fix that changes several things at once (autocast: GEMMs and convolutions) names every rule
    # whose transform it applies ("a+b": replayed together); bert_small_item and effnet_fp32 are negative controls
    "bert_fp32": ("bert_bf16", "fp32-gemm", "autocast", None),
    "vit_fp32": ("vit_bf16", "fp32-gemm+fp32-conv", "autocast", None),
    "convnext_fp32": ("convnext_bf16_cl", "fp32-gemm+fp32-conv", "autocast", None),
    "mobilenet_single": ("mobilenet_fused", "unfused-optimizer", "fused", None),
    "bert_small_item": ("bert_small_noitem", "host-sync", None, None),
    "effnet_fp32": ("effnet_bf16_cl", "fp32-conv", None, None),
    # DDP accumulation on HF GPT-2 (NCCL, 1 rank): the example times its own ABBA rounds on one DDP model
    # (collectors/examples/ddp_accum.py --ab-rounds; record_ab_traced.sh `ddp`)
    "ddp_accum4_gpt2": ("ddp_accum4_gpt2_nosync", "accumulation-sync", None, None),
    # real-library twins of launch-bound (the whole step captured in one CUDA graph) and elementwise-chain
    # (torch.compile), recorded on 2026-12-03 (`record_ab_traced.sh fixes`); effnet_compile is a negative control
    # (compiled, the step is slower: batch norm's statistics keep two passes over its inputs fused or not)
    "mobilenet_graph": ("mobilenet_cuda_graph", "launch-bound", None, None),
    "effnet_graph": ("effnet_cuda_graph", "launch-bound", None, None),
    "effnet_compile": ("effnet_compiled", "elementwise-chain", None, None),
    # GEMM rows not a multiple of 16 bytes (`record_ab_traced.sh aligned`, 2026-12-03): the LM head alone and HF
    # GPT-2 with vocabulary 50257 -> 50304; HF BERT 30522 -> 30528 is a negative control (its step is host-bound:
    # the GEMMs' 2.4 ms a step is not on the critical path), the padded GPT-2 timed against itself a control by
    # construction; GPT-2 compiled whole (Inductor pads the LM head and fuses the elementwise chains: both rules'
    # transforms replayed together)
    "unaligned_gemm": ("unaligned_gemm_v50304", "unaligned-gemm", None, None),
    "gpt2_vocab": ("gpt2_vocab50304", "unaligned-gemm", None, None),
    "bert_vocab": ("bert_vocab30528", "unaligned-gemm", None, None),
    "gpt2_vocab_padded": ("gpt2_vocab_padded", "unaligned-gemm", None, None),
    "gpt2_compile": ("gpt2_sdpa_compiled", "elementwise-chain+unaligned-gemm", None, "collected3"),
    # held out: recorded after unaligned-gemm's model was set (`record_ab_traced.sh aligned_heldout`): BERT's head
    # on a device-bound step (sequence 512), GPT-2 in FP32 with TF32 (rows of 4 elements)
    "bert_vocab_s512": ("bert_vocab30528_s512", "unaligned-gemm", None, None),
    "gpt2_tf32_vocab": ("gpt2_tf32_vocab50304", "unaligned-gemm", None, None),
    # torch.compile on real models whose GEMMs are aligned (`record_ab_traced.sh fused`): what Inductor's default
    # mode saves there is the elementwise chains it fuses (and their launches)
    "gpt2p_compile": ("gpt2p_compiled", "elementwise-chain", None, None),
    "bertp_compile": ("bertp_compiled", "elementwise-chain", None, None),
    # the compiled call's own host cost (`record_ab_traced.sh compile_call`, 2026-12-03): the 8-op chain on 8 MiB
    # (host-bound both ways: compiled saves 0.01 ms) and on 128 MiB (the collected2 twin, in one process)
    "elementwise_8mib_eager": ("elementwise_8mib_compiled", "elementwise-chain", None, None),
    "elementwise_128mib_eager": ("elementwise_chain_compiled", "elementwise-chain", None, "collected2"),
    # held out: FP32 -> bf16 autocast, recorded after fp32-gemm's autocast variant was set (2026-12-04,
    # `record_ab_traced.sh autocast_heldout`): sizes whose fixed step stays GPU-bound (GPT-2 batch 32, BERT at
    # sequence 512) and one whose fixed step is host-bound (ViT-B/16 batch 16)
    "gpt2_fp32_b32": ("gpt2_bf16_b32", "fp32-gemm", "autocast", None),
    "bert_fp32_s512": ("bert_bf16_s512", "fp32-gemm", "autocast", None),
    "vit_fp32_b16": ("vit_bf16_b16", "fp32-gemm+fp32-conv", "autocast", None),
    # held out: FP32 -> TF32 (`set_float32_matmul_precision("high")`), recorded after the TF32 variant priced GEMMs
    # misaligned at 4 bytes on the fallback kernel (`record_ab_traced.sh tf32_heldout`, 2026-12-04)
    "gpt2_fp32_tf32": ("gpt2_tf32", "fp32-gemm", "tf32", None),
    "bert_fp32_tf32": ("bert_tf32", "fp32-gemm", "tf32", None),
    "convnext_fp32_tf32": ("convnext_tf32", "fp32-gemm", "tf32", None),
    # held out: materialized-attention on HF BERT (eager -> SDPA, bf16, vocabulary 30528), a model the rule was not
    # developed on (`record_ab_traced.sh attn_heldout`, 2026-12-04)
    "bert_eager_attn_s512": ("bert_sdpa_s512", "materialized-attention", None, None),
    "bert_eager_attn_s128": ("bert_sdpa_s128", "materialized-attention", None, None),
    # held out: recorded after the replay read launches that waited for a queue slot as waits
    # (`record_ab_traced.sh queue_heldout`, 2026-12-04); ResNet-50 in BF16 + channels_last is slower (a control)
    "vit_fp32_b32": ("vit_bf16_b32", "fp32-gemm+fp32-conv", "autocast", None),
    "resnet50_fp32_b64": ("resnet50_bf16_cl_b64", "fp32-conv", None, None),
    "gpt2_fp32_tf32_b16": ("gpt2_tf32_b16", "fp32-gemm", "tf32", None),
    "convnext_fp32_b32": ("convnext_bf16_cl_b32", "fp32-gemm+fp32-conv", "autocast", None),
    # held out: recorded after attention's FLOPs were read in the flash / memory-efficient ops' own layout and one
    # fused-attention efficiency priced both rules (`record_ab_traced.sh attn_flops_heldout`, 2026-12-04): GPT-2
    # at 1024 tokens, FP32 -> BF16 autocast, and FP32 eager attention -> SDPA (FP32: the memory-efficient kernel)
    "gpt2_fp32_s1024": ("gpt2_bf16_s1024", "fp32-gemm", "autocast", None),
    "gpt2_eager_fp32_s1024": ("gpt2_sdpa_fp32_s1024", "materialized-attention", None, None),
    # held out: recorded after the fused-attention model counted a causal call's blocks on and below the diagonal
    # (`record_ab_traced.sh causal_heldout`, 2026-12-04): FP32 eager attention -> SDPA, causal (GPT-2 at 512
    # tokens) and not (BERT at 512), and FP32 -> BF16 autocast at another shape (GPT-2, 256 tokens, batch 32)
    "gpt2_eager_fp32_s512": ("gpt2_sdpa_fp32_s512", "materialized-attention", None, None),
    "bert_eager_fp32_s512": ("bert_sdpa_fp32_s512", "materialized-attention", None, None),
    "gpt2_fp32_s256": ("gpt2_bf16_s256", "fp32-gemm", "autocast", None),
    # negative controls (`record_ab_traced.sh autocast_host`, 2026-12-04): FP32 -> BF16 autocast on steps too small
    # for the GPU to matter (batch 1; 32 tokens or one image): host-bound both ways, autocast only adds its casts
    "bert_fp32_tiny": ("bert_bf16_tiny", "fp32-gemm", "autocast", None),
    "gpt2_fp32_tiny": ("gpt2_bf16_tiny", "fp32-gemm", "autocast", None),
    "vit_fp32_tiny": ("vit_bf16_tiny", "fp32-gemm+fp32-conv", "autocast", None),
    # held out: models no earlier group ran (`record_ab_traced.sh unseen`, 2026-12-04), each fix as a user makes it:
    # HF Llama (grouped-query attention, RMSNorm, SwiGLU) FP32 -> BF16 autocast (its FP32 grouped-query SDPA runs the
    # math backend, which autocast's 16-bit inputs move to flash: both rules' transforms), eager attention -> SDPA,
    # single-tensor -> fused AdamW, the fused program against itself (a control); Swin-T FP32 -> BF16 (measured
    # slower: a negative control)
    "llama_fp32": ("llama_bf16", "fp32-gemm+materialized-attention", "autocast", None),
    "llama_eager_attn": ("llama_sdpa", "materialized-attention", None, None),
    "llama_single": ("llama_fused", "unfused-optimizer", "fused", None),
    "llama_ctl": ("llama_ctl", "unfused-optimizer", "fused", None),
    "swin_fp32": ("swin_bf16", "fp32-gemm+fp32-conv", "autocast", None),
    # `unseen_more` (2026-12-05): unseen's single-tensor and eager-attention Llama twins again with 8 rounds, the
    # optimizer fix on a 4x larger batch, Swin-T FP32 -> TF32
    "llama_single_r8": ("llama_fused", "unfused-optimizer", "fused", None),
    "llama_eager_attn_r8": ("llama_sdpa", "materialized-attention", None, None),
    "llama_single_b16": ("llama_fused_b16", "unfused-optimizer", "fused", None),
    "swin_fp32_tf32": ("swin_tf32", "fp32-gemm", "tf32", None),
    # held out: `unseen2` (2026-12-05), models and mistakes no earlier group ran, scored as they came (before any
    # change they could inform): DenseNet-121 FP32 -> BF16 + channels_last (measured slower: a negative control),
    # RegNetY-800MF and Swin-T single-tensor -> fused AdamW, loss.item() per step on HF Llama, empty_cache() per
    # step on ResNet-50, HF BERT's eager attention at 256 tokens -> SDPA
    "densenet_fp32": ("densenet_bf16_cl", "fp32-conv", None, None),
    "regnet_single": ("regnet_fused", "unfused-optimizer", "fused", None),
    "llama_item": ("llama_noitem", "host-sync", None, None),
    "resnet50_empty_cache": ("resnet50_ref", "allocator-churn", None, None),
    "swin_single": ("swin_fused", "unfused-optimizer", "fused", None),
    "bert_eager_attn_s256": ("bert_sdpa_s256", "materialized-attention", None, None),
    # `repeat2` (2026-12-05): two misses recorded again in a new process, to tell the host's noise from the model's
    # error: BERT's eager attention at 512 tokens and empty_cache() per step on ResNet-50
    "bert_eager_attn_s512_r2": ("bert_sdpa_s512", "materialized-attention", None, None),
    "resnet50_empty_cache_r2": ("resnet50_ref", "allocator-churn", None, None),
    # held out on another GPU: `h100_a` / `h100_b` (record_ab_traced.sh), twins of earlier H200 groups on an H100 SXM
    # (the same Tensor-Core peak, 3.35 TB/s of HBM against 4.8), each rule once; listed here before they are recorded
    # (a run without its folder is skipped), so they are scored as they come
    "gpt2_fp32_h100": ("gpt2_sdpa_h100", "fp32-gemm", "autocast", None),
    "gpt2_eager_attn_s1024_h100": ("gpt2_sdpa_s1024_h100", "materialized-attention", None, None),
    "resnet18_fp32_h100": ("resnet18_bf16_cl_h100", "fp32-conv", None, None),
    "gpt2_sdpa_single_f_h100": ("gpt2_sdpa_fused_h100", "unfused-optimizer", "fused", None),
    "bert_eager_attn_s512_h100": ("bert_sdpa_s512_h100", "materialized-attention", None, None),
    "elementwise_128mib_h100": ("elementwise_128mib_compiled_h100", "elementwise-chain", None, None),
    "vit_fp32_b16_h100": ("vit_bf16_b16_h100", "fp32-gemm+fp32-conv", "autocast", None),
    "llama_single_b16_h100": ("llama_fused_b16_h100", "unfused-optimizer", "fused", None),
    "gpt2_vocab_h100": ("gpt2_vocab50304_h100", "unaligned-gemm", None, None),
    "gpt2_sdpa_empty_cache_h100": ("gpt2_sdpa_ref_h100", "allocator-churn", None, None),
    "h2d_resnet18_pageable_h100": ("h2d_resnet18_pinned_h100", "pageable-memcpy", None, None),
    "small_batch_c4_graph_h100": ("small_batch_c128_graph_h100", "small-grid", None, None),
    "mobilenet_graph_h100": ("mobilenet_cuda_graph_h100", "launch-bound", None, None),
    # `h100_c` (recorded in the same H100 session, after h100_a/b): the other twins the H200 sets missed or barely
    # resolved, each on the H100 once, scored as they came (every rule's real-model misses, and their neighbours)
    "gpt2_eager_attn_h100": ("gpt2_sdpa_h100", "materialized-attention", None, None),
    "bert_eager_attn_s256_h100": ("bert_sdpa_s256_h100", "materialized-attention", None, None),
    "llama_eager_attn_h100": ("llama_sdpa_h100", "materialized-attention", None, None),
    "bert_fp32_h100": ("bert_bf16_h100", "fp32-gemm", "autocast", None),
    "vit_fp32_b32_h100": ("vit_bf16_b32_h100", "fp32-gemm+fp32-conv", "autocast", None),
    "convnext_fp32_b32_h100": ("convnext_bf16_cl_b32_h100", "fp32-gemm+fp32-conv", "autocast", None),
    "resnet50_empty_cache_h100": ("resnet50_ref_h100", "allocator-churn", None, None),
    "adamw_l12_single_h100": ("adamw_l12_fused_h100", "unfused-optimizer", "fused", None),
    "train_syncs_item_b16_h100": ("train_syncs_deferred_b16_h100", "host-sync", None, None),
    "gpt2_sdpa_item_h100": ("gpt2_sdpa_noitem_h100", "host-sync", None, None),
    "epilogue_bert_eager_h100": ("epilogue_bert_fused_h100", "gemm-epilogue", None, None),
    "effnet_graph_h100": ("effnet_cuda_graph_h100", "launch-bound", None, None),
    # torch.cuda.empty_cache() every step on models no allocator twin ran, and the synthetic transformer's twin in
    # one process (`record_ab_traced.sh churn_heldout`, H100, 2026-12-05: after the driver's memory calls were
    # replayed whole; scored as they came)
    "bert_empty_cache_h100": ("bert_ref_h100", "allocator-churn", None, None),
    "vit_empty_cache_h100": ("vit_ref_h100", "allocator-churn", None, None),
    "llama_empty_cache_h100": ("llama_ref_h100", "allocator-churn", None, None),
    "mobilenet_empty_cache_h100": ("mobilenet_ref_h100", "allocator-churn", None, None),
    "densenet_empty_cache_h100": ("densenet_ref_h100", "allocator-churn", None, None),
    "alloc_churn_h100": ("alloc_churn_ref_h100", "allocator-churn", None, None),
    # held out (`record_ab_traced.sh rules_heldout`, H100, 2026-12-06): rules whose one-process twins ran one program
    # each, now on another (pageable copies and the fused epilogue on the MLP, small grids on ResNet-18, the decode
    # loop at width 1024, loss.item() per step on ResNet-50), scored as they came
    "h2d_mlp_pageable_h100": ("h2d_mlp_pinned_h100", "pageable-memcpy", None, None),
    "epilogue_mlp_h100": ("epilogue_mlp_fused_h100", "gemm-epilogue", None, None),
    "small_batch_resnet_h100": ("small_batch_resnet_c64_h100", "small-grid", None, None),
    "decode_d1024_h100": ("decode_d1024_static_h100", "decode-loop", None, None),
    "resnet50_item_h100": ("resnet50_noitem_h100", "host-sync", None, None),
    # CPU only (collectors/examples/record_cpu_twins.sh, this project's 2-core box, torch 2.13 CPU, one OMP thread,
    # 2026-12-06): single-tensor AdamW -> fused=True on HF GPT-2 and a 24-layer MLP, the model's development twins
    # (not held out); -> foreach=True on GPT-2, which cpu-op-overhead does not advise on CPU
    "cpu_gpt2_single_fused": ("cpu_gpt2_fused", "cpu-op-overhead", "fused", None),
    "cpu_adamw_single_fused": ("cpu_adamw_fused", "cpu-op-overhead", "fused", None),
    "cpu_gpt2_single_foreach": ("cpu_gpt2_foreach", "cpu-op-overhead", "foreach", None),
    # held out (`record_cpu_twins.sh heldout`, listed before they were recorded, scored as they came): other sizes
    # of both programs, GPT-2 at width 256 with 4 layers and the MLP at width 512
    "cpu_gpt2w256_single_fused": ("cpu_gpt2w256_fused", "cpu-op-overhead", "fused", None),
    "cpu_adamw_d512_single_fused": ("cpu_adamw_d512_fused", "cpu-op-overhead", "fused", None),
    # held out on another CPU (`record_cpu_twins.sh heldout` on the GPU host's 16-core Xeon, torch 2.11, OMP_NUM_THREADS
    # 16, 2026-12-06, after the fused pass's bandwidth was read from the first op on the moments; scored as they came)
    "cpu_gpt2w256_single_fused_x16": ("cpu_gpt2w256_fused_x16", "cpu-op-overhead", "fused", None),
    "cpu_adamw_d512_single_fused_x16": ("cpu_adamw_d512_fused_x16", "cpu-op-overhead", "fused", None),
    # held out (`record_ab_traced.sh user7_heldout`, H200, 2026-12-06, session 61): the seventh set of programs written
    # as users write them (collectors/examples/user_programs.py, self-timed, rounds from step 12 of 60), recorded while
    # the attention, optimizer, allocator and autocast models were reworked on branches that never saw them
    "qwen2_eager_ab": ("qwen2_sdpa_ab", "materialized-attention", None, None),
    "pythia_adamw_loop_ab": ("pythia_fused_ab", "unfused-optimizer", "fused", None),
    "bart_empty_cache_ab": ("bart_ref_ab", "allocator-churn", None, None),
    "electra_fp32_ab": ("electra_bf16_ab", "fp32-gemm", "autocast", None),
    "mobilenetv2_fp32_ab": ("mobilenetv2_bf16_cl_ab", "fp32-conv", None, None),
    # launch-bound on three of those fixed programs: each against its step captured whole in one CUDA graph
    # (`user7_graph`, user_programs --cuda-graph)
    "mobilenetv2_fp32_fixed_graph_ab": ("mobilenetv2_bf16_cl_cuda_graph_ab", "launch-bound", None, None),
    "electra_fp32_fixed_graph_ab": ("electra_bf16_cuda_graph_ab", "launch-bound", None, None),
    "bart_empty_cache_fixed_graph_ab": ("bart_ref_cuda_graph_ab", "launch-bound", None, None),
    # the allocator twins again with rounds in steady state (`churn_steady`, H200, 2026-12-06): 40 steps a run, the
    # first 11 left out, where the rounds above timed 11 of 12 (a churning loop takes 3-5 steps to settle)
    "resnet50_empty_cache_steady": ("resnet50_ref_steady", "allocator-churn", None, None),
    "bert_empty_cache_steady": ("bert_ref_steady", "allocator-churn", None, None),
    "mobilenet_empty_cache_steady": ("mobilenet_ref_steady", "allocator-churn", None, None),
    "alloc_churn_empty_cache_steady": ("alloc_churn_ref_steady", "allocator-churn", None, None),
    "gpt2_sdpa_empty_cache_steady": ("gpt2_sdpa_ref_steady", "allocator-churn", None, None),
    # held out (`record_ab_traced.sh user8_heldout`, H100, 2026-12-07, session 63): the eighth set of programs written
    # as users write them, on models no twin ran (GPT-NeoX's attention, Wide ResNet-50-2, T5, ResNet-50's SGD,
    # RegNetY), recorded before any rule or model change saw them and scored as they came
    "pythia_eager_ab": ("pythia_sdpa_ab", "materialized-attention", None, None),
    "wide_resnet_fp32_ab": ("wide_resnet_bf16_cl_ab", "fp32-conv", None, None),
    "t5_item_ab": ("t5_noitem_ab", "host-sync", None, None),
    "resnet50_sgd_loop_ab": ("resnet50_sgd_foreach_ab", "unfused-optimizer", "foreach", None),
    "regnet_empty_cache_ab": ("regnet_ref_ab", "allocator-churn", None, None),
    # the same SGD program again (`record_ab_traced.sh user8_sgd`, H200, 2026-12-07, session 64): eight rounds to
    # `foreach=True` (the four above spread wider than the saving), and to `fused=True`, the variant the finding advises
    "resnet50_sgd_foreach_ab": ("resnet50_sgd_foreach_ref_ab", "unfused-optimizer", "foreach", None),
    "resnet50_sgd_fused_ab": ("resnet50_sgd_fused_ref_ab", "unfused-optimizer", "fused", None),
    # the two larger fixes the report prices on the eighth set's GPT-NeoX with SDPA (`pythia_fixes`, H100, session 64):
    # the model under torch.compile (elementwise-chain: its rotary chains) and the step in one CUDA graph (launch-bound)
    "pythia_sdpa_compile_ab": ("pythia_sdpa_compiled_ab", "elementwise-chain", None, None),
    "pythia_sdpa_graph_ab": ("pythia_sdpa_cuda_graph_ab", "launch-bound", None, None),
    # held out (`record_ab_traced.sh compile_model`, H100, session 65): two more models under torch.compile against
    # their eager step, which no fit has seen
    "electra_fp32_compile_ab": ("electra_bf16_compiled_ab", "elementwise-chain", None, None),
    "qwen2_eager_compile_ab": ("qwen2_sdpa_compiled_ab", "elementwise-chain", None, None),
    # held out (`record_ab_traced.sh compile_host`, H100, session 65): torch.compile on HF GPT-2, BERT and Llama at
    # batch 1-2 x 64 tokens, where the host decides both steps; each compiled program traced alone too (*_fixed)
    "gpt2_tiny_compile_ab": ("gpt2_tiny_compiled_ab", "elementwise-chain", None, None),
    "bert_tiny_compile_ab": ("bert_tiny_compiled_ab", "elementwise-chain", None, None),
    "llama_tiny_compile_ab": ("llama_tiny_compiled_ab", "elementwise-chain", None, None),
    # held out (`record_ab_traced.sh user9_heldout`, H100, 2026-12-07, session 68): the ninth set of programs written
    # as users write them, recorded before any rule or model change saw them and scored as they came: two serving
    # loops in FP32 (a `.cpu()` of each batch's predictions), a DCGAN in FP32 (a negative control: BF16 ran slower)
    # and HF Whisper's eager attention. The set's side-stream prefetcher (prefetch_stream_ab, rounds against its
    # batches resident on the GPU) prices no rule's fix: tests/test_user_programs9.py checks no input rule fires
    "bert_infer_fp32_ab": ("bert_infer_bf16_ab", "fp32-gemm", "autocast", None),
    "resnet50_infer_fp32_ab": ("resnet50_infer_bf16_cl_ab", "fp32-conv", None, None),
    "dcgan_fp32_ab": ("dcgan_bf16_cl_ab", "fp32-conv", None, None),
    "whisper_eager_ab": ("whisper_sdpa_ab", "materialized-attention", None, None),
    # held out (`record_ab_traced.sh user10_heldout`, H100, 2026-12-07, session 69): the tenth set, recorded before
    # any rule or model change saw them: a UNet in FP32, a DLRM-style recommender on AdamW's default (foreach) path,
    # a GRUCell recurrence unrolled in Python (its fix: the step in one CUDA graph), a loop that synchronizes to time
    # its steps (a negative control: its step is device-bound) and a LoRA fine-tune on AdamW's default path (its
    # rounds cannot tell the fused kernel's sign)
    "unet_fp32_ab": ("unet_bf16_cl_ab", "fp32-conv", None, None),
    "dlrm_embed_ab": ("dlrm_embed_fused_ab", "unfused-optimizer", "fused", None),
    "gru_cell_loop_ab": ("gru_cell_loop_cuda_graph_ab", "launch-bound", None, None),
    "sync_timing_loop_ab": ("sync_timing_loop_nosync_ab", "host-sync", None, None),
    "lora_llama_ab": ("lora_llama_fused_ab", "unfused-optimizer", "fused", None),
}
#: twins whose fix changes nothing by construction (the same program on both sides): a control, never scored
CONTROLS = {"gpt2_vocab_padded", "llama_ctl"}
HELD_OUT = {"bert_fp32", "vit_fp32", "convnext_fp32", "mobilenet_single", "bert_small_item", "effnet_fp32",
            "ddp_accum4_gpt2", "bert_vocab_s512", "gpt2_tf32_vocab", "gpt2_fp32_b32", "bert_fp32_s512", "vit_fp32_b16",
            "gpt2_fp32_tf32", "bert_fp32_tf32", "convnext_fp32_tf32", "bert_eager_attn_s512", "bert_eager_attn_s128",
            "vit_fp32_b32", "resnet50_fp32_b64", "gpt2_fp32_tf32_b16", "convnext_fp32_b32", "gpt2_fp32_s1024",
            "gpt2_eager_fp32_s1024", "gpt2_eager_fp32_s512", "bert_eager_fp32_s512", "gpt2_fp32_s256",
            "bert_fp32_tiny", "gpt2_fp32_tiny", "vit_fp32_tiny", "llama_fp32", "llama_eager_attn", "llama_single",
            "llama_ctl", "swin_fp32", "llama_single_r8", "llama_eager_attn_r8", "llama_single_b16", "swin_fp32_tf32",
            "densenet_fp32", "regnet_single", "llama_item", "resnet50_empty_cache", "swin_single", "bert_eager_attn_s256",
            "bert_eager_attn_s512_r2", "resnet50_empty_cache_r2", "cpu_gpt2w256_single_fused",
            "cpu_adamw_d512_single_fused", "cpu_gpt2w256_single_fused_x16", "cpu_adamw_d512_single_fused_x16",
            *(r for r in TWINS if r.endswith(("_h100", "_ab", "_steady")))}


def build() -> tuple[dict, str]:
    """(labels, MANIFEST.md text) of the runs present in the set's folder."""
    twins, lines = [], []
    for run, (fixed, rule, variant, other) in TWINS.items():
        d = SET / run
        if not (d / "ab_result.json").is_file():
            continue
        ab = json.loads((d / "ab_result.json").read_text())
        man = json.loads((d / "manifest.json").read_text())
        wait = json.loads((d / "rank0.collect.json").read_text())["unprofiled_step_ms"]
        spread = ab["per_round_saving_ms"]
        twins.append(
            {
                "problem": run,
                "fixed": fixed,
                "rule": rule,
                "fix_variant": variant,
                "same_twin_in": other,
                "held_out": run in HELD_OUT,
                "control": run in CONTROLS,
                "problem_command": ab["problem"],
                "fixed_command": ab["fixed"],
                "problem_step_ms": ab["problem_step_ms"],
                "fixed_step_ms": ab["fixed_step_ms"],
                "measured_fix_saving_ms": ab["saving_ms"],
                "per_round_saving_ms": spread,
                "rounds": ab["rounds"],
                "traced_run_wait_steps_median_ms": round(statistics.median(wait[1:]), 4),
                "collect_command": man["command"],
                "gpu": man.get("gpu_name"),
            }
        )
        lines.append(
            f"| {run}{' (held out)' if run in HELD_OUT else ''} → {fixed} | {rule}{f' ({variant})' if variant else ''} | {ab['problem_step_ms']:.3f} | "
            f"{ab['fixed_step_ms']:.3f} | {ab['saving_ms']:.3f} | {min(spread):.3f} to {max(spread):.3f} |"
        )
    versions = {}
    if twins:
        first = json.loads((SET / twins[0]["problem"] / "manifest.json").read_text())
        versions = {"torch": first["versions"]["torch"], "gpu": first.get("gpu_name")}
    labels = {
        "recorded": f"torch {versions.get('torch')}, {versions.get('gpu')}",
        "how": (
            "collectors/examples/record_ab_traced.sh: one process per twin (collectors/examples/ab_twin.py under "
            "traceview collect --wait 8 --warmup 1 --active 3 --shapes): the problem traced once, then problem and fix "
            "timed unprofiled in ABBA rounds, each a fresh run of the example with its first step left out; saving = "
            "median over rounds of (problem's median step - fix's median step). DataLoader twins "
            "(collectors/examples/loader_ab.py, traceview collect --wait 24): both loaders alive for the whole "
            "process (persistent workers), ABBA rounds each after the side's prefetch buffer drained, a side's step "
            "the mean of its timed steps (a loader short of workers delivers in bursts). DDP accumulation "
            "(collectors/examples/ddp_accum.py --ab-rounds): ABBA rounds of all-reduce vs no_sync() steps on the "
            "traced DDP model, in the traced process"
        ),
        "twins": twins,
    }
    md = "\n".join(
        [
            "# ab_traced: twins measured in the process that took the problem's trace",
            "",
            "Recorded by `collectors/examples/record_ab_traced.sh` on "
            + labels["recorded"]
            + ". "
            + labels["how"]
            + ".",
            "Written by `python tools/ab_labels.py`. Held out: models no other set has (HF BERT, torchvision ViT-B/16, "
            "ConvNeXt-T, MobileNetV3-S, EfficientNet-B0, DDP accumulation on GPT-2), recorded on 2026-12-03 after the profiler-cost model's last "
            "fit and the rules' last change, and scored as they came (`record_ab_traced.sh heldout`); BERT's 30522-token head at "
            "sequence 512 and GPT-2 in TF32, recorded after unaligned-gemm's model was set (`record_ab_traced.sh aligned_heldout`); "
            "later groups as their comments in tools/ab_labels.py say (each recorded after the model change it tests): FP32 "
            "eager attention -> SDPA on GPT-2 and BERT at 512 tokens and FP32 -> BF16 on GPT-2 at 256 x 32 after the causal "
            "share (`causal_heldout`); FP32 -> BF16 on batch-1 steps, host-bound both ways, negative controls (`autocast_host`); HF Llama and "
            "torchvision's Swin-T, models no earlier group ran (`unseen`). Runs named `*_h100` were recorded on an H100 SXM "
            "(`h100_a`, `h100_b`, `h100_c`: twins of the H200 groups on another GPU, held out, scored as they came); "
            "`*_h100_fixed` folders hold the fixed program of that twin traced alone in a process of its own "
            "(`h100_fixed`): no rounds, not scored, a trace of what the fix's transform predicts. Runs named `cpu_*` "
            "ran on a CPU only (`collectors/examples/record_cpu_twins.sh`: torch 2.13's CPU build, one OMP thread, "
            "a 2-core box), timed by wall clock; `cpu_*_x16` on the GPU host's 16-core Xeon (torch 2.11, 16 OMP threads).",
            "",
            "| problem → fixed | rule | problem ms | fixed ms | saving ms | per-round saving ms |",
            "|---|---|---:|---:|---:|---|",
            *lines,
            "",
        ]
    )
    return labels, md


def main(argv: list[str]) -> int:
    labels, md = build()
    text = json.dumps(labels, indent=1) + "\n"
    if "--check" in argv:
        same = (SET / "labels.json").read_text() == text and (SET / "MANIFEST.md").read_text() == md
        return 0 if same else 1
    (SET / "labels.json").write_text(text)
    (SET / "MANIFEST.md").write_text(md)
    print(f"{len(labels['twins'])} twins written to {SET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
