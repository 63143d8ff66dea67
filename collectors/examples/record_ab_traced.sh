#!/usr/bin/env bash
# Record sample_traces/ab_traced/: each twin in ONE process — the problem's trace (traceview collect) and the
# problem and its fix timed unprofiled in ABBA rounds (collectors/examples/ab_twin.py). The prediction is made
# from a trace whose process also measured the saving, so host speed differences between processes cancel.
# Usage (repo root, on a CUDA machine): collectors/examples/record_ab_traced.sh OUT_DIR [GROUP...]
#   GROUP: real | synth | loader | heldout | ddp | fixes | aligned | aligned_heldout | fused | compile_call | item |
#   autocast_heldout | tf32_heldout | attn_heldout | queue_heldout | attn_flops_heldout | causal_heldout |
#   autocast_host | unseen | unseen_more | unseen2 | repeat2 | h100_a | h100_b | h100_c | h100_fixed | churn_heldout |
#   rules_heldout | user7_heldout | user7_graph | churn_steady | user8_heldout | user8_sgd | t5_read | pythia_fixes | compile_model | compile_host | user9_heldout | user10_heldout | user11_heldout
#   (default: all but item, repeat2, churn_heldout, rules_heldout, user7_heldout, user7_graph, churn_steady, user8_heldout, user8_sgd, t5_read, pythia_fixes, compile_model, compile_host, user9_heldout, user10_heldout, user11_heldout and the h100 groups, which re-record earlier runs). Runs land in OUT_DIR/ab_traced/<problem>/, AB_RESULT lines on stdout.
set -u
OUTD=${1:-/tmp/tv_ab_traced}
shift || true
GROUPS_=${*:-real synth loader heldout ddp fixes aligned aligned_heldout fused compile_call autocast_heldout tf32_heldout attn_heldout queue_heldout attn_flops_heldout causal_heldout autocast_host unseen unseen_more unseen2}
PY=${PY:-python3}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
C="$PY -m collectors collect --out $OUTD/ab_traced --wait 8 --warmup 1 --active 3 --shapes"
AB="$PY -m collectors.examples.ab_twin --rounds ${ROUNDS:-6}"
# DataLoader twins: the capture after the first loader's prefetch buffer drained (wait 24), rounds on long-lived
# loaders (collectors/examples/loader_ab.py: fresh-run rounds time the buffer, not the workers)
CW="$PY -m collectors collect --out $OUTD/ab_traced --wait 24 --warmup 1 --active 3 --shapes"
LAB="$PY -m collectors.examples.loader_ab --rounds ${ROUNDS:-6}"
. "$(dirname "$0")/_run.sh"
G2="real_models --model gpt2 --attn sdpa --amp"
# `ab NAME A B`: the twin in one process (the problem traced, then ABBA rounds of A and B); with TRACE_FIXED=1 also
# B alone under the collector (NAME_fixed/), a trace of the fixed program to check the fix's transform against
ab() {
  local name=$1 a=$2 b=$3
  run "$name" $C --name "$name" -- $AB "$a" "$b"
  if [ "${TRACE_FIXED:-0}" = 1 ]; then
    run "${name}_fixed" $C --name "${name}_fixed" -- $PY -m collectors.examples.$b
  fi
}

for group in $GROUPS_; do
case $group in
real)  # --- real-library models (Hugging Face GPT-2, torchvision ResNet-18) ------------------------------------
  run gpt2_sdpa_item $C --name gpt2_sdpa_item -- $AB "$G2 --sync-item --batch 2 --seq 256" "$G2 --batch 2 --seq 256"
  run gpt2_eager_attn $C --name gpt2_eager_attn -- $AB "real_models --model gpt2 --attn eager --amp" "$G2"
  run gpt2_sdpa_single $C --name gpt2_sdpa_single -- $AB "$G2 --optim single" "$G2 --optim foreach"
  run gpt2_sdpa_single_f $C --name gpt2_sdpa_single_f -- $AB "$G2 --optim single" "$G2 --optim fused"
  run gpt2_sdpa_empty_cache $C --name gpt2_sdpa_empty_cache -- $AB "$G2 --empty-cache" "$G2"
  run gpt2_fp32 $C --name gpt2_fp32 -- $AB "real_models --model gpt2 --attn sdpa" "$G2"
  run gpt2_eager_attn_s1024 $C --name gpt2_eager_attn_s1024 -- $AB \
    "real_models --model gpt2 --attn eager --amp --seq 1024 --batch 4" "$G2 --seq 1024 --batch 4"
  run resnet18_fp32 $C --name resnet18_fp32 -- $AB "real_models --model resnet --batch 64" \
    "real_models --model resnet --batch 64 --amp --channels-last"
  ;;
