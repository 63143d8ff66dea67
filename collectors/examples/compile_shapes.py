"""A compiled MLP that recompiles every step (a new batch size, automatic dynamic shapes off) vs a stable shape.

`--mode recompile`: step i runs batch `--batch + 8*i` with `torch._dynamo.config.automatic_dynamic_shapes =
False`, so Dynamo and Inductor compile a new static graph inside every step (the recompile limit is raised
so it never falls back to eager). `--mode stable`: always `--batch`. `--calls` calls per step with that
step's shape. The twin for the `recompile` rule.

    traceview collect --shapes -- python -m collectors.examples.compile_shapes --mode recompile --steps 10
    traceview collect --shapes -- python -m collectors.examples.compile_shapes --mode stable
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--mode", choices=["recompile", "stable"], default="recompile")
    ap.add_argument("--calls", type=int, default=4, help="calls per step")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--d", type=int, default=1024)
    args = ap.parse_args()
    cfg = torch._dynamo.config
    cfg.automatic_dynamic_shapes = False
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 4096)  # never give up and fall back to eager
    dev = device()
    w1 = torch.randn(args.d, args.d, device=dev) / args.d**0.5
    w2 = torch.randn(args.d, args.d, device=dev) / args.d**0.5

    @torch.compile
    def mlp(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) * 2.0 @ w2

    out = mlp(torch.randn(args.batch, args.d, device=dev))  # first compile before the timed loop
    timer = StepTimer(dev)
    timer.mark()
    for i in range(args.steps):
        rows = args.batch + 8 * (i + 1) if args.mode == "recompile" else args.batch
        x = torch.randn(rows, args.d, device=dev)
        for _ in range(args.calls):
            out = mlp(x)
        timer.mark()
        collectors.step()
    timer.report(f"compile_{args.mode}")
    print(f"checksum {float(out[0, :4].sum()):.3f}")


if __name__ == "__main__":
    main()
