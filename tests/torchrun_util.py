"""Running `traceview collect -- torchrun ...` from tests (CPU, gloo), with one retry for a known torch crash.

On this CPU-only torch build a rank very rarely aborts right after the profiler stops, inside torch
(`malloc(): unsorted double linked list corrupted`, then SIGABRT; seen once in ~50 runs, under load, in CI on
2026-11-29, never reproduced in 30 back-to-back runs). It is torch's own heap corruption, not the collector's,
so such a run is retried once — with a warning in the test report — and any other failure fails at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

# what torchrun / glibc print when a rank dies of a signal rather than an exception
_CRASH = ("SIGABRT", "SIGSEGV", "Signal 6 ", "Signal 11 ", "corrupted", "double free", "Segmentation fault")


def collect_env() -> dict[str, str]:
    """The environment for a `traceview collect` subprocess: no collector settings inherited from a profiled
    parent, one OpenMP thread (tiny ops: thread start-up would dominate on a 2-core runner)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TRACEVIEW_COLLECT", None)
    env.pop("TRACEVIEW_COLLECT_PID", None)
    return env


def torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def crashed(r: subprocess.CompletedProcess) -> bool:
    return r.returncode != 0 and any(s in r.stderr for s in _CRASH)


def run_collect(argv: list[str], run_dir: Path, **kw) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, **kw); once more if a rank crashed in torch."""
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if crashed(r):
        tail = "\n".join(line for line in r.stderr.splitlines() if any(s in line for s in _CRASH))[-600:]
        warnings.warn(f"a torchrun rank crashed inside torch; retrying once:\n{tail}", stacklevel=2)
        shutil.rmtree(run_dir, ignore_errors=True)
        r = subprocess.run(argv, capture_output=True, text=True, **kw)
    return r