synth)  # --- synthetic twins of collected3/5 ---------------------------------------------------------------------
  run train_syncs_item_b16 $C --name train_syncs_item_b16 -- $AB "train_syncs --batch 16" "train_syncs --deferred --batch 16"
  run adamw_l12_single $C --name adamw_l12_single -- $AB "optimizer_step --impl single --layers 12 --d 512" \
    "optimizer_step --impl fused --layers 12 --d 512"
  run elementwise_32mib_eager $C --name elementwise_32mib_eager -- $AB "elementwise_chain --mib 32" \
    "elementwise_chain --mib 32 --compile"
  run epilogue_bert_eager $C --name epilogue_bert_eager -- $AB "gemm_epilogue --model bert --fix none" \
    "gemm_epilogue --model bert --fix fused"
  run h2d_resnet18_pageable $C --name h2d_resnet18_pageable -- $AB "h2d_copy --model resnet18" \
    "h2d_copy --model resnet18 --pinned"
  run small_batch_c4_graph $C --name small_batch_c4_graph -- $AB "small_batch --rows 128 --per-call 4 --graph" \
    "small_batch --rows 128 --per-call 128 --graph"
  ;;
loader)  # --- DataLoader twins of collected4 (the same programs, both loaders alive in one process) -----------
  run input_workers_nw2 $CW --name input_workers_nw2 -- $LAB --workload input_workers --workers-a 2 --workers-b 10
  run cnn_input_nw3 $CW --name cnn_input_nw3 -- $LAB --workload cnn_input --workers-a 3 --workers-b 12
  ;;
heldout)  # --- models no other set has, recorded after the model's last fit (tools/ab_labels.py HELD_OUT) ------
  BERT="real_models --model bert --layers 12 --d 768 --heads 12 --seq 128 --batch 32"
  run bert_fp32 $C --name bert_fp32 -- $AB "$BERT" "$BERT --amp"
  run vit_fp32 $C --name vit_fp32 -- $AB "real_models --model vit_b_16 --batch 64" \
    "real_models --model vit_b_16 --batch 64 --amp"
  run convnext_fp32 $C --name convnext_fp32 -- $AB "real_models --model convnext_tiny --batch 64" \
    "real_models --model convnext_tiny --batch 64 --amp --channels-last"
  run mobilenet_single $C --name mobilenet_single -- $AB "real_models --model mobilenet_v3_small --batch 8 --optim single" \
    "real_models --model mobilenet_v3_small --batch 8 --optim fused"
  BS="real_models --model bert --layers 4 --d 512 --heads 8 --seq 128 --batch 4 --amp"
  run bert_small_item $C --name bert_small_item -- $AB "$BS --sync-item" "$BS"
  run effnet_fp32 $C --name effnet_fp32 -- $AB "real_models --model efficientnet_b0 --batch 64" \
    "real_models --model efficientnet_b0 --batch 64 --amp --channels-last"
  ;;
ddp)  # DDP accumulation on HF GPT-2 (NCCL, 1 rank): the example times its own ABBA rounds on the same DDP model
  run ddp_accum4_gpt2 $C --name ddp_accum4_gpt2 -- torchrun --standalone --nproc-per-node 1 \
    -m collectors.examples.ddp_accum --model gpt2 --layers 6 --batch 32 --seq 512 --accum 4 --steps 16 \
    --ab-rounds ${ROUNDS:-6} --ab-steps 8
  ;;
fixes)  # real-library twins of the launch-bound fix (a whole-step CUDA graph) and the elementwise-chain fix
  # (torch.compile fuses the chains), on torchvision models no other twin of those rules uses
  run mobilenet_graph $C --name mobilenet_graph -- $AB "real_models --model mobilenet_v3_small --batch 8" \
    "real_models --model mobilenet_v3_small --batch 8 --cuda-graph"
  run effnet_graph $C --name effnet_graph -- $AB "real_models --model efficientnet_b0 --batch 64" \
    "real_models --model efficientnet_b0 --batch 64 --cuda-graph"
  # each round compiles the fixed twin afresh (Inductor's caches make the later ones quicker): fewer rounds
  RUN_TIMEOUT=${RUN_TIMEOUT_COMPILE:-420} run effnet_compile $C --name effnet_compile -- \
    $PY -m collectors.examples.ab_twin --rounds ${ROUNDS_COMPILE:-4} "real_models --model efficientnet_b0 --batch 64" \
    "real_models --model efficientnet_b0 --batch 64 --compile --steps 20"
  ;;
aligned)  # GEMMs whose vocabulary is not a multiple of 8 (bf16 rows not 16-byte aligned) vs padded to 64
  run unaligned_gemm $C --name unaligned_gemm -- $AB "unaligned_gemm" "unaligned_gemm --vocab 50304"
  run gpt2_vocab $C --name gpt2_vocab -- $AB "$G2" "$G2 --vocab 50304"
  BA="real_models --model bert --layers 12 --d 768 --heads 12 --seq 128 --batch 32 --amp"
  run bert_vocab $C --name bert_vocab -- $AB "$BA" "$BA --vocab 30528"
  # negative control: the padded GPT-2 timed against itself (its trace has nothing to pad)
  run gpt2_vocab_padded $C --name gpt2_vocab_padded -- $AB "$G2 --vocab 50304" "$G2 --vocab 50304"
  # the whole model compiled (Inductor pads these GEMMs and fuses the elementwise chains): both rules' fixes
  RUN_TIMEOUT=${RUN_TIMEOUT_COMPILE:-420} run gpt2_compile $C --name gpt2_compile -- \
    $PY -m collectors.examples.ab_twin --rounds ${ROUNDS_COMPILE:-4} "$G2" "$G2 --compile --steps 20"
  ;;
