"""`--iters` x (add, relu, mul, n x n fp32 matmul) per step, run eagerly, compiled, or replayed as a CUDA graph.

Small `--n` is launch-bound (kernels of 1-2 us, several us of host dispatch each); `--n 1024 --iters 8` is
seed 000's fragmented workload (3 elementwise kernels on 4 MiB fp32 between 1024^3 GEMMs). Modes:
`eager`; `compile` (torch.compile: Inductor fuses each add/relu/mul into one Triton kernel);
`graph` (the eager body captured once with torch.cuda.graph and replayed: one cudaGraphLaunch per step);
`reduce-overhead` (torch.compile mode="reduce-overhead": fused kernels replayed as a CUDA graph).

    traceview collect --shapes -- python -m collectors.examples.tiny_ops --n 64 --mode graph
    traceview collect --shapes -- python -m collectors.examples.tiny_ops --n 1024 --iters 8 --mode compile
"""

import argparse
import sys

import torch

import collectors
from collectors.examples._common import StepTimer, device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--mode", choices=["eager", "compile", "graph", "reduce-overhead"], default="eager")
    args = ap.parse_args()
    dev = device()
    torch.manual_seed(0)
    a = torch.randn(args.n, args.n, device=dev)
    w = torch.randn(args.n, args.n, device=dev) / args.n**0.5

    def body(x: torch.Tensor) -> torch.Tensor:
        for _ in range(args.iters):
            x = torch.relu(x + 1.0) * 0.5
            x = x @ w
        return x

    mode = args.mode
    if mode == "graph" and dev.type != "cuda":
        print("no CUDA: running the graph mode eagerly", file=sys.stderr)
        mode = "eager"
    if mode == "eager":
        fn = body
    elif mode == "compile":
        fn = torch.compile(body)
    elif mode == "reduce-overhead":
        compiled = torch.compile(body, mode="reduce-overhead")

        def fn(x: torch.Tensor) -> torch.Tensor:
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(x)
    else:
        static_x = a.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as CUDA graph capture requires
            for _ in range(3):
                body(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = body(static_x)

        def fn(x: torch.Tensor) -> torch.Tensor:
            graph.replay()
            return static_out

    for _ in range(3):
        out = fn(a)  # compile / capture / warm up before the timed loop
    timer = StepTimer(dev)
    timer.mark()
    for _ in collectors.steps(range(args.steps)):  # no optimizer: mark step boundaries explicitly
        out = fn(a)
        timer.mark()
    timer.report(f"tiny_ops_n{args.n}_{args.mode}")
    print(f"checksum {float(out[0, :4].sum()):.3f}")


if __name__ == "__main__":
    main()
