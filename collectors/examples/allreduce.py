"""Linear + gradient all_reduce + SGD per step under torchrun (NCCL on GPUs, gloo on CPU); no profiler code.

``--rows`` sets the batch: few rows leave the GEMMs far shorter than the all-reduce of the d x d gradient (bf16:
2 d² bytes, 512 MiB at d = 16384), a communication-bound job in which every rank waits in the collective's own
transfer and none is late.

traceview collect --shapes -- torchrun --nproc-per-node 1 --standalone -m collectors.examples.allreduce
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

from collectors.examples._common import StepTimer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--d", type=int, default=8192)
    ap.add_argument("--rows", type=int, default=4096, help="the batch (rows of x) on a GPU")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    d = args.d if cuda else 256
    model = nn.Linear(d, d, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.rows if cuda else 64, d, device=dev, dtype=model.weight.dtype)
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        model(x).float().square().mean().backward()
        for p in model.parameters():  # what DDP does, without its bucketing
            dist.all_reduce(p.grad)
        opt.step()  # the collector's step boundary
        opt.zero_grad(set_to_none=True)
        timer.mark()
    timer.report(f"allreduce_world{dist.get_world_size()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
