#!/usr/bin/env bash
# Record traceview's multi-GPU NCCL sample traces (sample_traces/nccl_h200x2/): DDP and FSDP, balanced and with
# rank 1 slowed by a known CPU delay before backward (100 ms; DDP also 50 ms), each under torchrun with the
# collector; and two balanced runs that never read the loss back (no per-step host sync; not committed).
# Usage (repo root, on a machine with >= 2 GPUs): collectors/examples/record_multigpu.sh OUT_DIR [GROUP]
# GROUP `causes` records instead the job answer's ground truth for causes other than a CPU delay (issue 26): rank 1
# late by per-block host syncs, by its GEMMs in FP32, by pageable copies or by extra kernels, and a
# communication-bound job (a 512 MiB gradient all-reduce a step beside GEMMs of 64 rows: no rank late).
# SMOKE=1 shrinks the model so the script can be checked on a CPU-only machine (gloo).
set -u
OUTD=${1:-/tmp/tv_multigpu}
PY=${PY:-python3}
TORCHRUN=${TORCHRUN:-torchrun}
NPROC=${NPROC:-2}
DELAY_MS=${DELAY_MS:-100}
# NVLink multicast (NVLS) off: keep these set on shared multi-GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
if [ "${SMOKE:-0}" = 1 ]; then
  SIZE="--layers 1 --dim 64 --heads 2 --seq 32 --batch 2 --vocab 256"; FSDP="--fsdp"
else
  # FSDP's per-block hooks and its DTensor optimizer step cost more host time than DDP: a larger batch keeps
  # the GPU the bottleneck, so one host being a little slower is absorbed instead of making the other wait.
  SIZE=""; FSDP="--fsdp --batch 64"
fi
C="$PY -m collectors collect --out $OUTD/runs --wait 5 --warmup 1 --active 3 --shapes"
T="$TORCHRUN --standalone --nproc-per-node $NPROC -m collectors.examples.dist_gpt --steps 12 $SIZE"
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
. "$(dirname "$0")/_run.sh"
if [ "${2:-}" = causes ]; then
  run ddp_rank1_syncs $C --name ddp_rank1_syncs -- $T --slow-rank 1 --cause syncs
  run ddp_rank1_fp32 $C --name ddp_rank1_fp32 -- $T --slow-rank 1 --cause fp32
  run ddp_rank1_copy $C --name ddp_rank1_copy -- $T --slow-rank 1 --cause copy --copy-mb 256
  run ddp_rank1_kernels $C --name ddp_rank1_kernels -- $T --slow-rank 1 --cause kernels --extra-gemms 40
  AR="-m collectors.examples.allreduce --steps 12 $([ "${SMOKE:-0}" = 1 ] || echo --d 16384 --rows 64)"
  run comm_bound $C --name comm_bound -- $TORCHRUN --standalone --nproc-per-node "$NPROC" $AR
  (cd "$OUTD" && tar czf runs.tar.gz runs)
  ls -la "$OUTD"/runs/*
  echo "=== done"
  exit 0
fi
run ddp_balanced $C --name ddp_balanced -- $T
run ddp_rank1_slowed $C --name ddp_rank1_slowed -- $T --slow-rank 1 --delay-ms "$DELAY_MS"
run ddp_rank1_slowed_50ms $C --name ddp_rank1_slowed_50ms -- $T --slow-rank 1 --delay-ms 50
run fsdp_balanced $C --name fsdp_balanced -- $T $FSDP
run fsdp_rank1_slowed $C --name fsdp_rank1_slowed -- $T $FSDP --slow-rank 1 --delay-ms "$DELAY_MS"
# no per-step loss read-back: launch-bound hosts drift apart and the faster rank's GPU waits in NCCL
run ddp_balanced_nolog $C --name ddp_balanced_nolog -- $T --no-log
run fsdp_balanced_nolog $C --name fsdp_balanced_nolog -- $T $FSDP --no-log
(cd "$OUTD" && tar czf runs.tar.gz runs)
ls -la "$OUTD"/runs/*
echo "=== done"
