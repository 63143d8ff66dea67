"""Per-trace memoisation: analyses that several sections ask for run once per Trace object.

Keyed by the trace's identity (held weakly: a freed trace's entries go with it) plus the call's
other arguments, which must be hashable.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def per_trace(fn: F) -> F:
    cache: dict[int, tuple[weakref.ref, dict]] = {}

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
    return wrapper  # type: ignore[return-value]
