"""Per-trace memoisation: analyses that several sections ask for run once per Trace object.

Keyed by the trace's identity (held weakly: a freed trace's entries go with it) plus the call's
other arguments, which must be hashable; `per_windows` for an analysis of a frame of step windows.

Safe for the report's concurrent sections (threads): a call that finds its result being computed by another
thread waits for it rather than computing it again (no lock is held while computing, so analyses that call
one another cannot deadlock; a thread's own nested call of the same key, a recursion, computes as before).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


#: every per-trace cache, for `forget`
_CACHES: list[dict[int, tuple[weakref.ref, dict]]] = []


def forget(trace) -> None:
    """Drop what every per-trace analysis holds for `trace` while the trace itself stays (a job's ranks are kept
    for the job's analysis after their own: each one's derived frames would stay with it, one set per rank);
    what the job asks again is recomputed."""
    for cache in _CACHES:
        hit = cache.get(id(trace))
        if hit is not None and hit[0]() is trace:
            hit[1].clear()


def drop(trace, *fns: Callable[..., Any]) -> None:
    """Drop what the per-trace analyses `fns` hold for `trace` (results no later step of the run reads: their
    memory is not stacked under the later steps' peaks); a later call computes them again."""
    for fn in fns:
        cache = fn._per_trace_cache  # type: ignore[attr-defined]
        hit = cache.get(id(trace))
        if hit is not None and hit[0]() is trace:
            hit[1].clear()


#: guards the stores and the calls in progress (held only for dictionary updates, never while computing)
_LOCK = threading.Lock()
#: (id of a store, key) -> (the computing thread's id, an event set when it is done): other threads wait on it
_RUNNING: dict[tuple[int, Hashable], tuple[int, threading.Event]] = {}
#: per thread: how many `once_in` computations it is inside (`computing`)
_DEPTH = threading.local()


def computing() -> bool:
    """Whether this thread is computing a memoised result: parts it starts then run in it (traceview.parallel),
    so no other thread ever waits for a result whose computation waits for that thread."""
    return getattr(_DEPTH, "n", 0) > 0


def once_in(store: dict, key: Hashable, fn: Callable[[], T]) -> T:
    """`store[key]`, computed as `fn()` and kept there if missing. A thread that finds another one computing the
    same key waits for its result (if that call fails, it computes the result itself); a thread's own nested
    call of a key it is computing (a recursion) computes as a plain dictionary memo would."""
    try:
        return store[key]
    except KeyError:
        pass
    me = threading.get_ident()
    rk = (id(store), key)
    with _LOCK:
        if key in store:
            return store[key]
        busy = _RUNNING.get(rk)
        mine = busy is None or busy[0] == me
        if mine:
            busy = (me, threading.Event())
            _RUNNING.setdefault(rk, busy)
    if not mine:
        busy[1].wait()
        return once_in(store, key, fn)
    _DEPTH.n = getattr(_DEPTH, "n", 0) + 1
    try:
        out = store[key] = fn()
    finally:
        _DEPTH.n -= 1
        with _LOCK:
            if _RUNNING.get(rk) is busy:
                del _RUNNING[rk]
        busy[1].set()
    return out


def per_trace(fn: F) -> F:
    cache: dict[int, tuple[weakref.ref, dict]] = {}
    _CACHES.append(cache)

    @functools.wraps(fn)
    def wrapper(trace, *args):
        key = id(trace)
        hit = cache.get(key)
        if hit is None or hit[0]() is not trace:
            with _LOCK:
                hit = cache.get(key)
                if hit is None or hit[0]() is not trace:
                    hit = cache[key] = (weakref.ref(trace, lambda _r, k=key: cache.pop(k, None)), {})
        return once_in(hit[1], args, lambda: fn(trace, *args))

    wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
    wrapper._per_trace_cache = cache  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def per_windows(*cols: str) -> Callable[[F], F]:
    """`per_trace` for `fn(trace, windows)`, where `windows` is a frame of a few step windows: keyed by the
    values of its columns `cols` (integers), and `fn` is given those columns rebuilt as an Int64 frame (so the
    result never depends on the caller's other columns or dtypes)."""
    def deco(fn: F) -> F:
        import polars as pl

        @per_trace
        def cached(trace, key: tuple[tuple, ...]):
            return fn(trace, pl.DataFrame(dict(zip(cols, map(list, key), strict=True)),
                                          schema={c: pl.Int64 for c in cols}))

        @functools.wraps(fn)
        def wrapper(trace, windows):
            return cached(trace, tuple(tuple(windows[c]) for c in cols))

        wrapper._per_trace_cache = cached._per_trace_cache  # type: ignore[attr-defined]

        return wrapper  # type: ignore[return-value]

    return deco
