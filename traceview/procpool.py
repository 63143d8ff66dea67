"""Worker processes for independent traces (the rank files of a job, a batch of runs).

Spawned, not forked: polars runs a thread pool that a fork would copy in an undefined state. A spawned worker
normally re-imports the parent's `__main__` — under Streamlit (and its AppTest) that is the app script, which a
worker must never run — so the parent's main module is hidden while the workers start; they start during the
submits, all made here.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import types
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any


def start(fn: Callable[..., Any], calls: Iterable[tuple], workers: int,
          env: dict[str, str] | None = None) -> tuple[ProcessPoolExecutor, list[Future]]:
    """(the pool, one future per call of `fn`), in call order. `env` is set for the workers only."""
    main = sys.modules.get("__main__")
    saved = {k: os.environ.get(k) for k in env or {}}
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__ / __spec__: nothing to re-import
    os.environ.update(env or {})
    try:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        futures = [pool.submit(fn, *args) for args in calls]
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return pool, futures
