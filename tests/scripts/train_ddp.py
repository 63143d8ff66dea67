"""Two-process DDP training on CPU with gloo (launched by torchrun); no profiler code."""

import os

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
    for _ in range(int(os.environ.get("STEPS", "10"))):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
    print(f"rank {rank} done")


if __name__ == "__main__":
    main()
