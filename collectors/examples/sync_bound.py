"""Host-sync-bound: 6 micro-steps per step, each with `.item()`, `torch.nonzero` and `.cpu()`.

Every one blocks the CPU until the GPU catches up, so the GPU idles while the host re-launches.
Run with --stack to attribute each sync to its source line:

    traceview collect --stack --shapes -- python -m collectors.examples.sync_bound
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
    x = torch.randn(1024, 1024, device=dev)
    w = torch.randn(1024, 1024, device=dev)
    timer = StepTimer(dev)
    timer.mark()
    total = 0.0
    for _ in range(args.steps):
        for _ in range(6):
            y = torch.tanh(x @ w)
            total += y.mean().item()  # sync 1: a scalar to Python
            idx = torch.nonzero(y > 0.5)  # sync 2: output size depends on the data
            total += float(idx.shape[0])
            total += y[:8, :8].cpu().sum().item()  # sync 3: device-to-host copy
        timer.mark()
        collectors.step()
    timer.report("sync_bound")
    print(f"checksum {total:.1f}")


if __name__ == "__main__":
    main()
