"""Long-sequence causal self-attention layers trained under bf16 autocast: scores materialised or fused.

`--impl eager` computes softmax(QK^T/sqrt(d) + mask) with dropout in separate kernels: every head writes and
reads an S x S score matrix in HBM several times (the mistake). `--impl math` calls
F.scaled_dot_product_attention but forces its math backend (what SDPA falls back to on unsupported inputs:
the same materialised kernels). `--impl flash` lets SDPA pick its flash backend: one fused kernel whose scores
stay in on-chip memory (the fix). Same weights, inputs, dropout and optimizer in all three.

    traceview collect -- python -m collectors.examples.attention --impl eager --seq 2048
    traceview collect -- python -m collectors.examples.attention --impl flash --seq 2048
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, impl: str, dropout: float) -> None:
        super().__init__()
        self.heads, self.impl, self.p = heads, impl, dropout
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.p if self.training else 0.0
        if self.impl == "eager":
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            y = F.dropout(scores.softmax(-1), p) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(b, t, d))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["eager", "math", "flash"], default="eager")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    model = nn.Sequential(
        *[SelfAttention(args.d, args.heads, args.impl, args.dropout) for _ in range(args.layers)]
    )
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)  # its step() marks the collector's steps
    x = torch.randn(args.batch, args.seq, args.d, device=dev)
    backend = contextlib.nullcontext()
    if dev.type == "cuda" and args.impl != "eager":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = sdpa_kernel(SDPBackend.MATH if args.impl == "math" else SDPBackend.FLASH_ATTENTION)
    timer = StepTimer(dev)
    timer.mark()
    with backend:
        for _ in range(args.steps):
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                loss = model(x).float().square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            timer.mark()
    timer.report(f"attention_{args.impl}_s{args.seq}")
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