aligned_heldout)  # recorded after unaligned-gemm's model was set: BERT's head on a device-bound step, GPT-2 in TF32
  BL="real_models --model bert --layers 12 --d 768 --heads 12 --seq 512 --batch 16 --amp"
  run bert_vocab_s512 $C --name bert_vocab_s512 -- $AB "$BL" "$BL --vocab 30528"
  GT="real_models --model gpt2 --attn sdpa --precision high"
  run gpt2_tf32_vocab $C --name gpt2_tf32_vocab -- $AB "$GT" "$GT --vocab 50304"
  ;;
fused)  # torch.compile on real models whose GEMMs are already aligned: what it saves is elementwise-chain's fusion
  RUN_TIMEOUT=${RUN_TIMEOUT_COMPILE:-420} run gpt2p_compile $C --name gpt2p_compile -- \
    $PY -m collectors.examples.ab_twin --rounds ${ROUNDS_COMPILE:-4} "$G2 --vocab 50304" "$G2 --vocab 50304 --compile --steps 20"
  BP="real_models --model bert --layers 12 --d 768 --heads 12 --seq 512 --batch 16 --amp --vocab 30528"
  RUN_TIMEOUT=${RUN_TIMEOUT_COMPILE:-420} run bertp_compile $C --name bertp_compile -- \
    $PY -m collectors.examples.ab_twin --rounds ${ROUNDS_COMPILE:-4} "$BP" "$BP --compile --steps 20"
  ;;
autocast_heldout)  # recorded after fp32-gemm's autocast variant was set (2026-12-04): other sizes, fixed steps GPU-bound
  GB="real_models --model gpt2 --attn sdpa --batch 32"
  run gpt2_fp32_b32 $C --name gpt2_fp32_b32 -- $AB "$GB" "$GB --amp"
  BB="real_models --model bert --layers 12 --d 768 --heads 12 --seq 512 --batch 16"
  run bert_fp32_s512 $C --name bert_fp32_s512 -- $AB "$BB" "$BB --amp"
  run vit_fp32_b16 $C --name vit_fp32_b16 -- $AB "real_models --model vit_b_16 --batch 16" \
    "real_models --model vit_b_16 --batch 16 --amp"
  ;;
tf32_heldout)  # FP32 -> TF32 (float32 matmul precision "high"), recorded after fp32-gemm's TF32 variant priced GEMMs
  # misaligned at 4 bytes (GPT-2's 50257, BERT's 30522) on the fallback kernel (2026-12-04)
  run gpt2_fp32_tf32 $C --name gpt2_fp32_tf32 -- $AB "real_models --model gpt2 --attn sdpa" \
    "real_models --model gpt2 --attn sdpa --precision high"
  BT="real_models --model bert --layers 12 --d 768 --heads 12 --seq 128 --batch 32"
  run bert_fp32_tf32 $C --name bert_fp32_tf32 -- $AB "$BT" "$BT --precision high"
  run convnext_fp32_tf32 $C --name convnext_fp32_tf32 -- $AB "real_models --model convnext_tiny --batch 64" \
    "real_models --model convnext_tiny --batch 64 --precision high"
  ;;
attn_heldout)  # materialized-attention on a model it was not developed on: HF BERT eager -> SDPA (2026-12-04)
  BA="real_models --model bert --layers 12 --d 768 --heads 12 --amp --vocab 30528"
  run bert_eager_attn_s512 $C --name bert_eager_attn_s512 -- $AB "$BA --seq 512 --batch 16 --attn eager" \
    "$BA --seq 512 --batch 16"
  run bert_eager_attn_s128 $C --name bert_eager_attn_s128 -- $AB "$BA --seq 128 --batch 32 --attn eager" \
    "$BA --seq 128 --batch 32"
  ;;
queue_heldout)  # recorded after the replay read launches that waited for a queue slot as waits (2026-12-04): FP32
  # device-bound steps with a full launch queue whose BF16 fix may leave the host in charge
  run vit_fp32_b32 $C --name vit_fp32_b32 -- $AB "real_models --model vit_b_16 --batch 32" \
    "real_models --model vit_b_16 --batch 32 --amp"
  run resnet50_fp32_b64 $C --name resnet50_fp32_b64 -- $AB "real_models --model resnet50 --batch 64" \
    "real_models --model resnet50 --batch 64 --amp --channels-last"
  run gpt2_fp32_tf32_b16 $C --name gpt2_fp32_tf32_b16 -- $AB "real_models --model gpt2 --attn sdpa --batch 16" \
    "real_models --model gpt2 --attn sdpa --batch 16 --precision high"
  run convnext_fp32_b32 $C --name convnext_fp32_b32 -- $AB "real_models --model convnext_tiny --batch 32" \
    "real_models --model convnext_tiny --batch 32 --amp --channels-last"
  ;;
