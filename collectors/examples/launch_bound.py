"""Launch-bound: 60 x (add, relu, mul, 64x64 matmul) per step. Tiny kernels; the CPU can't launch fast enough.

traceview collect --shapes -- python -m collectors.examples.launch_bound
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    dev = device()
    a = torch.randn(64, 64, device=dev)
    w = torch.randn(64, 64, device=dev)
    timer = StepTimer(dev)
    timer.mark()
    for _ in collectors.steps(range(args.steps)):  # no optimizer: mark step boundaries explicitly
        x = a
        for _ in range(60):
            x = torch.relu(x + 1.0) * 0.5
            x = x @ w
        timer.mark()
    timer.report("launch_bound")


if __name__ == "__main__":
    main()
