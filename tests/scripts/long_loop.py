"""A long-running job for on-demand capture: steps until STOP_FILE exists (or MAX_S seconds)."""

import os
import sys
import time

import torch
from torch import nn


def main() -> None:
    stop, max_s = os.environ["STOP_FILE"], float(os.environ.get("MAX_S", "60"))
    model = nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    t0, n = time.monotonic(), 0
    while not os.path.exists(stop) and time.monotonic() - t0 < max_s:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(0.01)
        n += 1
    print(f"long_loop done after {n} steps")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