attn_flops_heldout)  # recorded after attention's FLOPs were read in the flash / memory-efficient ops' own layout and
  # one fused-attention efficiency priced both rules (2026-12-04): long sequences, where attention is a large share
  G1="real_models --model gpt2 --seq 1024 --batch 4"
  run gpt2_fp32_s1024 $C --name gpt2_fp32_s1024 -- $AB "$G1 --attn sdpa" "$G1 --attn sdpa --amp"
  run gpt2_eager_fp32_s1024 $C --name gpt2_eager_fp32_s1024 -- $AB "$G1 --attn eager" "$G1 --attn sdpa"
  ;;
causal_heldout)  # to record (no device was lent after the causal share was set, 2026-12-04): held-out twins for it. FP32
  # eager attention -> SDPA, causal (GPT-2) and not (BERT), and FP32 -> BF16 autocast at another size
  run gpt2_eager_fp32_s512 $C --name gpt2_eager_fp32_s512 -- $AB "real_models --model gpt2 --attn eager" \
    "real_models --model gpt2 --attn sdpa"
  BE="real_models --model bert --layers 12 --d 768 --heads 12 --seq 512 --batch 8 --vocab 30528"
  run bert_eager_fp32_s512 $C --name bert_eager_fp32_s512 -- $AB "$BE --attn eager" "$BE"
  G3="real_models --model gpt2 --attn sdpa --seq 256 --batch 32"
  run gpt2_fp32_s256 $C --name gpt2_fp32_s256 -- $AB "$G3" "$G3 --amp"
  ;;
autocast_host)  # autocast's host cost: FP32 -> BF16 autocast on steps too small for the GPU to matter (batch 1,
  # 32 tokens / one image), so the measured difference is what autocast adds to the host (casts, their backward,
  # its dispatch) — the fp32-gemm autocast variant's host side against a measurement
  BT="real_models --model bert --layers 12 --d 768 --heads 12 --seq 32 --batch 1 --vocab 30528"
  run bert_fp32_tiny $C --name bert_fp32_tiny -- $AB "$BT" "$BT --amp"
  GT="real_models --model gpt2 --attn sdpa --seq 32 --batch 1"
  run gpt2_fp32_tiny $C --name gpt2_fp32_tiny -- $AB "$GT" "$GT --amp"
  VT="real_models --model vit_b_16 --batch 1"
  run vit_fp32_tiny $C --name vit_fp32_tiny -- $AB "$VT" "$VT --amp"
  ;;
unseen)  # held out, models no earlier group ran (2026-12-04): HF Llama (RMSNorm, rotary embeddings, SwiGLU,
  # grouped-query attention: 16 query heads on 4 key/value heads) and torchvision's Swin-T, each fix as a user would
  # make it; llama_ctl runs the well-configured program against itself (a control by construction)
  L="real_models --model llama --layers 8 --d 1024 --heads 16 --kv-heads 4 --seq 1024 --batch 4"
  run llama_fp32 $C --name llama_fp32 -- $AB "$L" "$L --amp"
  run llama_eager_attn $C --name llama_eager_attn -- $AB "$L --amp --attn eager" "$L --amp"
  run llama_single $C --name llama_single -- $AB "$L --amp --optim single" "$L --amp --optim fused"
  run llama_ctl $C --name llama_ctl -- $AB "$L --amp --optim fused" "$L --amp --optim fused"
  run swin_fp32 $C --name swin_fp32 -- $AB "real_models --model swin_t --batch 32" "real_models --model swin_t --batch 32 --amp"
  ;;
unseen_more)  # the same day: unseen's single-tensor and eager-attention twins again with 8 rounds (their first
  # rounds spread 6.5-18.3 and -3.2-7.2 ms on a noisy host), the optimizer fix on a 4x larger batch (the device
  # holds the step), and Swin-T FP32 -> TF32
  L="real_models --model llama --layers 8 --d 1024 --heads 16 --kv-heads 4 --seq 1024"
  AB8="$PY -m collectors.examples.ab_twin --rounds 8"
  run llama_single_r8 $C --name llama_single_r8 -- $AB8 "$L --batch 4 --amp --optim single" "$L --batch 4 --amp --optim fused"
  run llama_eager_attn_r8 $C --name llama_eager_attn_r8 -- $AB8 "$L --batch 4 --amp --attn eager" "$L --batch 4 --amp"
  run llama_single_b16 $C --name llama_single_b16 -- $AB "$L --batch 16 --amp --optim single" "$L --batch 16 --amp --optim fused"
  run swin_fp32_tf32 $C --name swin_fp32_tf32 -- $AB "real_models --model swin_t --batch 32" \
    "real_models --model swin_t --batch 32 --precision high"
  ;;
