"""Two-process DDP training on CPU with gloo (launched by torchrun); no profiler code. RAMP=1: each step sleeps
max(3 ms, 40 ms x 0.8^i) first, a warm-up that settles after ~12 steps. PERIODIC=1: each step sleeps 3 ms, every
sixth 60 ms (on every rank: a data stall or a per-shape setup that recurs)."""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    for i in range(int(os.environ.get("STEPS", "10"))):
        if os.environ.get("RAMP"):
            time.sleep(max(0.003, 0.04 * 0.8**i))
        if os.environ.get("PERIODIC"):
            time.sleep(0.06 if i % 6 == 5 else 0.003)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
