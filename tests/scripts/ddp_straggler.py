"""Two-process DDP training on CPU (gloo) with a known straggler; no profiler code.

Rank 1 (``--slow-rank``) busy-loops ``--delay-ms`` milliseconds of CPU before ``backward()`` every step, so
the other rank reaches DDP's gradient all-reduce that much earlier and waits for it there. ``--delay-ms 0``
(or env ``STRAGGLER_DELAY_MS=0``) is the balanced run. Launched by torchrun.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def busy(ms: float) -> None:
    """Burn `ms` of wall time on this CPU (a spin loop: no sleep, so the rank really is busy)."""
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--delay-ms", type=float, default=float(os.environ.get("STRAGGLER_DELAY_MS", "30")))
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "8")))
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size (small: several all-reduces)")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    model = DDP(net, bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(32, 64, generator=g), torch.randn(32, 1, generator=g)
    delay = a.delay_ms if rank == a.slow_rank else 0.0
    for _ in range(a.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        if delay:
            busy(delay)
        loss.backward()  # DDP all-reduces the gradient buckets here
        opt.step()
    dist.destroy_process_group()
    print(f"rank {rank} done (delay {delay:g} ms)")


if __name__ == "__main__":
    main()