unseen2)  # held out (2026-12-05): models and mistakes no earlier group ran, recorded before any change they could
  # inform: torchvision DenseNet-121 FP32 -> BF16 + channels_last, RegNetY-800MF and Swin-T single-tensor -> fused
  # AdamW, a per-step loss.item() on HF Llama, torch.cuda.empty_cache() every step on ResNet-50, HF BERT's eager
  # attention at 256 tokens in BF16 -> SDPA
  L="real_models --model llama --layers 8 --d 1024 --heads 16 --kv-heads 4 --seq 1024"
  R50="real_models --model resnet50 --batch 32 --amp --channels-last"
  B6="real_models --model bert --layers 6 --d 768 --heads 12 --seq 256 --batch 16 --amp"
  run densenet_fp32 $C --name densenet_fp32 -- $AB "real_models --model densenet121 --batch 32" \
    "real_models --model densenet121 --batch 32 --amp --channels-last"
  run regnet_single $C --name regnet_single -- $AB "real_models --model regnet_y_800mf --batch 32 --optim single" \
    "real_models --model regnet_y_800mf --batch 32 --optim fused"
  run llama_item $C --name llama_item -- $AB "$L --batch 2 --amp --sync-item" "$L --batch 2 --amp"
  run resnet50_empty_cache $C --name resnet50_empty_cache -- $AB "$R50 --empty-cache" "$R50"
  run swin_single $C --name swin_single -- $AB "real_models --model swin_t --batch 32 --amp --optim single" \
    "real_models --model swin_t --batch 32 --amp --optim fused"
  run bert_eager_attn_s256 $C --name bert_eager_attn_s256 -- $AB "$B6 --attn eager" "$B6"
  ;;
repeat2)  # (2026-12-05) two misses recorded again, to tell the host's noise from the model's error: HF BERT's eager
  # attention at 512 tokens (attn_heldout's, -62 %) and empty_cache() per step on ResNet-50 (unseen2's, -56 %)
  BA="real_models --model bert --layers 12 --d 768 --heads 12 --amp --vocab 30528"
  R50="real_models --model resnet50 --batch 32 --amp --channels-last"
  run bert_eager_attn_s512_r2 $C --name bert_eager_attn_s512_r2 -- $AB "$BA --seq 512 --batch 16 --attn eager" \
    "$BA --seq 512 --batch 16"
  run resnet50_empty_cache_r2 $C --name resnet50_empty_cache_r2 -- $AB "$R50 --empty-cache" "$R50"
  ;;
h100_a|h100_b)  # held out on another GPU (2026-12-05, an H100 SXM: 3.35 TB/s of HBM against the H200's 4.8, the same
  # Tensor-Core peak): twins of earlier H200 groups, each rule once, scored as they came. h100_a: GPU-bound fixes
  # (precision, attention, an elementwise chain, the fused optimizer); h100_b: host-side and memory fixes. With
  # TRACE_FIXED=1 each fixed program is also traced in a process of its own (<name>_fixed/): not for its timing,
  # for checking a fix's transform against the program it predicts (its kernels, its casts, its host ops)
  if [ "$group" = h100_a ]; then
    ab gpt2_fp32_h100 "real_models --model gpt2 --attn sdpa" "$G2"
    ab gpt2_eager_attn_s1024_h100 "real_models --model gpt2 --attn eager --amp --seq 1024 --batch 4" \
      "$G2 --seq 1024 --batch 4"
    ab resnet18_fp32_h100 "real_models --model resnet --batch 64" "real_models --model resnet --batch 64 --amp --channels-last"
    ab gpt2_sdpa_single_f_h100 "$G2 --optim single" "$G2 --optim fused"
    BA="real_models --model bert --layers 12 --d 768 --heads 12 --amp --vocab 30528"
    ab bert_eager_attn_s512_h100 "$BA --seq 512 --batch 16 --attn eager" "$BA --seq 512 --batch 16"
    ab elementwise_128mib_h100 "elementwise_chain --mib 128" "elementwise_chain --mib 128 --compile"
    # the largest autocast misses on the H200 (ViT-B/16's BF16 step ran its host 5-8 ms slower than priced): with
    # TRACE_FIXED=1 the BF16 program's own trace shows where autocast's host time goes
    ab vit_fp32_b16_h100 "real_models --model vit_b_16 --batch 16" "real_models --model vit_b_16 --batch 16 --amp"
  else
    L="real_models --model llama --layers 8 --d 1024 --heads 16 --kv-heads 4 --seq 1024"
    ab llama_single_b16_h100 "$L --batch 16 --amp --optim single" "$L --batch 16 --amp --optim fused"
    ab gpt2_vocab_h100 "$G2" "$G2 --vocab 50304"
    ab gpt2_sdpa_empty_cache_h100 "$G2 --empty-cache" "$G2"
    ab h2d_resnet18_pageable_h100 "h2d_copy --model resnet18" "h2d_copy --model resnet18 --pinned"
    ab small_batch_c4_graph_h100 "small_batch --rows 128 --per-call 4 --graph" "small_batch --rows 128 --per-call 128 --graph"
    ab mobilenet_graph_h100 "real_models --model mobilenet_v3_small --batch 8" \
      "real_models --model mobilenet_v3_small --batch 8 --cuda-graph"
  fi
  ;;
