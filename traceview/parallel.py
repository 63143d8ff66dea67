"""Threads for the independent parts of one trace's analysis (issue 32: all cores on one trace).

The analyses are Python driving polars and numpy, which release the GIL while they work: parts that do not read
one another's results (the rules' checks, the overview tables beside the rules' context) overlap on several
cores. Results come back in the order asked, so a document never depends on which thread finished first;
per-trace results shared by the parts are computed once (traceview.memo waits for a result another thread is
computing).

One pool per process, sized by the cores this process may use, from MIN_CORES of them (`TRACEVIEW_THREADS`
overrides, as it does the scanner's threads; 1 runs everything in the calling thread, as before). A part running in the pool that asks for more parts runs them
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


#: below this many usable cores the default is one thread (as the scanner's, ingest/cores.py): on the busy
#: 2-core development box (load 5-12) the parts in 2 threads took 9 % more CPU (0.72 vs 0.66 s of analysis on
#: the 132 MB trace, medians of 7 interleaved runs: polars' own pool and the GIL shared by two callers) and no
#: less wall time
MIN_CORES = 4


def workers() -> int:
    """Threads for one trace's parts: TRACEVIEW_THREADS (a positive integer), else the cores this process may
    use (fewer than MIN_CORES: 1)."""
    env = os.environ.get("TRACEVIEW_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not Linux)
        n = os.cpu_count() or 1
    return n if n >= MIN_CORES else 1


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
