"""Host-to-device input copies from pageable memory vs pinned memory with `non_blocking=True`.

Each step copies a host batch to the GPU and computes on it. `--model mlp`: a `--mib` MiB fp32 batch of
`--d`-wide rows through `--layers` bf16 GEMMs (inference, steps marked with collectors.steps); `--model resnet18`:
a torchvision ResNet-18 training step (bf16 autocast, channels_last, AdamW) on a `--batch` x 3 x 224 x 224 fp32
image batch and its labels, as a loop over a DataLoader without `pin_memory` does. Two host batches alternate.
`--pinned`: the host batches are page-locked and copied with `non_blocking=True` (the copy engine DMAs them
at the link's speed and the host does not wait); without it the driver stages each copy through a bounce
buffer and the host blocks. The twins for `pageable-memcpy`.

    traceview collect --shapes -- python -m collectors.examples.h2d_copy --model mlp
    traceview collect --shapes -- python -m collectors.examples.h2d_copy --model mlp --pinned
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "resnet18"], default="mlp")
    ap.add_argument("--pinned", action="store_true", help="pinned host batches, non_blocking copies")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--mib", type=int, default=64, help="mlp: host batch size in MiB (fp32)")
    ap.add_argument("--d", type=int, default=4096, help="mlp: row width")
    ap.add_argument("--layers", type=int, default=4, help="mlp: GEMMs per step")
    ap.add_argument("--batch", type=int, default=64, help="resnet18: images per step")
    ap.add_argument("--size", type=int, default=224, help="resnet18: image side")
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    pin = args.pinned and dev.type == "cuda"
    timer = StepTimer(dev)

    def host(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        t = torch.randn(*shape) if dtype.is_floating_point else torch.randint(0, 100, shape)
        return t.pin_memory() if pin else t

    if args.model == "mlp":
        rows = args.mib * 2**20 // (4 * args.d)
        batches = [host(rows, args.d) for _ in range(2)]
        ws = [torch.randn(args.d, args.d, device=dev) / args.d**0.5 for _ in range(args.layers)]
        ws = [w.to(torch.bfloat16) if dev.type == "cuda" else w for w in ws]

        def step(i: int) -> torch.Tensor:
            x = batches[i % 2].to(dev, non_blocking=pin).to(ws[0].dtype)
            for w in ws:
                x = torch.relu(x @ w)
            return x

        with torch.no_grad():
            for i in range(3):
                out = step(i)
            timer.mark()
            for i in collectors.steps(range(args.steps)):  # no optimizer: mark step boundaries explicitly
                out = step(i)
                timer.mark()
    else:
        import torchvision

        model = torchvision.models.resnet18(num_classes=100).to(dev, memory_format=torch.channels_last)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)  # its step() marks the steps
        batches = [
            (host(args.batch, 3, args.size, args.size), host(args.batch, dtype=torch.int64)) for _ in range(2)
        ]
        timer.mark()
        for i in range(args.steps):
            images, labels = (t.to(dev, non_blocking=pin) for t in batches[i % 2])
            images = images.contiguous(memory_format=torch.channels_last)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                loss = F.cross_entropy(model(images).float(), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            out = loss.detach()
            timer.mark()
    timer.report(f"h2d_{args.model}_{'pinned' if pin else 'pageable'}")
    print(f"checksum {float(out.flatten()[:4].float().sum()):.3f}")


if __name__ == "__main__":
    main()