h100_c)  # the same H100 session after h100_a/b (2026-12-05): the other twins the H200 sets missed or barely resolved,
  # each once on the H100, scored as they came
  ab gpt2_eager_attn_h100 "real_models --model gpt2 --attn eager --amp" "$G2"
  BA6="real_models --model bert --layers 6 --d 768 --heads 12 --seq 256 --batch 16 --amp"
  ab bert_eager_attn_s256_h100 "$BA6 --attn eager" "$BA6"
  L="real_models --model llama --layers 8 --d 1024 --heads 16 --kv-heads 4 --seq 1024 --batch 4 --amp"
  ab llama_eager_attn_h100 "$L --attn eager" "$L"
  BERT="real_models --model bert --layers 12 --d 768 --heads 12 --seq 128 --batch 32"
  ab bert_fp32_h100 "$BERT" "$BERT --amp"
  ab vit_fp32_b32_h100 "real_models --model vit_b_16 --batch 32" "real_models --model vit_b_16 --batch 32 --amp"
  ab convnext_fp32_b32_h100 "real_models --model convnext_tiny --batch 32" \
    "real_models --model convnext_tiny --batch 32 --amp --channels-last"
  R50="real_models --model resnet50 --batch 32 --amp --channels-last"
  ab resnet50_empty_cache_h100 "$R50 --empty-cache" "$R50"
  ab adamw_l12_single_h100 "optimizer_step --impl single --layers 12 --d 512" "optimizer_step --impl fused --layers 12 --d 512"
  ab train_syncs_item_b16_h100 "train_syncs --batch 16" "train_syncs --deferred --batch 16"
  ab gpt2_sdpa_item_h100 "$G2 --sync-item --batch 2 --seq 256" "$G2 --batch 2 --seq 256"
  ab epilogue_bert_eager_h100 "gemm_epilogue --model bert --fix none" "gemm_epilogue --model bert --fix fused"
  ab effnet_graph_h100 "real_models --model efficientnet_b0 --batch 64" \
    "real_models --model efficientnet_b0 --batch 64 --cuda-graph"
  ;;
churn_heldout)  # held out (2026-12-05, after the driver's memory calls were replayed whole): torch.cuda.empty_cache()
  # every step on models no allocator twin ran (HF BERT and Llama, ViT-B/16, MobileNetV3, DenseNet-121) and the
  # synthetic transformer's twin in one process (its two-process twin saved less than its driver calls), scored as
  # they came
  BA6="real_models --model bert --layers 6 --d 768 --heads 12 --seq 256 --batch 16 --amp"
  ab bert_empty_cache_h100 "$BA6 --empty-cache" "$BA6"
  V="real_models --model vit_b_16 --batch 16 --amp"
  ab vit_empty_cache_h100 "$V --empty-cache" "$V"
  L5="real_models --model llama --layers 8 --d 1024 --heads 16 --kv-heads 4 --seq 512 --batch 2 --amp"
  ab llama_empty_cache_h100 "$L5 --empty-cache" "$L5"
  M="real_models --model mobilenet_v3_small --batch 64 --amp"
  ab mobilenet_empty_cache_h100 "$M --empty-cache" "$M"
  D="real_models --model densenet121 --batch 32 --amp --channels-last"
  ab densenet_empty_cache_h100 "$D --empty-cache" "$D"
  ab alloc_churn_h100 "alloc_churn --empty-cache" "alloc_churn"
  ;;
rules_heldout)  # held out (2026-12-05, H100): rules whose one-process twins ran one program each, now on another
  # (pageable copies and the fused epilogue on the MLP, small grids on ResNet-18, the decode loop at width 1024, a
  # per-step loss.item() on ResNet-50), scored as they came
  ab h2d_mlp_pageable_h100 "h2d_copy --model mlp" "h2d_copy --model mlp --pinned"
  ab epilogue_mlp_h100 "gemm_epilogue --model mlp --fix none" "gemm_epilogue --model mlp --fix fused"
  ab small_batch_resnet_h100 "small_batch --model resnet18 --rows 64 --per-call 4 --graph" \
    "small_batch --model resnet18 --rows 64 --per-call 64 --graph"
  DEC="decode --d 1024 --layers 8 --heads 16 --tokens 64"
  ab decode_d1024_h100 "$DEC --cache dynamic" "$DEC --cache static"
  R50="real_models --model resnet50 --batch 32 --amp --channels-last"
  ab resnet50_item_h100 "$R50 --sync-item" "$R50"
  ;;
user7_heldout)  # held out (2026-12-06, session 61): the seventh set of user-written programs
  # (collectors/examples/user_programs.py, self-timed with --time) in one process each, recorded while the rules they
  # exercise (attention, optimizer, allocator, autocast) were reworked on branches that never saw them
  for p in qwen2_eager pythia_adamw_loop bart_empty_cache electra_fp32 mobilenetv2_fp32; do
    ab "${p}_ab" "user_programs --prog $p --time" "user_programs --prog $p --time --fixed"
  done
  ;;
