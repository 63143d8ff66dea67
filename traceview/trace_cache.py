"""Loaded traces kept for re-analysis (the app switching steps), bounded by their size in memory.

One cache per user session: what one session loaded is neither visible to nor evicted by another, and
a session holds at most `max_bytes` of frames (least recently used first out; a trace bigger than the
whole budget is used once and not kept).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

import polars as pl

from .model import Trace


def trace_bytes(t: Trace) -> int:
    """Estimated memory of a trace's frames."""
    return sum(v.estimated_size() for v in vars(t).values() if isinstance(v, pl.DataFrame))


class TraceCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[Trace, int]] = OrderedDict()

    @property
    def nbytes(self) -> int:
        return sum(n for _t, n in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable, load: Callable[[], Trace]) -> Trace:
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit[0]
        t = load()
        n = trace_bytes(t)
        if n <= self.max_bytes:
            while self._items and self.nbytes + n > self.max_bytes:
                self._items.popitem(last=False)
            self._items[key] = (t, n)
        return t
