"""A training loop fed by a DataLoader whose two workers are slower than the loop (no profiler code): their first
batches were made while the loop's first step ran (a slow start, as a model's first forward autotunes), so the
loop runs at its own pace (a 3 ms step) until that prefetch buffer is empty, then at the workers' (each item
sleeps ITEM_S, two items a batch, two workers: a batch every ITEM_S seconds at best). STEPS steps in all.
"""

import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __init__(self, n: int, item_s: float) -> None:
        self.n, self.item_s = n, item_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.item_s)
        return torch.full((16,), float(i))


def main() -> None:
    steps, item_s = int(os.environ.get("STEPS", "60")), float(os.environ.get("ITEM_S", "0.012"))
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(2 * steps, item_s), batch_size=2, num_workers=2, prefetch_factor=6)
    for i, x in enumerate(loader):
        if i == 0:
            time.sleep(0.5)  # the first step's start-up: the workers fill the buffer meanwhile
        model(x).sum().backward()
        time.sleep(0.003)
        opt.step()
        opt.zero_grad()
    print(f"loader_drain done after {steps} steps")


if __name__ == "__main__":
    main()
