"""A model serving requests a few rows at a time (kernels too small to fill the GPU) or all rows in one batch.

Each step serves `--rows` rows. `--per-call R` runs them R rows per forward (R=4: every GEMM and elementwise
kernel has a grid of a few blocks on a GPU with over a hundred SMs: the mistake); `--per-call` equal to
`--rows` serves them in one batch (the fix: the same weights read once, every SM busy). `--graph` replays the
step as one CUDA graph, so launch overhead is gone and what is left is the kernels' own occupancy.
`--model mlp` (default): `--layers` bf16 Linear-GELU-Linear blocks of width `--d`; `--model resnet18`: torchvision
ResNet-18 inference (bf16, channels_last), a row being one `--size`² image.

    traceview collect -- python -m collectors.examples.small_batch --per-call 4 --graph
    traceview collect -- python -m collectors.examples.small_batch --per-call 128 --graph
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "resnet18"], default="mlp")
    ap.add_argument("--rows", type=int, default=128, help="rows served per step")
    ap.add_argument("--per-call", type=int, default=4, help="rows per forward call")
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--size", type=int, default=224, help="resnet18: image side")
    ap.add_argument("--graph", action="store_true", help="capture the step as a CUDA graph")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if args.model == "resnet18":
        import torchvision

        model = torchvision.models.resnet18().to(dev, dtype, memory_format=torch.channels_last).eval()
        x = torch.randn(args.rows, 3, args.size, args.size, device=dev, dtype=dtype)
        x = x.contiguous(memory_format=torch.channels_last)
    else:
        blocks = [
            nn.Sequential(nn.Linear(args.d, 4 * args.d), nn.GELU(), nn.Linear(4 * args.d, args.d))
            for _ in range(args.layers)
        ]
        model = nn.Sequential(*blocks).to(dev, dtype).eval()
        x = torch.randn(args.rows, args.d, device=dev, dtype=dtype)
    chunks = x.split(args.per_call)

    def serve() -> list[torch.Tensor]:
        with torch.no_grad():
            return [model(c) for c in chunks]

    fn = serve
    if args.graph and dev.type == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                serve()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = serve()

        def fn() -> list[torch.Tensor]:
            graph.replay()
            return static_out

    for _ in range(3):
        out = fn()
    timer = StepTimer(dev)
    timer.mark()
    for _ in collectors.steps(range(args.steps)):  # no optimizer: mark step boundaries explicitly
        out = fn()
        timer.mark()
    tag = "resnet18_" if args.model == "resnet18" else ""
    timer.report(f"small_batch_{tag}r{args.rows}_c{args.per_call}{'_graph' if args.graph else ''}")
    print(f"checksum {float(out[0][0, :4].float().sum()):.3f}")


if __name__ == "__main__":
    main()
