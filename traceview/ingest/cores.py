"""How many threads the C scanner parses one trace with: `TRACEVIEW_THREADS`, else the cores this process may use."""

from __future__ import annotations

import os

MAX_THREADS = 256  # the scanner's own bound (_scan.c MAX_THREADS)


def scan_threads() -> int:
    """`TRACEVIEW_THREADS` (a positive integer; anything else is ignored), else the CPUs this process may run
    on (`taskset -c 0`: 1), capped at MAX_THREADS."""
    v = os.environ.get("TRACEVIEW_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return min(int(v), MAX_THREADS)
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))
