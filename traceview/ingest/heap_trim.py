"""Giving the C heap's free pages back to the system between the analysis's phases (glibc only).

numpy takes its arrays from the C library's malloc. glibc keeps what is freed in its heap — and after the first
large free it raises its mmap threshold, so later large arrays come from the heap too —, where a small block
that outlives the temporaries around it pins their pages: on the 132 MB trace ~25 MB of freed numpy temporaries
stayed resident through the analysis, counted in its peak. `malloc_trim(0)` returns every free page of the
heap, not only its top (glibc >= 2.8); elsewhere (musl, macOS, Windows) this is a no-op.

A trim comes between phases; inside one, the heap's holes still pile up under the phase's peak. On a large trace
(`map_large`) every array of at least MAP_BYTES is given its own mapping instead (glibc's mmap threshold, fixed:
no longer raised by the first large free), which the system takes back the moment numpy frees it.

Threads: glibc gives each new thread a heap (arena) of its own, whose freed pages a trim does not all give back;
where the C scanner parses in several threads the process keeps to one (`one_arena`, `worker_env`).
"""

from __future__ import annotations

import functools
import os
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


#: from this many events (host and GPU rows) an analysis maps its large arrays (`map_large`): the 132 MB benchmark
#: trace (~0.4 M rows) keeps glibc's default, whose heap reuses a freed array's pages without faulting them in again
MAP_EVENTS = 1 << 21
#: the smallest allocation given its own mapping there: numpy's arrays of a column (1 M rows of one byte and up)
MAP_BYTES = 1 << 20
#: mallopt's parameter number for the mmap threshold (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3


def map_large(events: int) -> None:
    """From MAP_EVENTS events on, have glibc map each allocation of MAP_BYTES or more on its own (process-wide,
    for the rest of the run), and trim what the heap already holds. glibc's default threshold starts at 128 KiB
    and rises to each large block freed (up to 32 MiB), after which a trace's column arrays come from the heap,
    where the freed ones stay resident between the live ones: at 10 M tiny events ~150 MiB under the rules'
    peak (bench/README.md, eleventh pass)."""
    if events < MAP_EVENTS or (libc := _libc()) is None or (mallopt := getattr(libc, "mallopt", None)) is None:
        return
    mallopt(_M_MMAP_THRESHOLD, MAP_BYTES)
    release(events)


def _malloc_trim() -> Callable[[int], int] | None:
    return getattr(_libc(), "malloc_trim", None)


def release(events: int) -> None:
    """Give the heap's free pages back after a phase that freed large temporaries (`events`: the trace's size)."""
    if events >= MIN_EVENTS and (trim := _malloc_trim()) is not None:
        trim(0)


#: mallopt's parameter number for the most arenas glibc makes (glibc's malloc.h)
_M_ARENA_MAX = -8


def one_arena() -> bool:
    """Have glibc serve every thread created from now on from the heaps (arenas) that exist, instead of giving each
    its own (up to 8 per core), for the rest of the run; whether it could. The C scanner's worker threads
    (`cores.scan_threads()`, one per core) each parse their byte range into buffers of their own; what a worker
    frees stays in its thread's arena, where `malloc_trim` does not give all of it back: on 10 M tiny events with
    16 scan threads the analysis's peak RSS was 50-110 MiB above one thread's (2-core box, two runs each; in one
    arena it was one thread's again, no slower). To be called before the threads start (`cli.main`)."""
    if (libc := _libc()) is None or (mallopt := getattr(libc, "mallopt", None)) is None:
        return False
    return bool(mallopt(_M_ARENA_MAX, 1))


def user_arenas() -> bool:
    """Whether the user set glibc's arenas (`MALLOC_ARENA_MAX`, or `arena_max` in `GLIBC_TUNABLES`): theirs stands."""
    return "MALLOC_ARENA_MAX" in os.environ or "malloc.arena_max" in os.environ.get("GLIBC_TUNABLES", "")


def worker_env(scan_threads: int) -> dict[str, str]:
    """The environment that gives a spawned worker process, whose C scanner runs `scan_threads` threads, one glibc
    arena from its start (glibc reads `MALLOC_ARENA_MAX` as it starts: `one_arena` for a process that is not ours
    to call): empty for one thread, or where the user set the arenas."""
    return {} if scan_threads < 2 or user_arenas() else {"MALLOC_ARENA_MAX": "1"}