user8_heldout)  # held out (2026-12-07, session 63): the eighth set of user-written programs
  # (collectors/examples/user_programs.py), in one process each, recorded before any rule or model change saw them
  for p in ${USER8:-pythia_eager wide_resnet_fp32 t5_item resnet50_sgd_loop regnet_empty_cache}; do
    ab "${p}_ab" "user_programs --prog $p --time" "user_programs --prog $p --time --fixed"
  done
  ;;
user9_heldout)  # held out (2026-12-07, session 68): the ninth set of user-written programs (serving loops, a GAN, a
  # speech model, a side-stream prefetcher), in one process each, each fixed program also traced alone, recorded
  # before any rule or model change saw them
  for p in ${USER9:-bert_infer_fp32 resnet50_infer_fp32 dcgan_fp32 whisper_eager prefetch_stream}; do
    TRACE_FIXED=1 ab "${p}_ab" "user_programs --prog $p --time" "user_programs --prog $p --time --fixed"
  done
  ;;
user10_heldout)  # held out (2026-12-07, session 69): the tenth set of user-written programs (a UNet, a DLRM-style
  # recommender, a GRUCell loop, a loop that synchronizes to time its steps, a LoRA fine-tune), in one process
  # each, each fixed program also traced alone, recorded before any rule or model change saw them
  for p in ${USER10:-unet_fp32 dlrm_embed gru_cell_loop sync_timing_loop lora_llama}; do
    fix="--fixed"
    [ "$p" = gru_cell_loop ] && fix="--cuda-graph"
    TRACE_FIXED=1 ab "${p}_ab" "user_programs --prog $p --time" "user_programs --prog $p --time $fix"
  done
  ;;
user11_heldout)  # session 69: the eleventh set, to check the tenth set's fixes on programs they were not developed
  # on (the optimizer's default path on models with many parameter tensors, an LSTMCell recurrence)
  for p in ${USER11:-gpt2m_adamw_default llama_bf16_adamw resnet50_sgd_default effnet_adamw_default lstm_cell_loop}; do
    fix="--fixed"
    [ "$p" = lstm_cell_loop ] && fix="--cuda-graph"
    tf=1
    [ "$p" = lstm_cell_loop ] && tf=0  # (a CUDA-graph program cannot be captured under the profiler)
    TRACE_FIXED=$tf ab "${p}_ab" "user_programs --prog $p --time" "user_programs --prog $p --time $fix"
  done
  ;;
user8_sgd)  # session 64: the eighth set's SGD twin again (its first four rounds spread wider than the saving), to
  # `foreach=True` and to `fused=True` (what unfused-optimizer advises), the fused program also traced alone
  R="user_programs --prog resnet50_sgd_loop --time"
  ab resnet50_sgd_foreach_ab "$R" "$R --sgd foreach"
  TRACE_FIXED=1 ab resnet50_sgd_fused_ab "$R" "$R --sgd fused"
  ;;
t5_read)  # session 64: why the eighth set's T5 ran slower without `.item()`: each way of reading the loss (item,
  # detach-summed, summed then synchronize()) against not reading it at all, in one process, not traced
  for r in item detach sync; do
    run "t5_read_$r" $PY -m collectors.examples.ab_twin --rounds "${T5_ROUNDS:-4}" \
      "user_programs --prog t5_item --time --read $r" "user_programs --prog t5_item --time --read none"
  done
  ;;
pythia_fixes)  # session 64: the two larger fixes the report prices on the eighth set's GPT-NeoX with SDPA (its fixed
  # program): elementwise-chain's (the rotary chains; torch.compile) and launch-bound's (the step in one CUDA graph)
  P="user_programs --prog pythia_eager --time --fixed"
  ROUNDS_=${ROUNDS:-6}
  AB="$PY -m collectors.examples.ab_twin --rounds ${COMPILE_ROUNDS:-2}" ab pythia_sdpa_compile_ab "$P" "$P --compile"
  AB="$PY -m collectors.examples.ab_twin --rounds $ROUNDS_" ab pythia_sdpa_graph_ab "$P" "$P --cuda-graph"
  ;;
user7_graph)  # launch-bound (TV101) on the seventh set's fixed programs: each fixed program against the same step
  # captured in one CUDA graph (user_programs --cuda-graph), in one process
  for p in mobilenetv2_fp32 electra_fp32 bart_empty_cache; do
    ab "${p}_fixed_graph_ab" "user_programs --prog $p --time --fixed" "user_programs --prog $p --time --fixed --cuda-graph"
  done
  ;;
