"""FP32 GEMM at a chosen matmul precision: 'highest' (CUDA cores) vs 'high' (TF32 Tensor Cores).

One fp32 8192^3 GEMM per step. The two precisions are an eager/fixed twin for the `fp32-gemm` rule:
the difference of their unprofiled step times is what `torch.set_float32_matmul_precision("high")` saves.

    traceview collect --shapes -- python -m collectors.examples.fp32_gemm --precision highest
    traceview collect --shapes -- python -m collectors.examples.fp32_gemm --precision high
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--gemms", type=int, default=1, help="GEMMs per step")
    ap.add_argument("--precision", choices=["highest", "high", "medium"], default="highest")
    args = ap.parse_args()
    torch.set_float32_matmul_precision(args.precision)
    dev = device()
    a = torch.randn(args.n, args.n, device=dev)
    b = torch.randn(args.n, args.n, device=dev)
    c = a @ b  # cuBLAS handle and heuristics before the first step
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        for _ in range(args.gemms):
            c = a @ b
        timer.mark()
        collectors.step()
    timer.report(f"fp32_gemm_{args.precision}")
    print(f"checksum {float(c[0, :4].sum()):.3f}")


if __name__ == "__main__":
    main()
