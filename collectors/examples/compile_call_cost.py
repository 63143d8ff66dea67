"""Measure what one call of a `torch.compile`d function costs the host, against the eager ops it replaces: a
chain of k pointwise ops on a tensor too small to keep the GPU busy (the loop is host-bound, so its wall time per
call is the host's), eager, compiled (Inductor: one fused Triton kernel) and compiled with
mode="reduce-overhead" (a CUDA graph), forward only and forward + backward. No profiler: wall clock over `--calls`
calls after warm-up, the median of `--reps` repeats. Prints one JSON line per case (`CALL {...}`).

The eager rows' slope over k is one eager pointwise op's host time; a compiled row's time is Dynamo's guards, the
AOT and Inductor wrappers and the kernel's launch — what a fix that compiles eager ops adds back to the host.

`--blocks`: what each kernel a compiled graph keeps costs the host, beside the call itself. A compiled function of
n blocks, each a row normalization (`norm`: one Triton kernel a block, the next block's reduction keeps it apart)
or a GEMM and its activation (`mm`: one extern cuBLAS call and one Triton kernel a block), on tensors small enough
that the host decides the call. Each row counts the Triton kernels Inductor generated for it
(`torch._inductor.metrics.generated_kernel_count`, forward and backward graphs) and times the same blocks eager;
the slope of the compiled time over the kernels is one kernel's host cost in a compiled graph (`BLOCKS {...}`).

python -m collectors.examples.compile_call_cost [--blocks norm,mm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def chain(k: int):
    def f(x: torch.Tensor) -> torch.Tensor:
        for j in range(k):
            x = x * 1.001 if j % 2 == 0 else x + 0.5
        return x

    return f


def blocks(kind: str, n: int, d: int):
    """n blocks of `kind` on a (d, d) input (`norm`: x - mean(x) scaled; `mm`: relu(x @ w_j))."""
    ws = [torch.randn(d, d, device="cuda") / d**0.5 for _ in range(n)] if kind == "mm" else []

    def f(x: torch.Tensor) -> torch.Tensor:
        for j in range(n):
            x = (x - x.mean(-1, keepdim=True)) * 1.01 if kind == "norm" else torch.relu(x @ ws[j])
        return x

    return f


def per_call_us(fn, x: torch.Tensor, calls: int, reps: int, backward: bool) -> float:
    def once() -> None:
        y = fn(x)
        if backward:
            y.sum().backward()

    for _ in range(50):
        once()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            once()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--numel", type=int, default=4096)
    ap.add_argument("--ks", default="1,2,4,8,16,32", help="chain lengths (comma-separated)")
    ap.add_argument("--only", choices=("forward", "backward"), default=None)
    ap.add_argument("--blocks", default=None, help="per-kernel mode: block kinds (comma-separated: norm, mm)")
    ap.add_argument("--ns", default="2,8,32", help="per-kernel mode: blocks per function (comma-separated)")
    ap.add_argument("--dim", type=int, default=64, help="per-kernel mode: the (dim, dim) input")
    args = ap.parse_args()
    torch._dynamo.config.cache_size_limit = 64
    if args.blocks:
        per_kernel(args)
        return
    for backward in {"forward": (False,), "backward": (True,)}.get(args.only, (False, True)):
        for k in (int(v) for v in args.ks.split(",")):
            x = torch.randn(args.numel, device="cuda", requires_grad=backward)
            row = {"k": k, "backward": backward, "numel": args.numel}
            row["eager_us"] = per_call_us(chain(k), x, args.calls, args.reps, backward)
            for mode in ("default", "reduce-overhead"):
                torch._dynamo.reset()
                fn = torch.compile(chain(k), mode=None if mode == "default" else mode)
                try:
                    row[f"{mode}_us"] = per_call_us(fn, x, args.calls, args.reps, backward)
                except Exception as e:  # noqa: BLE001 (a mode this torch cannot run here: say so, go on)
                    row[f"{mode}_error"] = f"{type(e).__name__}: {e}"[:200]
            print("CALL " + json.dumps({a: round(b, 2) if isinstance(b, float) else b for a, b in row.items()}),
                  flush=True)


def per_kernel(args) -> None:
    from torch._inductor import metrics

    for backward in {"forward": (False,), "backward": (True,)}.get(args.only, (False, True)):
        for kind in args.blocks.split(","):
            for n in (int(v) for v in args.ns.split(",")):
                x = torch.randn(args.dim, args.dim, device="cuda", requires_grad=backward)
                f = blocks(kind, n, args.dim)
                row = {"kind": kind, "n": n, "backward": backward, "dim": args.dim}
                row["eager_us"] = per_call_us(f, x, args.calls, args.reps, backward)
                torch._dynamo.reset()
                metrics.reset()
                fn = torch.compile(f)
                row["compiled_us"] = per_call_us(fn, x, args.calls, args.reps, backward)
                row["triton_kernels"] = metrics.generated_kernel_count
                # (cuBLAS calls: x @ w_j forward, grad @ w_j.T backward; the weights take no gradient)
                row["extern_calls"] = (n * (2 if backward else 1)) if kind == "mm" else 0
                print("BLOCKS " + json.dumps({a: round(b, 2) if isinstance(b, float) else b for a, b in row.items()}),
                      flush=True)


if __name__ == "__main__":
    main()
