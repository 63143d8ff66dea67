"""Compute-bound: 4 bf16 GEMMs of 8192^3 per step (negative control: nothing to fix).

traceview collect --shapes -- python -m collectors.examples.gemm
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--n", type=int, default=8192)
    args = ap.parse_args()
    dev = device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.randn(args.n, args.n, device=dev, dtype=dtype)
    b = torch.randn(args.n, args.n, device=dev, dtype=dtype)
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        for _ in range(4):
            c = a @ b
        timer.mark()
        collectors.step()
    timer.report("gemm")
    print(f"checksum {float(c[0, :4].float().sum()):.3f}")


if __name__ == "__main__":
    main()
