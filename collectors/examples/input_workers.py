"""A small MLP fed by a DataLoader whose per-sample transform costs a known amount of CPU.

Each sample burns `--cpu-ms` of CPU in the worker (numpy work, as decoding and augmentation do), so one batch
costs batch x cpu-ms of worker CPU. With `--workers N` the loader delivers at most N batches per batch-time:
too few workers for that cost is the mistake (input-bound although workers are in use), enough workers the
fix. Time it in steady state (collect --wait 24 or more): the first steps drain the prefetch buffer.

    traceview collect --wait 24 -- python -m collectors.examples.input_workers --workers 2
    traceview collect --wait 24 -- python -m collectors.examples.input_workers --workers 10
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device


class CostlySamples(torch.utils.data.Dataset):
    def __init__(self, n: int, d: int, cpu_ms: float) -> None:
        self.n, self.d, self.cpu_ms = n, d, cpu_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)
        end = time.perf_counter() + self.cpu_ms / 1000.0
        a = rng.standard_normal((64, 64))
        while time.perf_counter() < end:  # CPU work of a fixed duration: a decode + augmentation stand-in
            a = np.tanh(a @ a.T * 0.01)
        x = rng.standard_normal(self.d).astype(np.float32)
        return torch.from_numpy(x), int(rng.integers(10))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cpu-ms", type=float, default=2.0, help="worker CPU per sample")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(args.d, args.d), nn.ReLU()) for _ in range(8)], nn.Linear(args.d, 10)
    )
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # its step() marks the collector's steps
    ds = CostlySamples(args.steps * args.batch, args.d, args.cpu_ms)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.batch,
        num_workers=args.workers,
        pin_memory=True,
        persistent_workers=args.workers > 0,
    )
    timer = StepTimer(dev)
    timer.mark()
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        for _ in range(4):  # a few passes so the GPU step is comparable to the enough-workers input rate
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        timer.mark()
    timer.report(f"input_workers_nw{args.workers}")


if __name__ == "__main__":
    main()
