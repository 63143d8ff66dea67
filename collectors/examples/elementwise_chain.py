"""Memory-bound elementwise chain: 8 ops on a 128 MiB bf16 tensor; --compile fuses them into one kernel.

traceview collect --shapes -- python -m collectors.examples.elementwise_chain [--compile]
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def chain(x: torch.Tensor) -> torch.Tensor:
    y = x * 1.001
    y = y + 0.5
    y = torch.relu(y)
    y = y * 0.9
    y = y - 0.1
    y = torch.abs(y)
    y = y * 1.1
    return torch.tanh(y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--mib", type=int, default=128, help="tensor size in MiB (bf16)")
    args = ap.parse_args()
    dev = device()
    x = torch.randn(args.mib * 2**20 // 2, device=dev, dtype=torch.bfloat16)
    fn = torch.compile(chain) if args.compile else chain
    fn(x)  # compile (or warm up) before the timed loop
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        out = fn(x)
        timer.mark()
        collectors.step()
    timer.report("elementwise_chain_compiled" if args.compile else "elementwise_chain_eager")
    print(f"checksum {float(out[:16].float().sum()):.3f}")


if __name__ == "__main__":
    main()
