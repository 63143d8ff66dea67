#!/usr/bin/env bash
# Record traceview's GPU sample traces and the collector-overhead numbers (docs/collect.md).
# Usage (repo root, on a CUDA machine): collectors/examples/record_samples.sh OUT_DIR
# SMOKE=1 shrinks every workload so the script can be checked on a CPU-only machine.
set -u
OUTD=${1:-/tmp/tv_samples}
PY=${PY:-python3}
TORCHRUN=${TORCHRUN:-torchrun}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'

if [ "${SMOKE:-0}" = 1 ]; then
  SMALL_EW="--mib 8"; SMALL_GEMM="--n 256"; SMALL_GPT="--layers 1 --d 64 --seq 32 --batch 2 --vocab 256"
  GPT2="--layers 2 --d 64 --seq 32 --batch 2 --vocab 256"; BURN="--burn-ms 10"; OH_STEPS=34
else
  SMALL_EW=""; SMALL_GEMM=""; SMALL_GPT=""; GPT2="--gpt2 --bf16"; BURN=""; OH_STEPS=60
fi
C="$PY -m collectors collect --out $OUTD/samples --wait 5 --warmup 1 --active 3 --shapes"
. "$(dirname "$0")/_run.sh"

# --- sample traces (3 active steps each) --------------------------------------------------------
run launch_bound_tiny_ops $C --name launch_bound_tiny_ops -- $PY -m collectors.examples.launch_bound
run sync_item_nonzero_cpu $C --stack --name sync_item_nonzero_cpu -- $PY -m collectors.examples.sync_bound
run elementwise_chain_eager $C --name elementwise_chain_eager -- $PY -m collectors.examples.elementwise_chain $SMALL_EW
run elementwise_chain_compiled $C --name elementwise_chain_compiled -- \
  $PY -m collectors.examples.elementwise_chain --compile $SMALL_EW
run compute_bound_gemm $C --name compute_bound_gemm -- $PY -m collectors.examples.gemm $SMALL_GEMM
run train_tinygpt_modules $C --modules --stack --memory --name train_tinygpt_modules -- \
  $PY -m collectors.examples.tinygpt $SMALL_GPT
run train_tinygpt_input_bound $C --name train_tinygpt_input_bound -- \
  $PY -m collectors.examples.tinygpt --input-bound $SMALL_GPT $BURN
run nccl_world1_allreduce $C --name nccl_world1_allreduce -- \
  $TORCHRUN --nproc-per-node 1 --standalone -m collectors.examples.allreduce
(cd "$OUTD" && tar czf samples.tar.gz samples)

# --- collector overhead: the same step with and without the collector ----------------------------
# Steps 1-24 run unprofiled under the collector (wait 25), 27-31 are recorded, 32+ run after the capture.
O="$PY -m collectors collect --out $OUTD/overhead --wait 25 --warmup 2 --active 5"
for model in gpt2 tinygpt; do
  if [ $model = gpt2 ]; then M="$GPT2"; else M="$SMALL_GPT"; fi
  run plain_$model $PY -m collectors.examples.tinygpt $M --steps $OH_STEPS
  run collect_${model} $O --name ${model}_default -- $PY -m collectors.examples.tinygpt $M --steps $OH_STEPS
  run collect_${model}_stack $O --stack --name ${model}_stack -- $PY -m collectors.examples.tinygpt $M --steps $OH_STEPS
  run collect_${model}_modules $O --modules --name ${model}_modules -- $PY -m collectors.examples.tinygpt $M --steps $OH_STEPS
  run collect_${model}_all $O --stack --modules --memory --shapes --name ${model}_all -- \
    $PY -m collectors.examples.tinygpt $M --steps $OH_STEPS
  run plain_${model}_again $PY -m collectors.examples.tinygpt $M --steps $OH_STEPS
done
(cd "$OUTD" && find overhead -name 'manifest.json' | tar czf overhead.tar.gz -T -)
echo "=== done"
