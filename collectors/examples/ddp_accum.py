"""DDP training with gradient accumulation: all-reducing every micro-batch, or only the last (no_sync()).

One optimizer step accumulates `--accum` micro-batches. Without `--no-sync` DDP all-reduces the gradients after
every micro-batch's backward (accum x the communication: the mistake); with it, the first accum-1 backwards run
inside `model.no_sync()` and only the last one all-reduces (the fix). Run it under torchrun (NCCL on GPUs; gloo
with `--backend gloo`, which also lets two processes share one GPU).

    traceview collect -- torchrun --nproc-per-node 1 -m collectors.examples.ddp_accum --accum 4
    traceview collect -- torchrun --nproc-per-node 1 -m collectors.examples.ddp_accum --accum 4 --no-sync
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from collectors.examples._common import StepTimer
from collectors.examples.tinygpt import TinyGPT


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    rank = dist.get_rank()
    dev = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(torch.cuda.device_count(), 1))
        if cuda
        else torch.device("cpu")
    )
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    model = DDP(
        TinyGPT(8192, args.dim, args.layers, 16, args.seq).to(dev), device_ids=[dev.index] if cuda else None
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # its step() marks the collector's steps
    g = torch.Generator(device=dev).manual_seed(rank)
    tokens = torch.randint(0, 8192, (args.accum, args.batch, args.seq + 1), device=dev, generator=g)
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for m in range(args.accum):
            last = m == args.accum - 1
            ctx = model.no_sync() if args.no_sync and not last else contextlib.nullcontext()
            with ctx, torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                logits = model(tokens[m, :, :-1])
                loss = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(), tokens[m, :, 1:].reshape(-1)
                )
                (loss / args.accum).backward()
        opt.step()
        timer.mark()
    timer.report(f"ddp_accum{args.accum}{'_nosync' if args.no_sync else ''}_rank{rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
