#!/bin/bash
# The issue-32 figures on the 16-core GPU host, which has torch but not traceview's dependencies and no package
# registry: `.devpack/` (made here by bench/devpack.sh, carried to the host) holds the wheels for its Python, the
# polars runtime stripped and xz-compressed, and the benchmark trace xz-compressed (the carry limit is 64 MiB).
#   bench/device_run.sh OUTDIR [bench/run.py options]
# Timing on the host (2026-12-07): `--sizes 1 --tiny-events 10 --repeat 2 --big-repeat 2 --no-peers` reaches the
# start-up table after ~560 s, near the device's 600 s a call: split the figures over calls (`--only`, `--sizes ""`).
set -u
OUTD=${1:?OUTDIR}; shift
DP=/tmp/devpack-site
mkdir -p "$DP" "$OUTD"
for w in .devpack/*.whl; do python3 -m zipfile -e "$w" "$DP" >/dev/null; done
cp -r .devpack/site/. "$DP"/
xz -dc .devpack/polars_runtime.so.xz > "$DP/_polars_runtime_32/_polars_runtime.abi3.so"
xz -dc .devpack/big_train_60steps.json.xz | gzip -1 > /tmp/big_train_60steps.json.gz
export PYTHONPATH="$DP:$PWD" OPENBLAS_NUM_THREADS=1
[ -e traceview/rules ] || ln -s ../rules traceview/rules  # (what the editable install maps; none here)
# the start-up table's tiny trace (sample_traces/ is not carried: over the limit)
mkdir -p sample_traces/gpu_h200 && cp -n .devpack/seed_single_gemm_eager.json.gz sample_traces/gpu_h200/
python3 setup.py -q build_ext --inplace > "$OUTD/build_ext.log" 2>&1 || echo "build_ext failed (see build_ext.log)"
python3 -c 'import polars, msgspec, orjson, isal, rich, traceview; print("polars", polars.__version__)' || exit 1
python3 bench/run.py --trace /tmp/big_train_60steps.json.gz --out "$OUTD/RESULTS.md" "$@"
python3 -c 'import traceview.ingest._scan, traceview.analyses._replay' 2>/dev/null || echo "C scanner/replay not built: pure-Python paths"
# the analyses' own threads (TRACEVIEW_THREADS, default 1) on the benchmark trace: three interleaved pairs
for i in 1 2 3; do
  for t in 1 16; do
    /usr/bin/time -f "TRACEVIEW_THREADS=$t wall %e s, user %U s, sys %S s, peak %M KiB" \
      env TRACEVIEW_THREADS=$t python3 -m traceview analyze /tmp/big_train_60steps.json.gz --format json -o /dev/null
  done
done 2>&1 | grep TRACEVIEW_THREADS | tee "$OUTD/threads.txt"
