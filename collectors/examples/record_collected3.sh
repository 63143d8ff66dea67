#!/usr/bin/env bash
# Record sample_traces/collected3/: runs never used to fit anything — held-out sizes and options for the
# replay model's profiler-overhead estimate (issue 25: with_stack, --modules, compiled, CUDA graph, tiny ops)
# and eager/fixed twins on real-library models (Hugging Face GPT-2, torchvision ResNet-18) and at other sizes
# than collected2, each twin's saving measured by the collector's unprofiled CUDA-event step times.
# Usage (repo root, on a CUDA machine): collectors/examples/record_collected3.sh OUT_DIR [GROUP...]
#   GROUP: heldout | real | twins (default: all three). Runs land in OUT_DIR/collected3/<run>/.
set -u
OUTD=${1:-/tmp/tv_collected3}
shift || true
GROUPS_=${*:-heldout real twins}
PY=${PY:-python3}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
C="$PY -m collectors collect --out $OUTD/collected3 --wait 5 --warmup 1 --active 3 --shapes"
E="$PY -m collectors.examples"
R="$E.real_models"
. "$(dirname "$0")/_run.sh"

for group in $GROUPS_; do
case $group in
heldout)  # --- profiler-overhead evaluation: sizes and options collected2's calibration set does not have ---
  run tinygpt_b16 $C --name tinygpt_b16 -- $E.tinygpt --batch 16
  run tinygpt_b16_stack $C --stack --name tinygpt_b16_stack -- $E.tinygpt --batch 16
  run tinygpt_b16_modules $C --modules --name tinygpt_b16_modules -- $E.tinygpt --batch 16
  run tiny_ops_n128_eager $C --name tiny_ops_n128_eager -- $E.tiny_ops --n 128 --mode eager
  run tiny_ops_n128_eager_stack $C --stack --name tiny_ops_n128_eager_stack -- $E.tiny_ops --n 128 --mode eager
  run tiny_ops_n128_cudagraph $C --name tiny_ops_n128_cudagraph -- $E.tiny_ops --n 128 --mode graph
  run tiny_ops_n128_reduce_overhead $C --name tiny_ops_n128_reduce_overhead -- \
    $E.tiny_ops --n 128 --mode reduce-overhead
  run tiny_ops_n512_compile $C --name tiny_ops_n512_compile -- $E.tiny_ops --n 512 --mode compile
  run gemm_bf16_n3072 $C --name gemm_bf16_n3072 -- $E.gemm --n 3072
  ;;
real)  # --- real-library models: one mistake per twin ------------------------------------------------------
  run gpt2_eager_attn $C --name gpt2_eager_attn -- $R --model gpt2 --attn eager --amp
  run gpt2_sdpa $C --name gpt2_sdpa -- $R --model gpt2 --attn sdpa --amp
  run gpt2_sdpa_stack $C --stack --name gpt2_sdpa_stack -- $R --model gpt2 --attn sdpa --amp
  run gpt2_fp32 $C --name gpt2_fp32 -- $R --model gpt2 --attn sdpa
  run gpt2_sdpa_fused $C --name gpt2_sdpa_fused -- $R --model gpt2 --attn sdpa --amp --optim fused
  run gpt2_sdpa_single $C --name gpt2_sdpa_single -- $R --model gpt2 --attn sdpa --amp --optim single
  run gpt2_sdpa_item $C --name gpt2_sdpa_item -- $R --model gpt2 --attn sdpa --amp --sync-item --batch 2 --seq 256
  run gpt2_sdpa_noitem $C --name gpt2_sdpa_noitem -- $R --model gpt2 --attn sdpa --amp --batch 2 --seq 256
  run gpt2_sdpa_compiled $C --name gpt2_sdpa_compiled -- $R --model gpt2 --attn sdpa --amp --compile
  run resnet18_fp32 $C --name resnet18_fp32 -- $R --model resnet --batch 64
  run resnet18_bf16_cl $C --name resnet18_bf16_cl -- $R --model resnet --batch 64 --amp --channels-last
  ;;
twins)  # --- collected2's synthetic twins at other sizes -----------------------------------------------------
  run fp32_gemm_n4096_highest $C --name fp32_gemm_n4096_highest -- $E.fp32_gemm --n 4096 --gemms 4 --precision highest
  run fp32_gemm_n4096_tf32 $C --name fp32_gemm_n4096_tf32 -- $E.fp32_gemm --n 4096 --gemms 4 --precision high
  run adamw_l12_single $C --name adamw_l12_single -- $E.optimizer_step --impl single --layers 12 --d 512
  run adamw_l12_fused $C --name adamw_l12_fused -- $E.optimizer_step --impl fused --layers 12 --d 512
  run elementwise_32mib_eager $C --name elementwise_32mib_eager -- $E.elementwise_chain --mib 32
  run elementwise_32mib_compiled $C --name elementwise_32mib_compiled -- $E.elementwise_chain --mib 32 --compile
  run compile_break_r4096 $C --name compile_break_r4096 -- $E.compile_branch --mode break --rows 4096
  run compile_where_r4096 $C --name compile_where_r4096 -- $E.compile_branch --mode where --rows 4096
  run train_syncs_item_b16 $C --name train_syncs_item_b16 -- $E.train_syncs --batch 16
  run train_syncs_deferred_b16 $C --name train_syncs_deferred_b16 -- $E.train_syncs --deferred --batch 16
  run cnn_input_nw2 $C --name cnn_input_nw2 -- $E.cnn_input --workers 2
  run cnn_input_nw8b $C --name cnn_input_nw8b -- $E.cnn_input --workers 8
  ;;
*) echo "unknown group $group (heldout | real | twins)"; exit 2 ;;
esac
done
echo "=== done"
