"""How many threads the C scanner parses one trace with: `TRACEVIEW_THREADS`, else the cores this process may use."""

from __future__ import annotations

import os

MAX_THREADS = 256  # the scanner's own bound (_scan.c MAX_THREADS)
# below this many usable cores the default is one thread: on 2 cores the reader's gunzip, the scan and the main
# thread's imports already fill them, and a split scan costs ~20 % more CPU (its joins; bench/README.md)
MIN_CORES = 4


def scan_threads() -> int:
    """`TRACEVIEW_THREADS` (a positive integer; anything else is ignored), else the CPUs this process may run
    on (`taskset -c 0`: 1; fewer than MIN_CORES: 1), capped at MAX_THREADS."""
    v = os.environ.get("TRACEVIEW_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return min(int(v), MAX_THREADS)
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return min(n, MAX_THREADS) if n >= MIN_CORES else 1
