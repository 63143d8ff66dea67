#!/usr/bin/env bash
# Record sample_traces/collected4/: problem/fixed twins for the real-world rules (issue 27): attention that
# materialises its scores, FP32 convolutions, kernels too small for the GPU, batch-1 decode, allocator churn,
# too few DataLoader workers, DDP accumulation without no_sync. Each twin: a small synthetic workload and a
# real-library model, the saving measured by the collector's unprofiled CUDA-event step times.
# Usage (repo root, on a CUDA machine): collectors/examples/record_collected4.sh OUT_DIR [GROUP...]
#   GROUP: compute | host (default: both). Runs land in OUT_DIR/collected4/<run>/.
set -u
OUTD=${1:-/tmp/tv_collected4}
shift || true
GROUPS_=${*:-compute host}
PY=${PY:-python3}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
C="$PY -m collectors collect --out $OUTD/collected4 --wait ${WAIT:-10} --warmup 1 --active 3 --shapes"
# DataLoader runs: 24 timed wait steps, so the median is the steady state after the prefetch buffer drained
CW="$PY -m collectors collect --out $OUTD/collected4 --wait 24 --warmup 1 --active 3 --shapes"
E="$PY -m collectors.examples"
R="$E.real_models"
TR="torchrun --standalone"
. "$(dirname "$0")/_run.sh"

for group in $GROUPS_; do
case $group in
compute)
  run attn_eager_s2048 $C --name attn_eager_s2048 -- $E.attention --impl eager --seq 2048 --steps 16
  run attn_math_s2048 $C --name attn_math_s2048 -- $E.attention --impl math --seq 2048 --steps 16
  run attn_flash_s2048 $C --name attn_flash_s2048 -- $E.attention --impl flash --seq 2048 --steps 16
  run gpt2_eager_attn_s1024 $C --name gpt2_eager_attn_s1024 -- $R --model gpt2 --attn eager --amp --seq 1024 --batch 4 --steps 16
  run gpt2_sdpa_s1024 $C --name gpt2_sdpa_s1024 -- $R --model gpt2 --attn sdpa --amp --seq 1024 --batch 4 --steps 16
  run conv_fp32 $C --name conv_fp32 -- $E.conv_net --precision fp32 --steps 16
  run conv_bf16_cl $C --name conv_bf16_cl -- $E.conv_net --precision bf16 --channels-last --steps 16
  run resnet50_fp32 $C --name resnet50_fp32 -- $R --model resnet50 --batch 32 --steps 16
  run resnet50_bf16_cl $C --name resnet50_bf16_cl -- $R --model resnet50 --batch 32 --amp --channels-last --steps 16
  run small_batch_c4_graph $C --name small_batch_c4_graph -- $E.small_batch --rows 128 --per-call 4 --graph --steps 16
  run small_batch_c128_graph $C --name small_batch_c128_graph -- $E.small_batch --rows 128 --per-call 128 --graph --steps 16
  run decode_dynamic $C --name decode_dynamic -- $E.decode --cache dynamic --steps 16
  run decode_static $C --name decode_static -- $E.decode --cache static --steps 16
  run hf_generate_dynamic $C --name hf_generate_dynamic -- $E.hf_generate --cache dynamic --layers 6 --tokens 32 --steps 16
  RUN_TIMEOUT=300 run hf_generate_static $C --name hf_generate_static -- $E.hf_generate --cache static --layers 6 --tokens 32 --steps 16
  ;;
host)
  run alloc_churn_empty_cache $C --name alloc_churn_empty_cache -- $E.alloc_churn --empty-cache --steps 16
  run alloc_churn $C --name alloc_churn -- $E.alloc_churn --steps 16
  run gpt2_sdpa_empty_cache $C --name gpt2_sdpa_empty_cache -- $R --model gpt2 --attn sdpa --amp --empty-cache --steps 16
  run gpt2_sdpa_ref $C --name gpt2_sdpa_ref -- $R --model gpt2 --attn sdpa --amp --steps 16
  run input_workers_nw2 $CW --name input_workers_nw2 -- $E.input_workers --workers 2
  run input_workers_nw10 $CW --name input_workers_nw10 -- $E.input_workers --workers 10
  run cnn_input_nw3 $CW --name cnn_input_nw3 -- $E.cnn_input --workers 3 --steps 32
  run cnn_input_nw12 $CW --name cnn_input_nw12 -- $E.cnn_input --workers 12 --steps 32
  run ddp_accum4_nccl $C --name ddp_accum4_nccl -- $TR --nproc-per-node 1 -m collectors.examples.ddp_accum --accum 4 --steps 16
  run ddp_accum4_nccl_nosync $C --name ddp_accum4_nccl_nosync -- $TR --nproc-per-node 1 -m collectors.examples.ddp_accum --accum 4 --no-sync --steps 16
  run ddp_accum4_gloo2 $C --name ddp_accum4_gloo2 -- $TR --nproc-per-node 2 -m collectors.examples.ddp_accum --accum 4 --backend gloo --dim 512 --steps 16
  run ddp_accum4_gloo2_nosync $C --name ddp_accum4_gloo2_nosync -- $TR --nproc-per-node 2 -m collectors.examples.ddp_accum --accum 4 --backend gloo --dim 512 --no-sync --steps 16
  ;;
*) echo "unknown group $group (compute | host)"; exit 2 ;;
esac
done
echo "=== done"
