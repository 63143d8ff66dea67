"""Per-trace memoisation: analyses that several sections ask for run once per Trace object.

Keyed by the trace's identity (held weakly: a freed trace's entries go with it) plus the call's
other arguments, which must be hashable; `per_windows` for an analysis of a frame of step windows.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


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


def per_trace(fn: F) -> F:
    cache: dict[int, tuple[weakref.ref, dict]] = {}
    _CACHES.append(cache)

    @functools.wraps(fn)
    def wrapper(trace, *args):
        key = id(trace)
        hit = cache.get(key)
        if hit is None or hit[0]() is not trace:
            hit = cache[key] = (weakref.ref(trace, lambda _r, k=key: cache.pop(k, None)), {})
        per = hit[1]
        if args not in per:
            per[args] = fn(trace, *args)
        return per[args]

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
