#!/usr/bin/env bash
# Record the held-out user-style programs (collectors/examples/user_programs.py) with `traceview collect` as a
# user runs it (defaults: --settle on), for analysing as they come. Usage (repo root, on a CUDA machine):
#   collectors/examples/record_user_programs.sh OUT_DIR [PROG...]     # runs land in OUT_DIR/<prog>/
# FIXED=1 also records each program's fixed twin (`--fixed`) in OUT_DIR/<prog>_fixed/, as the second to seventh
# sets were (e.g. the seventh: FIXED=1 ... qwen2_eager pythia_adamw_loop bart_empty_cache electra_fp32 mobilenetv2_fp32)
set -u
OUTD=${1:-/tmp/tv_user_programs}
shift || true
PROGS_=${*:-t5 distilbert_fp32 swin_bf16 regnet_loader lstm opt_generate lightning mixer_compile}
PY=${PY:-python3}
mkdir -p "$OUTD"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
. "$(dirname "$0")/_run.sh"
for prog in $PROGS_; do
  steps=60
  case $prog in opt_generate) steps=24 ;; regnet_loader) steps=120 ;; esac
  for fix in "" ${FIXED:+--fixed}; do
    name=$prog${fix:+_fixed}
    RUN_TIMEOUT=${RUN_TIMEOUT:-150} run "$name" $PY -m collectors collect --out "$OUTD" --name "$name" --wait 8 \
      --shapes --settle-max-s 20 -- $PY -m collectors.examples.user_programs --prog "$prog" --steps $steps $fix
  done
done
