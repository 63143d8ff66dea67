"""A VGG-style stack of 3x3 convolutions trained in FP32 (cuDNN's default TF32) or bf16 autocast + channels_last.

`--precision fp32` is the mistake: no autocast, NCHW; the convolutions run cuDNN's FP32 kernels (TF32 tensor
cores at best). `--precision bf16 --channels-last` is the fix: bf16 tensor-core convolutions in NHWC, which
cuDNN's fastest kernels need (no layout transposes).

    traceview collect -- python -m collectors.examples.conv_net --precision fp32
    traceview collect -- python -m collectors.examples.conv_net --precision bf16 --channels-last
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device


def conv_net(width: int, blocks: int, classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    for _ in range(blocks):
        layers += [nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes)]
    return nn.Sequential(*layers)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=112, help="input side (the stem halves it)")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--blocks", type=int, default=6)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    model = conv_net(args.width, args.blocks, 100).to(dev)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
    y = torch.randint(0, 100, (args.batch,), device=dev)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # its step() marks the steps
    amp = args.precision == "bf16" and dev.type == "cuda"
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.mark()
    timer.report(f"conv_net_{args.precision}{'_cl' if args.channels_last else ''}")
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
