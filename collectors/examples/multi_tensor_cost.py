"""Measure the device time of one optimizer step per implementation — AdamW single-tensor (`foreach=False`),
foreach and fused — over parameter lists of n tensors of s elements (FP32), and the kernels each launches: what
a fix that replaces the single-tensor loop leaves on the device. Kernel times from the profiler's own trace (the
device's durations, whatever the host's speed), 3 steps after warm-up. Before each profiled step a 256 MiB
buffer is zeroed (its fill kernel left out of the sums) so the step reads its tensors from HBM, as a training
step does after its forward and backward (the H200's L2 holds 50 MB: a small list stepped again and again would
stay there). Prints one JSON line per case (`MTA {...}`).

python -m collectors.examples.multi_tensor_cost
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch

IMPLS = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def kernels(params: list[torch.Tensor], impl: str, steps: int, flush: torch.Tensor | None) -> tuple[int, float]:
    """(kernels per step, device µs per step) of AdamW(`impl`) over `params`."""
    opt = torch.optim.AdamW(params, lr=1e-3, **IMPLS[impl])
    for _ in range(3):
        opt.step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            if flush is not None:
                flush.zero_()
            opt.step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    k = [e for e in ev if e.get("cat") == "kernel" and "FillFunctor" not in e.get("name", "")]
    return len(k) / steps, sum(float(e["dur"]) for e in k) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-flush", action="store_true", help="leave L2 warm between steps")
    args = ap.parse_args()
    flush = None if args.no_flush else torch.empty(256 * 2**20 // 4, device="cuda")
    for n in (8, 24, 76, 148):
        for s in (512, 16384, 262144, 2359296):
            params = [torch.nn.Parameter(torch.randn(s, device="cuda")) for _ in range(n)]
            for p in params:
                p.grad = torch.randn_like(p)
            row = {"n": n, "numel": s, "param_mb": round(n * s * 4 / 2**20, 3), "l2_flushed": flush is not None}
            for impl in IMPLS:
                row[f"{impl}_kernels"], us = kernels(params, impl, args.steps, flush)
                row[f"{impl}_us"] = round(us, 2)
            print("MTA " + json.dumps(row), flush=True)
            del params
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
