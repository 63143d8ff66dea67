"""Measure the device time of one optimizer step per implementation — AdamW single-tensor (`foreach=False`),
foreach and fused — over parameter lists of n tensors of s elements (FP32), and the kernels each launches: what
a fix that replaces the single-tensor loop leaves on the device. Kernel times from the profiler's own trace (the
device's durations, whatever the host's speed), 3 steps after warm-up. Prints one JSON line per case (`MTA {...}`).

python -m collectors.examples.multi_tensor_cost
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch

IMPLS = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def kernels(params: list[torch.Tensor], impl: str, steps: int) -> tuple[int, float]:
    """(kernels per step, device µs per step) of AdamW(`impl`) over `params`."""
    opt = torch.optim.AdamW(params, lr=1e-3, **IMPLS[impl])
    for _ in range(3):
        opt.step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            opt.step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    k = [e for e in ev if e.get("cat") == "kernel"]
    return len(k) / steps, sum(float(e["dur"]) for e in k) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    for n in (8, 24, 76, 148):
        for s in (512, 16384, 262144, 2359296):
            params = [torch.nn.Parameter(torch.randn(s, device="cuda")) for _ in range(n)]
            for p in params:
                p.grad = torch.randn_like(p)
            row = {"n": n, "numel": s, "param_mb": round(n * s * 4 / 2**20, 3)}
            for impl in IMPLS:
                row[f"{impl}_kernels"], us = kernels(params, impl, args.steps)
                row[f"{impl}_us"] = round(us, 2)
            print("MTA " + json.dumps(row), flush=True)
            del params
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
