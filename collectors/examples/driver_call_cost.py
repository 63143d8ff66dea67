"""Measure whether the profiler stretches the driver's memory calls: the host time of the caching allocator's
`cudaMalloc` (a `torch.empty` that misses the cache) and of `torch.cuda.empty_cache()` (one `cudaFree` per cached
segment), without the profiler and under `torch.profiler` with CPU and CUDA activities, as `traceview collect`
records. Beside them, a cheap op that allocates nothing (`x.add_(1)` on a small tensor: dispatch and one launch),
whose traced/unprofiled ratio is the profiler's slowdown of dispatch.

Each cycle allocates `--segments` tensors of `--mib` MiB (each a cache miss: a fresh segment and its `cudaMalloc`),
frees them, and empties the cache (the frees); times are the host's `perf_counter` around each part with the device
idle before it (`synchronize`), the median over `--cycles` cycles. Prints one JSON line per (mib, mode): `DRV {...}`.

python -m collectors.examples.driver_call_cost
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def cycle(mib: int, segments: int, small: torch.Tensor, ops: int) -> tuple[float, float, float]:
    """(µs per cudaMalloc, µs per cudaFree, µs per small op) of one cycle."""
    n = mib * (1 << 20) // 4
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    xs = [torch.empty(n, device="cuda") for _ in range(segments)]
    t1 = time.perf_counter()
    del xs
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    torch.cuda.empty_cache()
    t3 = time.perf_counter()
    for _ in range(ops):
        small.add_(1)
    t4 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / segments * 1e6, (t3 - t2) / segments * 1e6, (t4 - t3) / ops * 1e6


def run(mib: int, segments: int, cycles: int, ops: int, profiled: bool) -> dict:
    small = torch.zeros(1024, device="cuda")
    for _ in range(3):
        cycle(mib, segments, small, ops)
    got = []
    if profiled:
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=True):
            got = [cycle(mib, segments, small, ops) for _ in range(cycles)]
    else:
        got = [cycle(mib, segments, small, ops) for _ in range(cycles)]
    med = [statistics.median(g[j] for g in got) for j in range(3)]
    return {"mib": mib, "segments": segments, "profiled": profiled, "malloc_us": round(med[0], 2),
            "free_us": round(med[1], 2), "small_op_us": round(med[2], 2), "cycles": cycles}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mibs", default="2,20,64,256", help="segment sizes (MiB, comma-separated)")
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--ops", type=int, default=200)
    args = ap.parse_args()
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}))
    for mib in (int(m) for m in args.mibs.split(",")):
        for profiled in (False, True, False, True):  # interleaved: host drift shows as a spread, not a bias
            print("DRV", json.dumps(run(mib, args.segments, args.cycles, args.ops, profiled)), flush=True)


if __name__ == "__main__":
    main()
