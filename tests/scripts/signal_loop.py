"""A job to stop with a signal: steps until killed (or MAX_S seconds), touching READY_FILE after READY_STEPS steps
so that the test knows the profiler is recording before it sends anything."""

import os
import time
from pathlib import Path

import torch
from torch import nn


def main() -> None:
    ready, n_ready = Path(os.environ["READY_FILE"]), int(os.environ.get("READY_STEPS", "5"))
    max_s = float(os.environ.get("MAX_S", "120"))
    model = nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32)
    t0, n = time.monotonic(), 0
    while time.monotonic() - t0 < max_s:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        n += 1
        if n == n_ready:
            ready.touch()
        time.sleep(0.01)
    print(f"signal_loop ran out of time after {n} steps")


if __name__ == "__main__":
    main()
