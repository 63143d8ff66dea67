"""Optimizer implementations over a 24-layer MLP (48 parameters): single-tensor vs foreach vs fused AdamW.

`--impl single` (`foreach=False`) launches ~10 tiny kernels per parameter per step; `--impl fused`
(`fused=True`) a few multi-tensor kernels. The twin for the `unfused-optimizer` rule. Matmuls run at
precision 'high' (TF32) so that an FP32-GEMM finding does not mix into the comparison.

    traceview collect --shapes -- python -m collectors.examples.optimizer_step --impl single
    traceview collect --shapes -- python -m collectors.examples.optimizer_step --impl fused
"""

import argparse

import torch
from torch import nn

from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--impl", choices=["single", "foreach", "fused"], default="single")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_float32_matmul_precision("high")
    dev = device()
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(args.d, args.d), nn.ReLU()) for _ in range(args.layers)))
    model = model.to(dev)
    kw = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[args.impl]
    if args.impl == "fused" and dev.type != "cuda":
        try:  # torch >= 2.4 has a fused CPU AdamW; older ones only a GPU kernel (smoke runs: foreach)
            torch.optim.AdamW([torch.zeros(1, requires_grad=True)], fused=True)
        except (RuntimeError, ValueError):
            kw = {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)  # its step() marks the collector's boundaries
    x = torch.randn(args.batch, args.d, device=dev)
    y = torch.randn(args.batch, args.d, device=dev)
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.mark()
    timer.report(f"optimizer_{args.impl}")
    print(f"params {sum(1 for _ in model.parameters())} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
