"""A training loop whose step time moves at first, as a real job's does while it warms up (no profiler code).

PATTERN=ramp: step i sleeps max(FLOOR, 40 ms x 0.8^i) — a warm-up that settles after ~12 steps;
PATTERN=alternate: 5 ms and 30 ms steps in turn — a step time that never settles;
PATTERN=compile: flat FLOOR steps but the second, which takes FIRST seconds (a torch.compile'd job compiling again
for the second shape it meets; the collector's step 1: its step 0 runs from start-up to the first optimizer step).
PATTERN=periodic: flat FLOOR steps but every PERIOD-th (default 6), which sleeps SLOW (default 60 ms) — a per-shape
setup or a data stall that recurs;
STEPS steps in all.
"""

import os
import time

import torch
from torch import nn


def main() -> None:
    pattern, steps = os.environ.get("PATTERN", "ramp"), int(os.environ.get("STEPS", "40"))
    floor = float(os.environ.get("FLOOR", "0.003"))
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 16)
    for i in range(steps):
        model(x).sum().backward()
        if pattern == "compile":
            time.sleep(float(os.environ.get("FIRST", "2.5")) if i == 1 else floor)
        elif pattern == "periodic":
            slow = i % int(os.environ.get("PERIOD", "6")) == 5
            time.sleep(float(os.environ.get("SLOW", "0.06")) if slow else floor)
        else:
            time.sleep(max(floor, 0.04 * 0.8**i) if pattern == "ramp" else (0.005, 0.03)[i % 2])
        opt.step()
        opt.zero_grad()
    print(f"warming_loop done after {steps} steps")


if __name__ == "__main__":
    main()
