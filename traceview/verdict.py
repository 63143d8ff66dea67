"""The verdict of a trace: the `classification` section (classifier shares per trace and step) and the
one-line `verdict_text`, both from the partition in the trace's `RuleContext` (computed once)."""

from __future__ import annotations

from . import classify
from .ruleapi import RuleContext

VERDICT_TEXT = {
    "gpu_compute": "compute-bound: the GPU is busy in compute-bound kernels (GEMM/conv/attention); speed-ups come "
                   "from better kernels, lower precision or less work, not from the host",
    "gpu_memory": "memory-bound: the GPU is busy in kernels limited by memory bandwidth; fuse elementwise ops and "
                  "avoid round trips through HBM",
    "communication": "communication-bound: exposed NCCL collectives with no compute to hide them",
    "input": "input-bound: the GPU idles while the host loads data",
    "host_sync": "sync-bound: the GPU idles after the host blocks on it (.item(), .cpu(), nonzero, synchronize)",
    "cpu_launch": "CPU/launch-bound: the GPU idles because the CPU launches kernels too slowly",
    "other_idle": "idle for other reasons (launch latency, cross-stream waits)",
}

NO_GPU = {"dominant": None, "shares": {}, "steps": [], "note": "no GPU activity: nothing to classify"}


def classification_section(ctx: RuleContext | None) -> dict:
    """{dominant, shares, time_us, window_us, steps, device, roofline, analyzed_steps}; `ctx` None: no GPU."""
    if ctx is None:
        return dict(NO_GPU)
    out = classify.classification(ctx.trace, ctx.steps, ctx.part, ctx.kb)
    out["analyzed_steps"] = ctx.steps["step"].to_list()
    return out


def verdict_text(c: dict, n_steps: int) -> str | None:
    if not c.get("dominant"):
        return None
    top = sorted(((v, k) for k, v in c["shares"].items() if v > 0), key=lambda x: (-x[0], x[1]))[:3]
    parts = ", ".join(f"{k} {v:.1f} %" for v, k in top)
    return (f"Verdict: {VERDICT_TEXT[c['dominant']]} ({parts} of {c['window_us'] / 1000:,.2f} ms over "
            f"{n_steps} step(s))")
