"""Threads for the independent parts of one trace's analysis (issue 32: all cores on one trace).

The analyses are Python driving polars and numpy, which release the GIL while they work: parts that do not read
one another's results (the rules' checks, the overview tables beside the rules' context) overlap on several
cores. Results come back in the order asked, so a document never depends on which thread finished first;
per-trace results shared by the parts are computed once (traceview.memo waits for a result another thread is
computing).

One pool per process of `TRACEVIEW_THREADS` threads (it sets the scanner's threads too); without it the parts run
in the calling thread (DEFAULT_WORKERS: the threads cost memory for little wall time, measured below). A part running in the pool that asks for more parts runs them
itself, in order: no part waits on a pool that its own waiting keeps full; so does a thread computing a memoised
result (traceview.memo), as another thread may be waiting for that result.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .memo import computing

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_inside = threading.local()


#: the analyses run in one thread unless TRACEVIEW_THREADS asks for more. Measured on the 16-core GPU host (132 MB
#: trace, 3 interleaved runs each, TRACEVIEW_THREADS=1 vs 16, which sets the scanner's threads too): 1.86-2.03 s
#: vs 1.77-1.92 s wall (-5 %) for +85 MB peak RSS (293-301 vs 379-384 MB: the parts hold their frames at once);
#: at 10 M tiny events and on the 1 GB tiled trace the default with threads peaked at 3.64x and 1.64x the JSON
#: (bench/RESULTS.md targets 1.5x and 1.2x). On the busy 2-core box two threads took 9 % more CPU (0.72 vs
#: 0.66 s of analysis) and no less wall time. Memory bounded by the work is a target; 5 % of wall is not worth it
DEFAULT_WORKERS = 1


def workers() -> int:
    """Threads for one trace's parts: TRACEVIEW_THREADS (a positive integer), else DEFAULT_WORKERS."""
    env = os.environ.get("TRACEVIEW_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return DEFAULT_WORKERS


def _get_pool() -> ThreadPoolExecutor | None:
    global _pool
    if workers() < 2 or getattr(_inside, "flag", False) or computing():
        return None
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="traceview")
        return _pool


def _marked(fn: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        _inside.flag = True
        try:
            return fn()
        finally:
            _inside.flag = False
    return run


class _Done:
    """A part run in the calling thread: its result (or exception) kept for `result()`."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        try:
            self._value, self._error = fn(), None
        except BaseException as e:  # noqa: BLE001 - raised again by result(), where a Future would raise it
            self._value, self._error = None, e

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def start(fn: Callable[[], T]) -> Future[T] | _Done:
    """`fn` started beside the caller (in the calling thread, at once, without a pool); `.result()` joins it."""
    pool = _get_pool()
    return _Done(fn) if pool is None else pool.submit(_marked(fn))


def run_all(fns: Sequence[Callable[[], T]]) -> list[T]:
    """Each of `fns` called, concurrently where a pool is available; their results in the order of `fns` (the
    first exception, in that order, is raised once all have finished)."""
    pool = _get_pool()
    if pool is None or len(fns) < 2:
        return [fn() for fn in fns]
    futures = [pool.submit(_marked(fn)) for fn in fns]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e
    return [f.result() for f in futures]
