#!/usr/bin/env bash
# CPU-only optimizer twins (no GPU: the host's own CPU, torch's CPU build), each in ONE process as record_ab_traced.sh
# runs them: collectors/examples/ab_twin.py under `traceview collect`, the problem traced once, then problem and fix
# timed in ABBA rounds (wall clock: no CUDA events on CPU). One OMP thread, so a busy 2-core box's other work moves
# the rounds less; run it on a quiet machine. The twins for `cpu-op-overhead`'s fused-optimizer fix:
#   cpu_gpt2_single_fused    HF GPT-2 (2 layers, width 128): single-tensor AdamW -> AdamW(fused=True), 10 rounds
#   cpu_gpt2_single_foreach  the same -> AdamW(foreach=True): a negative control (foreach on CPU saves ~nothing)
#   cpu_adamw_single_fused   a 24-layer MLP (width 128): single-tensor AdamW -> AdamW(fused=True)
# group `heldout` (recorded after the model was set, scored as they came): other sizes of both
#   cpu_gpt2w256_single_fused  HF GPT-2 (4 layers, width 256, 2000 tokens) -> fused=True
#   cpu_adamw_d512_single_fused  a 12-layer MLP of width 512 -> fused=True
# Usage: collectors/examples/record_cpu_twins.sh OUT_DIR [dev] [heldout]   (runs land in OUT_DIR/<name>/)
set -u
OUTD=${1:-/tmp/tv_cpu_twins}
shift || true
GROUPS_=${*:-dev}
PY=${PY:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} CUDA_VISIBLE_DEVICES=
. "$(dirname "$0")/_run.sh"
C="$PY -m collectors collect --out $OUTD --wait 8 --warmup 1 --active 3 --shapes"
G="real_models --model gpt2 --layers 2 --d 128 --heads 4 --seq 64 --batch 2 --vocab 1000 --steps 40"
A="optimizer_step --layers 24 --d 128 --batch 32 --steps 40"
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
AB="$PY -m collectors.examples.ab_twin"
for group in $GROUPS_; do
case $group in
dev)
  run cpu_gpt2_single_fused $C --name cpu_gpt2_single_fused -- $AB --rounds 10 "$G --optim single" "$G --optim fused"
  run cpu_gpt2_single_foreach $C --name cpu_gpt2_single_foreach -- $AB --rounds 6 "$G --optim single" \
    "$G --optim foreach"
  run cpu_adamw_single_fused $C --name cpu_adamw_single_fused -- $AB --rounds 6 "$A --impl single" "$A --impl fused"
  ;;
heldout)
  G4="real_models --model gpt2 --layers 4 --d 256 --heads 4 --seq 64 --batch 2 --vocab 2000 --steps 30"
  run cpu_gpt2w256_single_fused $C --name cpu_gpt2w256_single_fused -- $AB --rounds 8 "$G4 --optim single" \
    "$G4 --optim fused"
  A5="optimizer_step --layers 12 --d 512 --batch 32 --steps 30"
  run cpu_adamw_d512_single_fused $C --name cpu_adamw_d512_single_fused -- $AB --rounds 8 "$A5 --impl single" \
    "$A5 --impl fused"
  ;;
*) echo "unknown group $group"; exit 2 ;;
esac
done
