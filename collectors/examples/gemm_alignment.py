"""Measure what a GEMM dimension that is not a multiple of 16 bytes costs: each shape aligned and with one
dimension off by one (M, N or K; either operand transposed), in bf16, fp16 and TF32, timed with CUDA events
(median of `--reps` after warm-up). Prints one JSON line per case (`ALIGN {...}`): the kernel's time, its
TFLOP/s and the aligned twin's (the dimension rounded up to a multiple of 64).

python -m collectors.examples.gemm_alignment
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

SHAPES = [(4096, 50257, 768), (4095, 8192, 4096), (4096, 8191, 4096), (4096, 8192, 4095), (8, 50257, 768),
          (512, 30522, 768), (16384, 1000, 2048)]


def timed(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def case(m: int, n: int, k: int, dtype: torch.dtype, ta: bool, tb: bool, reps: int) -> float:
    a = torch.randn(k, m, device="cuda", dtype=dtype).t() if ta else torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t() if tb else torch.randn(k, n, device="cuda", dtype=dtype)
    return timed(lambda: a @ b, reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    up = lambda x: -(-x // 64) * 64  # noqa: E731
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for m, n, k in SHAPES:
            for ta, tb in ((False, False), (False, True), (True, False)):
                ms = case(m, n, k, dtype, ta, tb, args.reps)
                pad = case(up(m), up(n), up(k), dtype, ta, tb, args.reps)
                fl = 2.0 * m * n * k
                print("ALIGN " + json.dumps({
                    "dtype": str(dtype).split(".")[-1], "m": m, "n": n, "k": k, "ta": ta, "tb": tb,
                    "ms": round(ms, 4), "tflops": round(fl / ms / 1e9, 1), "padded_ms": round(pad, 4),
                    "padded_tflops_on_own_flops": round(fl / pad / 1e9, 1)}), flush=True)


if __name__ == "__main__":
    main()
