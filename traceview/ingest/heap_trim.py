"""Giving the C heap's free pages back to the system between the analysis's phases (glibc only).

numpy takes its arrays from the C library's malloc. glibc keeps what is freed in its heap — and after the first
large free it raises its mmap threshold, so later large arrays come from the heap too —, where a small block
that outlives the temporaries around it pins their pages: on the 132 MB trace ~25 MB of freed numpy temporaries
stayed resident through the analysis, counted in its peak. `malloc_trim(0)` returns every free page of the
heap, not only its top (glibc >= 2.8); elsewhere (musl, macOS, Windows) this is a no-op.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: below this many events the heap holds little to give back: no call (and no ctypes import on a tiny trace)
MIN_EVENTS = 1 << 16


@functools.cache
def _libc() -> Any:  # a ctypes.CDLL, or None
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    return getattr(_libc(), "malloc_trim", None)


def release(events: int) -> None:
    """Give the heap's free pages back after a phase that freed large temporaries (`events`: the trace's size)."""
    if events >= MIN_EVENTS and (trim := _malloc_trim()) is not None:
        trim(0)
