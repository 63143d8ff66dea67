"""A compiled function with a data-dependent branch: a graph break (`if h.sum() > 0:`) vs `torch.where`.

`--mode break`: Dynamo splits the function into two compiled graphs; `h.sum() > 0` is read on the host
(`aten::item`, a sync) and the second graph is launched after it. `--mode where`: the same math in one graph,
no sync. `--calls` compiled calls per step on a 128 MiB fp32 tensor. The twin for the `graph-break` rule.

    traceview collect --shapes -- python -m collectors.examples.compile_branch --mode break
    traceview collect --shapes -- python -m collectors.examples.compile_branch --mode where
"""

import argparse

import torch

import collectors
from collectors.examples._common import StepTimer, device


def with_break(x: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x * 2.0 + 1.0)
    if h.sum() > 0:  # data-dependent Python branch: graph break + host sync
        return torch.tanh(h * 0.5 - 1.0)
    return h


def with_where(x: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x * 2.0 + 1.0)
    return torch.where(h.sum() > 0, torch.tanh(h * 0.5 - 1.0), h)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--mode", choices=["break", "where"], default="break")
    ap.add_argument("--calls", type=int, default=4, help="compiled calls per step")
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=4096)
    args = ap.parse_args()
    dev = device()
    x = torch.randn(args.rows, args.cols, device=dev)
    fn = torch.compile(with_break if args.mode == "break" else with_where)
    for _ in range(2):
        out = fn(x)  # compile before the timed loop
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        for _ in range(args.calls):
            out = fn(x)
        timer.mark()
        collectors.step()
    timer.report(f"compile_{args.mode}")
    print(f"checksum {float(out[0, :4].sum()):.3f}")


if __name__ == "__main__":
    main()
