#!/usr/bin/env bash
# Record two-rank DDP jobs that share ONE GPU over gloo, each with a known straggler cause on rank 1 (ground truth
# for the job answer's cause while no multi-GPU machine is lent): balanced, a CPU delay, per-block host syncs,
# pageable host-to-device copies, extra GPU kernels. NCCL refuses two ranks on one device; gloo reduces on the
# host (a device-to-host copy, the sum, a copy back), so these jobs are communication-heavy by construction.
# Usage (repo root, a machine with a GPU): collectors/examples/record_gloo1gpu.sh OUT_DIR
set -u
OUTD=${1:-/tmp/tv_gloo1gpu}
PY=${PY:-python3}
TORCHRUN=${TORCHRUN:-torchrun}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
SIZE=${SIZE:-"--layers 4 --dim 256 --heads 4 --seq 1024 --batch 16 --vocab 8192"}
C="$PY -m collectors collect --out $OUTD/runs --wait 5 --warmup 1 --active 3 --shapes"
T="$TORCHRUN --standalone --nproc-per-node 2 -m collectors.examples.dist_gpt --backend gloo --steps 12 $SIZE"
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
. "$(dirname "$0")/_run.sh"
run gloo1_balanced $C --name gloo1_balanced -- $T
run gloo1_rank1_delay20 $C --name gloo1_rank1_delay20 -- $T --slow-rank 1 --cause delay --delay-ms 20
run gloo1_rank1_syncs $C --name gloo1_rank1_syncs -- $T --slow-rank 1 --cause syncs
run gloo1_rank1_copy $C --name gloo1_rank1_copy -- $T --slow-rank 1 --cause copy --copy-mb 128
run gloo1_rank1_kernels $C --name gloo1_rank1_kernels -- $T --slow-rank 1 --cause kernels --extra-gemms 40
(cd "$OUTD" && tar czf runs.tar.gz runs)
ls -la "$OUTD"/runs/*
echo "=== done"
