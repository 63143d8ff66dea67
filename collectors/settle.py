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

A DataLoader whose workers are slower than the loop is the case the step times cannot show: while its prefetch
buffer (the batches the workers made before the loop caught up: `num_workers x prefetch_factor`, and what they
made while the first steps compiled or autotuned) drains, the steps run at the loop's own pace, flat, and only
when it is empty at the workers'. Measured on an H100 (torchvision RegNetY-800MF, two workers cropping in NumPy):
eight wait steps at 47.9 ms, flat, and a steady state of 48 and 100 ms steps in turn (72 ms on average) once
the buffer ran dry, at the very steps the capture took. So the rule also watches the buffers of the job's
multi-process DataLoader iterators (`LoaderWatch`): a window in which they held at least one batch fewer on
average than in the window before is still draining, and the step time has not settled then. An empty buffer
(an input-bound steady state) or one that keeps its level has settled. Once empty, the steps alternate: the
batches of `k` workers arrive in turn, so `k - 1` steps find one ready and the next waits (48 and 100 ms there);
the windows are then whole numbers of such periods and compared by their means, and the reference is the mean
over whole periods (the pace the loop keeps; the median of a fast, fast, slow pattern is the fast step).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from traceview.ingest.manifest import SETTLE_TOL as TOL
from traceview.ingest.manifest import SLOW_X, recurring_slow_steps, step_trend
from traceview.ingest.manifest import settle_half as half
from traceview.ingest.manifest import settle_window as window

MAX_S = 30.0
ENV = "TRACEVIEW_SETTLE"  # "0": off unless --settle is given (deterministic capture steps, e.g. in a test suite)

__all__ = ["ENV", "MAX_S", "MAX_ACTIVE", "SLOW_X", "TOL", "LoaderWatch", "applies", "config", "draining", "half", "lengthen",
           "settled", "trend", "window"]

#: the most steps a capture is lengthened to so that it holds a recurring slow step (`lengthen`)
MAX_ACTIVE = 32


def trend(samples: Sequence[float], wait: int, period: int = 1) -> float | None:
    """Median of the last window over the median of the one before it (their means over whole periods of a loop
    fed by `period` DataLoader workers), or None with too few steps yet (the rule lives beside the manifest's
    schema: the analyzer applies it to runs recorded without --settle)."""
    return step_trend(list(samples), wait, period)


def settled(samples: Sequence[float], wait: int, tol: float = TOL, period: int = 1) -> bool:
    """Whether the step time has stopped moving (see the module's docstring)."""
    r = trend(samples, wait, period)
    return r is not None and abs(r - 1.0) <= tol


def lengthen(samples: Sequence[float], active: int) -> int | None:
    """The steps to record where the settling steps show slow steps that recur — more than `SLOW_X` times the
    fastest, at least two after the first fast step (`recurring_slow_steps`: a per-shape setup, a data stall,
    periodic work) — at most `gap` steps apart, so that `gap` consecutive steps hold one: a capture of
    `active` steps shorter than that may hold none, and the trace then cannot show what a slow step runs (the
    padded BERT's three-step capture between its 8x steps). None when none recur or `active` already covers the
    gap; at most MAX_ACTIVE steps (a rarer slow step is said in the closing warning instead)."""
    at = recurring_slow_steps([float(x) for x in samples if x > 0])
    if at is None:
        return None
    gap = max(b - a for a, b in zip(at, at[1:], strict=False))
    return gap if active < gap <= MAX_ACTIVE else None


def draining(levels: Sequence[float], wait: int, period: int = 1) -> bool:
    """Whether the DataLoaders' prefetch buffers were still draining: the mean batches ready at the last window's
    step boundaries (`window(wait, period)`) at least one below the mean of as many before them (a buffer that steps
    down one batch every few steps drains too; one that only wobbles between two levels does not)."""
    h = window(wait, period)
    if len(levels) < 2 * h:
        return False
    last, before = levels[-h:], levels[-2 * h:-h]
    return sum(before) / h - sum(last) / h >= 1.0


class LoaderWatch:
    """The job's multi-process DataLoader iterators (`torch.utils.data.dataloader._MultiProcessingDataLoaderIter`,
    registered as they are created) and the batches their prefetch buffers hold ready: the ones in the data queue
    (the pin-memory thread's, or the workers') and the ones received out of order. A private class of torch: where
    it or its fields are missing, nothing is watched (`ready()` is None) and the step times alone decide."""

    def __init__(self) -> None:
        import weakref

        self._live: weakref.WeakSet = weakref.WeakSet()
        self._undo = None

    def install(self) -> None:
        try:
            from torch.utils.data import dataloader
        except ImportError:  # pragma: no cover - torch without its data package
            return
        cls = getattr(dataloader, "_MultiProcessingDataLoaderIter", None)
        if cls is None or self._undo is not None:
            return
        orig, live = cls.__init__, self._live

        def init(it: Any, *a: Any, **k: Any) -> None:
            orig(it, *a, **k)
            live.add(it)

        cls.__init__ = init
        self._undo = (cls, orig)

    def uninstall(self) -> None:
        if self._undo is not None:
            cls, orig = self._undo
            cls.__init__ = orig
            self._undo = None

    def workers(self) -> int:
        """The most worker processes of a live iterator (its batches arrive from them in turn), 1 without one."""
        ks = [int(getattr(it, "_num_workers", 1) or 1) for it in list(self._live) if not getattr(it, "_shutdown", True)]
        return max(ks, default=1)

    def ready(self) -> int | None:
        """Batches ready in the live iterators' buffers; None without one (or where torch's fields differ)."""
        total, seen = 0, False
        for it in list(self._live):
            if getattr(it, "_shutdown", True):
                continue
            try:
                queued = it._data_queue.qsize()
                early = sum(1 for v in it._task_info.values() if len(v) == 2)
            except (AttributeError, NotImplementedError, OSError, RuntimeError):
                continue
            total, seen = total + int(queued) + early, True
        return total if seen else None


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
