"""A tiny real training loop (no profiler code): MLP blocks + SGD on random data, CPU or CUDA."""

import argparse
import sys
import time

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self, d: int = 32, n: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--slow-step", type=int, default=None, help="sleep 0.5 s in this step (0-based)")
    ap.add_argument("--stderr-lines", action="store_true", help="write stderr text that looks like probe noise")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32, device=dev), torch.randn(16, 1, device=dev)
    if args.stderr_lines:  # a partial line first (flushed before its end), then a line quoting a probe line
        sys.stderr.write("progress 10%")
        sys.stderr.flush()
        sys.stderr.write(" 100%\nUSDT:-like text inside a line: ] profiler_start is not noise\n")
        sys.stderr.flush()
    for i in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if i == args.slow_step:
            time.sleep(0.5)
        opt.step()
    print(f"train_small done loss={loss.item():.4f}")
    print("stderr line from train_small", file=sys.stderr)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
