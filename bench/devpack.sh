#!/bin/bash
# Makes `.devpack/` (git-ignored) for bench/device_run.sh: traceview's dependencies as wheels for the GPU host's
# Python (3.12; no package registry there), the polars runtime stripped and xz-compressed and the benchmark trace
# xz-compressed, so that the checkout and the pack stay under the device's 64 MiB carry limit.
#   bench/devpack.sh [TRACE.json.gz]   (default ../shared/traces/big/big_train_60steps.json.gz)
set -eu
TRACE=${1:-../shared/traces/big/big_train_60steps.json.gz}
PIP=${PIP:-.venv/bin/pip}
W=$(mktemp -d)
$PIP download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$W" polars msgspec orjson isal rich
rm -rf .devpack && mkdir -p .devpack/site
cp "$W"/*.whl .devpack/ && rm .devpack/polars_runtime_*.whl
python3 -m zipfile -e "$W"/polars_runtime_*.whl .devpack/site
so=$(ls .devpack/site/_polars_runtime_*/*.so)
strip --strip-unneeded "$so" && xz -9 -T2 -c "$so" > .devpack/polars_runtime.so.xz && rm "$so"
zcat "$TRACE" | xz -9 -T2 > .devpack/big_train_60steps.json.xz
cp sample_traces/gpu_h200/seed_single_gemm_eager.json.gz .devpack/  # bench/run.py's start-up trace
rm -rf "$W"
du -sh .devpack
