#!/usr/bin/env bash
# Record sample_traces/collected2/: eager/fixed twins with measured unprofiled step times (issue 11 item 3),
# a profiler-overhead calibration set (issue 10 item 4) and labelled cases the older sets lack (issue 10
# item 8). Every run is `traceview collect` with the defaults of record_samples.sh (wait 5, warmup 1,
# active 3, --shapes), so each manifest.json holds unprofiled (wait steps) and profiled step times.
# Usage (repo root, on a CUDA machine): collectors/examples/record_collected2.sh OUT_DIR [GROUP...]
#   GROUP: twins | calib | labelled | syncs_gpu (default: all four). Runs land in OUT_DIR/collected2/<run>/.
# SMOKE=1 shrinks every workload so the script can be checked on a CPU-only machine.
set -u
OUTD=${1:-/tmp/tv_collected2}
shift || true
GROUPS_=${*:-twins calib labelled syncs_gpu}
PY=${PY:-python3}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'

if [ "${SMOKE:-0}" = 1 ]; then
  GEMM32="--n 256"; OPT="--layers 4 --d 32 --batch 8"; BRANCH="--rows 64 --cols 64 --calls 1"
  SHAPES="--d 64 --batch 16 --calls 1"; EW="--mib 8"; N1024="--n 128"; N256="--n 96"; GEMM_S="--n 128"
  GEMM_L="--n 256"; GPT="--layers 1 --d 64 --seq 32 --vocab 256"; B_S="--batch 2"; B_L="--batch 4"
  SYNCS="--layers 1 --d 64 --seq 32 --vocab 256 --batch 2"; CNN="--batch 4 --size 64 --crop 48"
  SYNCS_GPU="--layers 1 --d 64 --heads 2 --seq 32 --vocab 256"; B_GPU_S="--batch 2"; B_GPU_L="--batch 4"
else
  GEMM32=""; OPT=""; BRANCH=""; SHAPES=""; EW=""; N1024="--n 1024"; N256="--n 256"; GEMM_S="--n 2048"
  GEMM_L="--n 4096"; GPT=""; B_S="--batch 8"; B_L="--batch 32"; SYNCS=""; CNN=""
  SYNCS_GPU="--layers 2 --d 1024 --heads 16"; B_GPU_S="--batch 32"; B_GPU_L="--batch 64"
fi
C="$PY -m collectors collect --out $OUTD/collected2 --wait 5 --warmup 1 --active 3 --shapes"
E="$PY -m collectors.examples"
. "$(dirname "$0")/_run.sh"

for group in $GROUPS_; do
case $group in
twins)  # --- eager/fixed twins: the fix's saving = the difference of unprofiled step times -------------
  run fp32_gemm_highest $C --name fp32_gemm_highest -- $E.fp32_gemm --precision highest $GEMM32
  run fp32_gemm_tf32 $C --name fp32_gemm_tf32 -- $E.fp32_gemm --precision high $GEMM32
  run adamw_single_tensor $C --name adamw_single_tensor -- $E.optimizer_step --impl single $OPT
  run adamw_foreach $C --name adamw_foreach -- $E.optimizer_step --impl foreach $OPT
  run adamw_fused $C --name adamw_fused -- $E.optimizer_step --impl fused $OPT
  run compile_graph_break $C --name compile_graph_break -- $E.compile_branch --mode break $BRANCH
  run compile_no_break $C --name compile_no_break -- $E.compile_branch --mode where $BRANCH
  run compile_recompile_every_step $C --name compile_recompile_every_step -- \
    $E.compile_shapes --mode recompile --steps 10 $SHAPES
  run compile_stable_shape $C --name compile_stable_shape -- $E.compile_shapes --mode stable --steps 10 $SHAPES
  run elementwise_chain_eager $C --name elementwise_chain_eager -- $E.elementwise_chain $EW
  run elementwise_chain_compiled $C --name elementwise_chain_compiled -- $E.elementwise_chain --compile $EW
  run tiny_ops_n64_eager $C --name tiny_ops_n64_eager -- $E.tiny_ops --n 64 --mode eager
  run tiny_ops_n64_cudagraph $C --name tiny_ops_n64_cudagraph -- $E.tiny_ops --n 64 --mode graph
  run tiny_ops_n64_reduce_overhead $C --name tiny_ops_n64_reduce_overhead -- \
    $E.tiny_ops --n 64 --mode reduce-overhead
  run fragmented_eager $C --name fragmented_eager -- $E.tiny_ops $N1024 --iters 8 --mode eager
  run fragmented_compiled $C --name fragmented_compiled -- $E.tiny_ops $N1024 --iters 8 --mode compile
  ;;
calib)  # --- profiler-overhead calibration: sizes x options (tiny_ops_n64_eager above is the smallest) ----
  run tiny_ops_n256_eager $C --name tiny_ops_n256_eager -- $E.tiny_ops $N256 --mode eager
  run tiny_ops_n1024_eager $C --name tiny_ops_n1024_eager -- $E.tiny_ops $N1024 --mode eager
  run tiny_ops_n64_eager_stack $C --stack --name tiny_ops_n64_eager_stack -- $E.tiny_ops --n 64 --mode eager
  run gemm_bf16_n2048 $C --name gemm_bf16_n2048 -- $E.gemm $GEMM_S
  run gemm_bf16_n4096 $C --name gemm_bf16_n4096 -- $E.gemm $GEMM_L
  run gemm_bf16_n2048_stack $C --stack --name gemm_bf16_n2048_stack -- $E.gemm $GEMM_S
  run tinygpt_b8 $C --name tinygpt_b8 -- $E.tinygpt $GPT $B_S
  run tinygpt_b32 $C --name tinygpt_b32 -- $E.tinygpt $GPT $B_L
  run tinygpt_b8_stack $C --stack --name tinygpt_b8_stack -- $E.tinygpt $GPT $B_S
  run tinygpt_b32_stack $C --stack --name tinygpt_b32_stack -- $E.tinygpt $GPT $B_L
  ;;
labelled)  # --- cases the older sets lack: per-step .item() syncs in a real loop, a CNN fed by a slow pipeline
  run train_syncs_item $C --name train_syncs_item -- $E.train_syncs $SYNCS
  run train_syncs_deferred $C --name train_syncs_deferred -- $E.train_syncs --deferred $SYNCS
  run cnn_input_nw0 $C --name cnn_input_nw0 -- $E.cnn_input --workers 0 $CNN
  run cnn_input_nw8 $C --name cnn_input_nw8 -- $E.cnn_input --workers 8 $CNN
  ;;
syncs_gpu)  # --- the same .item() syncs plus per-parameter gradient-norm logging on a GPU-bound model (2 sizes)
  G="$E.train_syncs --log-grad-norms $SYNCS_GPU"
  run train_gradnorm_item_b64 $C --name train_gradnorm_item_b64 -- $G $B_GPU_L
  run train_gradnorm_deferred_b64 $C --name train_gradnorm_deferred_b64 -- $G --deferred $B_GPU_L
  run train_gradnorm_item_b32 $C --name train_gradnorm_item_b32 -- $G $B_GPU_S
  run train_gradnorm_deferred_b32 $C --name train_gradnorm_deferred_b32 -- $G --deferred $B_GPU_S
  ;;
*) echo "unknown group $group (twins | calib | labelled | syncs_gpu)"; exit 2 ;;
esac
done
echo "=== done"