churn_steady)  # the allocator twins again with rounds in steady state (2026-12-06, session 61): a loop that calls
  # empty_cache() every step takes 3-5 steps of each fresh run to settle (ResNet-50's traced run: 63 -> 44 ms), and
  # the rounds above timed 11 steps of 12; here 40 steps a run, the first 11 left out
  ABS="$PY -m collectors.examples.ab_twin --rounds ${ROUNDS:-4} --steps 40 --skip 10"
  R50="real_models --model resnet50 --batch 32 --amp --channels-last"
  BA6="real_models --model bert --layers 6 --d 768 --heads 12 --seq 256 --batch 16 --amp"
  M="real_models --model mobilenet_v3_small --batch 64 --amp"
  for t in "resnet50:$R50" "bert:$BA6" "mobilenet:$M" "alloc_churn:alloc_churn" "gpt2_sdpa:$G2"; do
    n=${t%%:*}; a=${t#*:}
    run "${n}_empty_cache_steady" $C --name "${n}_empty_cache_steady" -- $ABS "$a --empty-cache" "$a"
  done
  ;;
h100_fixed)  # the fixed programs of eight H100 twins traced alone, each in a process of its own (<twin>_fixed/; what
  # TRACE_FIXED=1 records beside a twin): not for their timing, to check a fix's transform against the program it
  # predicts
  F="$PY -m collectors.examples.real_models"
  run gpt2_fp32_h100_fixed $C --name gpt2_fp32_h100_fixed -- $F --model gpt2 --attn sdpa --amp
  run vit_fp32_b16_h100_fixed $C --name vit_fp32_b16_h100_fixed -- $F --model vit_b_16 --batch 16 --amp
  run vit_fp32_b32_h100_fixed $C --name vit_fp32_b32_h100_fixed -- $F --model vit_b_16 --batch 32 --amp
  run convnext_fp32_b32_h100_fixed $C --name convnext_fp32_b32_h100_fixed -- $F --model convnext_tiny --batch 32 --amp \
    --channels-last
  run bert_eager_attn_s512_h100_fixed $C --name bert_eager_attn_s512_h100_fixed -- $F --model bert --layers 12 --d 768 \
    --heads 12 --amp --vocab 30528 --seq 512 --batch 16
  run bert_eager_attn_s256_h100_fixed $C --name bert_eager_attn_s256_h100_fixed -- $F --model bert --layers 6 --d 768 \
    --heads 12 --seq 256 --batch 16 --amp
  run llama_eager_attn_h100_fixed $C --name llama_eager_attn_h100_fixed -- $F --model llama --layers 8 --d 1024 \
    --heads 16 --kv-heads 4 --seq 1024 --batch 4 --amp
  run resnet50_empty_cache_h100_fixed $C --name resnet50_empty_cache_h100_fixed -- $F --model resnet50 --batch 32 --amp \
    --channels-last
  ;;
compile_model)  # session 65: what a compiled graph costs the host per kernel it keeps (the calibration of
  # elementwise-chain's whole-model transform, BLOCKS lines), then two models compiled that no fit has seen
  mkdir -p "$OUTD/ab_traced"
  $PY -m collectors.examples.compile_call_cost --blocks norm,mm --calls ${BLOCK_CALLS:-400} \
    | grep "^BLOCKS" > "$OUTD/ab_traced/compile_blocks_h100.ndjson"
  for p in electra_fp32 qwen2_eager; do
    AB="$PY -m collectors.examples.ab_twin --rounds ${COMPILE_ROUNDS:-2}" ab "${p}_compile_ab" \
      "user_programs --prog $p --time --fixed" "user_programs --prog $p --time --fixed --compile"
  done
  ;;
compile_host)  # session 65: torch.compile on real models at sizes where the host decides the step (batch 1-2,
  # 64 tokens): what the compiled graphs cost the host, with no device time to hide it (TRACE_FIXED=1: the compiled
  # program traced alone too, its kernels counted)
  for spec in "gpt2_tiny_compile_ab|real_models --model gpt2 --attn sdpa --amp --batch 1 --seq 64 --vocab 50304" \
              "bert_tiny_compile_ab|real_models --model bert --layers 12 --d 768 --heads 12 --seq 64 --batch 2 --amp --vocab 30528" \
              "llama_tiny_compile_ab|real_models --model llama --layers 4 --d 1024 --heads 16 --kv-heads 4 --seq 64 --batch 1 --amp"; do
    name=${spec%%|*}; prog=${spec#*|}
    AB="$PY -m collectors.examples.ab_twin --rounds ${COMPILE_ROUNDS:-3}" ab "$name" "$prog --steps 30" "$prog --compile --steps 30"
  done
  ;;
compile_call)  # the compiled call's own host cost: elementwise chains small enough that it decides the step
  run elementwise_8mib_eager $C --name elementwise_8mib_eager -- $AB "elementwise_chain --mib 8" \
    "elementwise_chain --mib 8 --compile"
  run elementwise_128mib_eager $C --name elementwise_128mib_eager -- $AB "elementwise_chain --mib 128" \
    "elementwise_chain --mib 128 --compile"
  ;;
item)  # the host-sync twin again, more rounds (its first recording's four rounds spread -0.7 to 5.0 ms)
  run gpt2_sdpa_item $C --name gpt2_sdpa_item -- $AB "$G2 --sync-item --batch 2 --seq 256" "$G2 --batch 2 --seq 256"
  ;;
esac
done
