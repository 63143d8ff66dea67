#!/usr/bin/env bash
# Record sample_traces/collected5/: second and real-model twins for the rules that had fewer than two or no
# real-library twin (issue 25): GEMM epilogue (synthetic MLP, HF BERT), pageable copies (synthetic, torchvision
# ResNet-18 inputs), recompiles / graph breaks / launch-bound steps on HF GPT-2 under torch.compile, small grids
# on torchvision ResNet-18, a second input-bound twin, CPU-only cpu-op-overhead twins; plus held-out runs for
# the profiler-cost model (with_stack on a real model and on a tiny-op loop, compiled, CUDA-graph replays).
# Each twin's saving is measured by the collector's unprofiled step times (CUDA events; wall clock on CPU).
# Usage (repo root, on a CUDA machine): collectors/examples/record_collected5.sh OUT_DIR [GROUP...]
#   GROUP: eager | compile | cpu (default: all three, about 9 min on an H200 host). Runs land in
#   OUT_DIR/collected5/<run>/.
set -u
OUTD=${1:-/tmp/tv_collected5}
shift || true
GROUPS_=${*:-eager compile cpu}
PY=${PY:-python3}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
C="$PY -m collectors collect --out $OUTD/collected5 --wait ${WAIT:-10} --warmup 1 --active 3 --shapes"
# DataLoader runs: 24 timed wait steps, the steady state is the mean of the second half
CW="$PY -m collectors collect --out $OUTD/collected5 --wait 24 --warmup 1 --active 3 --shapes"
# recompiling runs: every step compiles, so fewer of them (5 timed wait steps, 10 in all)
CR="$PY -m collectors collect --out $OUTD/collected5 --wait 5 --warmup 1 --active 3 --shapes"
# CPU-only runs: the GPU hidden, steps timed by the wall clock
CPU="env CUDA_VISIBLE_DEVICES= $C"  # not CC: inductor reads CC as the C compiler
E="$PY -m collectors.examples"
R="$E.real_models"
G="$E.hf_compile"
. "$(dirname "$0")/_run.sh"

for group in $GROUPS_; do
case $group in
eager)  # --- GPU twins without compiling, and the eager held-out runs ---------------------------------------
  run epilogue_mlp_eager $C --name epilogue_mlp_eager -- $E.gemm_epilogue --model mlp --fix none
  run epilogue_mlp_fused $C --name epilogue_mlp_fused -- $E.gemm_epilogue --model mlp --fix fused
  run epilogue_bert_eager $C --name epilogue_bert_eager -- $E.gemm_epilogue --model bert --fix none
  run epilogue_bert_fused $C --name epilogue_bert_fused -- $E.gemm_epilogue --model bert --fix fused
  run h2d_mlp_pageable $C --name h2d_mlp_pageable -- $E.h2d_copy --model mlp
  run h2d_mlp_pinned $C --name h2d_mlp_pinned -- $E.h2d_copy --model mlp --pinned
  run h2d_resnet18_pageable $C --name h2d_resnet18_pageable -- $E.h2d_copy --model resnet18
  run h2d_resnet18_pinned $C --name h2d_resnet18_pinned -- $E.h2d_copy --model resnet18 --pinned
  run resnet18_serve_c1_graph $C --name resnet18_serve_c1_graph -- $E.small_batch --model resnet18 --rows 32 --per-call 1 --graph --steps 16
  run resnet18_serve_c32_graph $C --name resnet18_serve_c32_graph -- $E.small_batch --model resnet18 --rows 32 --per-call 32 --graph --steps 16
  run gpt2_b1_eager $C --name gpt2_b1_eager -- $G --mode eager --batch 1 --seq 32 --layers 6
  run gpt2_b1_eager_stack $C --stack --name gpt2_b1_eager_stack -- $G --mode eager --batch 1 --seq 32 --layers 6
  run tiny_ops_n32_eager_stack $C --stack --name tiny_ops_n32_eager_stack -- $E.tiny_ops --n 32 --iters 100 --mode eager --steps 16
  run input_workers_nw0 $CW --name input_workers_nw0 -- $E.input_workers --workers 0
  run input_workers_nw10 $CW --name input_workers_nw10 -- $E.input_workers --workers 10
  ;;
compile)  # --- torch.compile twins (HF GPT-2) and compiled / CUDA-graph held-out runs --------------------------
  RUN_TIMEOUT=240 run gpt2c_recompile $CR --name gpt2c_recompile -- $G --mode compile --shapes vary --layers 2 --steps 10
  RUN_TIMEOUT=240 run gpt2c_mark_dynamic $CR --name gpt2c_mark_dynamic -- $G --mode compile --shapes dynamic --layers 2 --steps 10
  RUN_TIMEOUT=240 run gpt2c_hook_item $C --name gpt2c_hook_item -- $G --mode compile --hook item --layers 4
  RUN_TIMEOUT=240 run gpt2c_hook_tensor $C --name gpt2c_hook_tensor -- $G --mode compile --hook tensor --layers 4
  RUN_TIMEOUT=240 run gpt2_b1_reduce_overhead $C --name gpt2_b1_reduce_overhead -- $G --mode reduce-overhead --batch 1 --seq 32 --layers 6
  RUN_TIMEOUT=240 run epilogue_mlp_compiled $C --name epilogue_mlp_compiled -- $E.gemm_epilogue --model mlp --fix compile
  ;;
cpu)  # --- CPU-only twins for cpu-op-overhead: per-parameter optimizer ops vs foreach ---------------------------
  run cpu_adamw_single $CPU --name cpu_adamw_single -- $E.optimizer_step --impl single --layers 24 --d 128 --batch 32 --steps 16
  run cpu_adamw_foreach $CPU --name cpu_adamw_foreach -- $E.optimizer_step --impl foreach --layers 24 --d 128 --batch 32 --steps 16
  run cpu_gpt2_single $CPU --name cpu_gpt2_single -- $R --model gpt2 --layers 2 --d 128 --heads 4 --seq 64 --batch 2 --vocab 1000 --optim single --steps 16
  run cpu_gpt2_foreach $CPU --name cpu_gpt2_foreach -- $R --model gpt2 --layers 2 --d 128 --heads 4 --seq 64 --batch 2 --vocab 1000 --optim foreach --steps 16
  ;;
*) echo "unknown group $group (eager | compile | cpu)"; exit 2 ;;
esac
done
echo "=== done"
