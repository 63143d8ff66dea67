"""The profiler's own cost, estimated from the trace: what a step would take without the profiler.

Kineto records every op, runtime call and (with stacks) Python call on the host, and each record costs host
time the unprofiled run does not pay. On a host-bound step that cost lengthens the step one for one, and the GPU
idles meanwhile — it reads as launch-bound. On a GPU-bound step the host runs ahead and the cost is hidden.

Model: overhead per step = Σ cost(kind) × recorded host events of that kind per step, with a per-event cost
calibrated on the project's own collected runs (sample_traces/collected2, group `calibration`: profiled vs
unprofiled CUDA-event step times, tests/test_profiling_model.py); the unprofiled step is then
max(GPU busy time per step, step period − overhead). Error on the 44 held-out collected runs (every other run with
a manifest: twins, labelled runs, collected/, the two-GPU NCCL runs): median 7 %, 90th percentile 54 % (the
traced step itself: median 8 %, 90th percentile 101 %). The large misses are compiled/CUDA-graph steps whose
profiled cost is not per recorded event (Inductor's and CUPTI's own work) and host-speed noise between
processes (±25 % on launch-bound loops, docs/profiling.md).
"""

from __future__ import annotations

import polars as pl

from ..model import RUNTIME_CATS, Trace
from .timeline import step_busy

#: host cost of one recorded event (µs), calibrated on sample_traces/collected2 (group `calibration`)
COST_US = {"op": 4.0, "runtime": 1.5, "python": 6.0}


def events_per_step(trace: Trace, steps: pl.DataFrame) -> dict[str, float]:
    """Recorded host events per step by kind (op: cpu_op and user annotations; runtime; python), counted in the
    steps' host span."""
    n = steps.height
    if n == 0:
        return {k: 0.0 for k in COST_US}
    lo, hi = int(steps["cpu_ts"].min()), int(steps["cpu_end"].max())
    cats = {"op": ["cpu_op", "user_annotation"], "runtime": list(RUNTIME_CATS), "python": ["python_function"]}
    # one pass of boolean sums (a group-by of every host row's category string costs ~1.6x)
    inside = (pl.col("ts") >= lo) & (pl.col("ts") < hi)
    got = trace.host.select(**{k: (inside & pl.col("cat").is_in(c)).sum() for k, c in cats.items()}).row(0, named=True)
    return {k: round(got[k] / n, 1) for k in COST_US}


def estimate(trace: Trace, steps: pl.DataFrame) -> dict:
    """{events_per_step, overhead_per_step_us, gpu_busy_per_step_us, traced_step_us,
    estimated_unprofiled_step_us} for the given steps (periods)."""
    n = steps.height
    ev = events_per_step(trace, steps)
    over = sum(COST_US[k] * v for k, v in ev.items())
    traced = float((steps["end"] - steps["ts"]).sum()) / n / 1000 if n else 0.0
    busy = step_busy(trace, steps)
    gpu = float(busy.group_by("step").agg(pl.col("busy").max())["busy"].sum()) / n / 1000 if n and busy.height else 0.0
    est = max(gpu, traced - over)
    return {"events_per_step": ev, "overhead_per_step_us": round(over, 3), "gpu_busy_per_step_us": round(gpu, 3),
            "traced_step_us": round(traced, 3), "estimated_unprofiled_step_us": round(est, 3)}
