"""When a job's step time has settled: the collector's wait phase lasts until then (`traceview collect --settle`).

A job's first steps run at another pace than its steady state: the GPU's clocks ramp up from idle, cuBLAS and
cuDNN pick their algorithms on first use, the caching allocator grows, Python's adaptive interpreter specialises
the loop, and a DataLoader's prefetch buffer drains (the first batches were ready; later ones wait for the
workers). Steps timed then are a wrong unprofiled reference for the profiler's cost, and a trace recorded then is
not the job's steady state. Measured on an H200 and an H100 (`sample_traces/ab_traced`, the collector's five to
eight wait steps against the same program's steady rounds later in the process): a BERT layer's 1.8 ms step was
still 2.4-3.0 ms in its wait steps (1.43x; 1.64x on the H100), a small GPT-2's 16.3 ms step 17-25 ms (1.17x); most
device-bound steps were within 1 %.

The rule: after at least `wait` unprofiled steps, compare the median of the last `h` step times with the median of
the `h` before them (`h = max(3, ceil(wait / 2))`, a median of three resists one slow step); the step time has
settled when they differ by at most `tol` (5 %), either way. The capture then starts; the unprofiled reference is
those `2h` steps and the ones until the capture, and the steps before them are kept apart (`settle_step_ms`).
A job whose step time never settles within `max_s` seconds is captured then, with a warning.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from traceview.ingest.manifest import SETTLE_TOL as TOL
from traceview.ingest.manifest import settle_half as half
from traceview.ingest.manifest import step_trend

MAX_S = 30.0
ENV = "TRACEVIEW_SETTLE"  # "0": off unless --settle is given (deterministic capture steps, e.g. in a test suite)

__all__ = ["ENV", "MAX_S", "TOL", "applies", "config", "half", "settled", "trend"]


def trend(samples: Sequence[float], wait: int) -> float | None:
    """Median of the last window over the median of the one before it, or None with too few steps yet (the rule
    lives beside the manifest's schema: the analyzer applies it to runs recorded without --settle)."""
    return step_trend(list(samples), wait)


def settled(samples: Sequence[float], wait: int, tol: float = TOL) -> bool:
    """Whether the step time has stopped moving (see the module's docstring)."""
    r = trend(samples, wait)
    return r is not None and abs(r - 1.0) <= tol


def config(flag: bool | None, max_s: float = MAX_S, tol: float = TOL) -> dict[str, Any] | None:
    """The collector's `settle` setting: on unless `flag` is False, or None with $TRACEVIEW_SETTLE=0. `explicit`:
    the user asked for it (a default does not hold on several hosts: `applies`)."""
    explicit = flag is not None
    if flag is None:
        flag = os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    return {"tol": tol, "max_s": max_s, "explicit": explicit} if flag else None


def applies(cfg: dict[str, Any] | None, world_size: int, local_world_size: int) -> bool:
    """Whether a rank settles: asked for, and either on one host or asked for explicitly. Ranks agree on the
    capture's step through a file in the run folder, which ranks on several hosts share only on a shared file
    system: by default a job on several hosts keeps the fixed count, so that its ranks record the same steps."""
    return bool(cfg) and (world_size <= local_world_size or bool(cfg.get("explicit")))
