"""A transformer training loop that calls torch.cuda.empty_cache() every step (a common "fix" for OOMs).

`--empty-cache` hands the caching allocator's free blocks back to the driver after every step, so the next
step's activations are allocated again with cudaMalloc (synchronous, and implicitly device-wide) and freed with
cudaFree: the mistake. Without it the allocator reuses its cached blocks and no step calls the driver (the fix;
for fragmentation, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).

    traceview collect -- python -m collectors.examples.alloc_churn --empty-cache
    traceview collect -- python -m collectors.examples.alloc_churn
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device
from collectors.examples.tinygpt import TinyGPT


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--empty-cache", action="store_true")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    model = TinyGPT(8192, args.d, args.layers, 12, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)  # its step() marks the collector's steps
    tokens = torch.randint(0, 8192, (args.batch, args.seq + 1), device=dev)
    x, y = tokens[:, :-1], tokens[:, 1:]
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del logits, loss
        if args.empty_cache and dev.type == "cuda":
            torch.cuda.empty_cache()
        timer.mark()
    timer.report(f"alloc_churn{'_empty_cache' if args.empty_cache else ''}")


if __name__ == "__main__":
    main()
