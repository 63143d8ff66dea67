"""Run Holistic Trace Analysis (HTA) live on one trace file and return plain dicts.

Test-only helper. HTA is the ``hta`` package of the PyPI distribution ``traceinsight`` (0.6.1; a dev
dependency of this project). Tests compare traceview's numbers with what HTA computes *now*, on the
same file; nothing is read from a stored table.

If the ``hta`` package is not installed the helpers call ``pytest.skip``. Any other failure (HTA
installed but one of its dependencies missing, HTA raising on a trace) propagates: it is never a skip.

How HTA is driven
-----------------
HTA loads a trace *directory* (``TraceAnalysis(trace_dir=...)``) and gives each file a rank: it scans the
file line by line for the regex ``"rank":\\s+(\\d+)`` (the first match anywhere, normally
``distributedInfo.rank``; compact ``"rank":0`` does not match) and uses rank 0 when nothing matches.
We put a symlink to the one file (a copy where symlinks are not possible) into a temporary directory,
load it, and read back the single rank HTA found.

Conventions HTA applies (they explain differences from an exact analyzer)
-------------------------------------------------------------------------
* **Rounding.** When ``ts`` is float (µs with ns decimals: every modern trace), HTA computes
  ``end = ts + dur`` and then ``ts = ceil(ts)``, ``end = floor(end)``, ``dur = end - ts``
  (``hta/common/trace_parser.py::round_down_time_stamps``). Every event loses up to 2 µs; sub-µs kernels
  get ``dur`` 0 or -1, so on launch-bound traces HTA's busy time is far too low. With
  ``HTA_DISABLE_NS_ROUNDING=1`` nothing is rounded. HTA reads the variable once, into the singleton
  ``hta.configs.env_options.HTAEnvOptions`` (created on first use), so ``ns_rounding=`` below sets both
  the variable and the singleton before the ``TraceAnalysis`` constructor runs, and restores them after.
* **Last step.** ``include_last_profiler_step=False`` (HTA's default) applies only when the trace has at
  least 2 distinct ``ProfilerStep#N`` names. Then HTA keeps the "CPU" rows (every row that is not a GPU
  kernel/memcpy/memset/sync, which includes ``gpu_user_annotation`` rows) whose ts is before the latest
  ProfilerStep start, plus the GPU rows whose ``correlation`` matches one of those rows. Because the
  GPU-side ``ProfilerStep#N`` annotation counts as a CPU row, "the latest ProfilerStep start" is often
  the *GPU* annotation of the last step, which starts after the CPU has issued the whole last step: then
  nothing of the last step is dropped. Rows before the first step are kept. Uncorrelated GPU rows are
  dropped. With one step name (or none) nothing is filtered.
* **Temporal breakdown** (``get_temporal_breakdown``): "GPU events" are all rows with ``stream != -1``,
  i.e. kernels, memcpy, memset *and* ``cuda_sync`` rows (Stream/Event Sync on a stream).
  ``kernel_time`` = end of the last merged interval - start of the first; ``idle`` = kernel_time - union
  of all GPU intervals; ``compute`` = union of kernels classified COMPUTATION by name (not nccl*, hip*,
  hccl*, *Memcpy*, *Memset*, dma*, *Sync, ...); ``non_compute`` = the rest (comm, memory, sync).
* **Idle breakdown** (``get_idle_time_breakdown``): per stream, rows with cat kernel/gpu_memcpy/
  gpu_memset (old names Kernel/Memcpy/Memset too), sorted by ts; gap = ts - previous row's end (negative
  gaps are summed as well); **host_wait** if the launching runtime call's ts > previous end;
  **kernel_wait** if not host_wait and gap < ``consecutive_kernel_delay`` = **30 µs** (the docstring says
  ns, the data is µs); **other** otherwise. HTA rounds the result table to 2 decimals.
* All HTA times are µs (integers unless rounding is disabled).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import pytest

IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
_ENV = "HTA_DISABLE_NS_ROUNDING"


def _require_hta():
    """Import HTA's entry point; skip the calling test only when the ``hta`` package is absent."""
    if importlib.util.find_spec("hta") is None:
        pytest.skip("hta (PyPI: traceinsight) is not installed")
    with _quiet():
        from hta.configs.env_options import HTAEnvOptions
        from hta.trace_analysis import TraceAnalysis
    return TraceAnalysis, HTAEnvOptions


@contextlib.contextmanager
def _quiet():
    """Silence HTA's logger and pandas/numpy warnings for the duration of a call."""
    hta_logger = logging.getLogger("hta")
    old_level, old_propagate = hta_logger.level, hta_logger.propagate
    hta_logger.setLevel(logging.CRITICAL + 1)
    hta_logger.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hta_logger.setLevel(old_level)
        hta_logger.propagate = old_propagate


@contextlib.contextmanager
def _ns_rounding(enabled: bool, env_options_cls):
    """Set HTA_DISABLE_NS_ROUNDING (env and HTA's singleton) for the duration of a load."""
    old_env = os.environ.get(_ENV)
    opts = env_options_cls.instance()
    old_flag = opts.disable_ns_rounding()
    os.environ[_ENV] = "0" if enabled else "1"
    opts.set_disable_ns_rounding(not enabled)
    try:
        yield
    finally:
        opts.set_disable_ns_rounding(old_flag)
        if old_env is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = old_env


@functools.lru_cache(maxsize=4)
def _load_cached(path: str, include_last_profiler_step: bool, ns_rounding: bool):
    TraceAnalysis, HTAEnvOptions = _require_hta()
    tmp = tempfile.mkdtemp(prefix="hta_ref_")
    try:
        link = Path(tmp) / Path(path).name
        try:
            link.symlink_to(path)
        except OSError:
            shutil.copyfile(path, link)
        t0 = time.perf_counter()
        with _quiet(), _ns_rounding(ns_rounding, HTAEnvOptions):
            analyzer = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=include_last_profiler_step)
        load_s = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ranks = analyzer.t.get_ranks()
    if len(ranks) != 1:
        raise RuntimeError(f"HTA found ranks {ranks} in {path}; expected exactly one")
    return analyzer, ranks[0], load_s


def hta_load(path, *, include_last_profiler_step: bool = False, ns_rounding: bool = True):
    """Load one trace file with HTA. Returns (TraceAnalysis, rank, load_seconds).

    Cached per (absolute path, include_last_profiler_step, ns_rounding): the first call's load time is
    returned again on later calls.
    """
    return _load_cached(str(Path(path).resolve()), bool(include_last_profiler_step), bool(ns_rounding))


def hta_temporal_breakdown(
    path, *, include_last_profiler_step: bool = False, ns_rounding: bool = True
) -> dict:
    """HTA's ``get_temporal_breakdown`` for the rank of ``path``.

    Returns {"rank", "idle_us", "compute_us", "non_compute_us", "kernel_time_us", "idle_pct",
    "compute_pct", "non_compute_pct", "load_s"}. Percentages are HTA's (rounded to 2 decimals).
    """
    analyzer, rank, load_s = hta_load(
        path, include_last_profiler_step=include_last_profiler_step, ns_rounding=ns_rounding
    )
    with _quiet():
        df = analyzer.get_temporal_breakdown(visualize=False)
    row = df[df["rank"] == rank].iloc[0]
    return {
        "rank": int(rank),
        "idle_us": float(row["idle_time(us)"]),
        "compute_us": float(row["compute_time(us)"]),
        "non_compute_us": float(row["non_compute_time(us)"]),
        "kernel_time_us": float(row["kernel_time(us)"]),
        "idle_pct": float(row["idle_time_pctg"]),
        "compute_pct": float(row["compute_time_pctg"]),
        "non_compute_pct": float(row["non_compute_time_pctg"]),
        "load_s": load_s,
    }


def hta_idle_breakdown(
    path,
    *,
    include_last_profiler_step: bool = False,
    ns_rounding: bool = True,
    consecutive_kernel_delay: int = 30,
) -> dict:
    """HTA's ``get_idle_time_breakdown`` for the rank of ``path``, all streams.

    Returns {"rank", "load_s", "streams": {stream: {"host_wait", "kernel_wait", "other", "idle",
    "host_wait_ratio", "kernel_wait_ratio", "other_ratio"}}, "total": same keys summed over streams}.
    Idle times are µs (HTA rounds them to 2 decimals); a category HTA does not report is 0.0. The
    ratios are recomputed from the times (HTA's own ratios are rounded to 2 decimals).
    """
    analyzer, rank, load_s = hta_load(
        path, include_last_profiler_step=include_last_profiler_step, ns_rounding=ns_rounding
    )
    with _quiet():
        df, _ = analyzer.get_idle_time_breakdown(
            ranks=[rank],
            consecutive_kernel_delay=consecutive_kernel_delay,
            visualize=False,
        )
    streams: dict = {}
    for _, row in df.iterrows():
        stream = int(row["stream"])
        cat = str(row["idle_category"])
        acc = streams.setdefault(stream, {c: 0.0 for c in IDLE_CATEGORIES})
        value = float(row["idle_time"])
        acc[cat] = acc.get(cat, 0.0) + (0.0 if value != value else value)  # NaN -> 0
    out_streams = {s: _with_ratios(acc) for s, acc in sorted(streams.items())}
    total = {c: sum(s[c] for s in out_streams.values()) for c in IDLE_CATEGORIES}
    return {"rank": int(rank), "load_s": load_s, "streams": out_streams, "total": _with_ratios(total)}


def _with_ratios(acc: dict) -> dict:
    out = {c: acc.get(c, 0.0) for c in IDLE_CATEGORIES}
    idle = sum(out.values())
    out["idle"] = idle
    for c in IDLE_CATEGORIES:
        out[c + "_ratio"] = out[c] / idle if idle > 0 else 0.0
    return out


def _main(argv: list[str]) -> None:
    """``python tests/hta_ref.py TRACE...``: print one JSON line per (trace, rounding, last step)."""
    import json
    import traceback

    for path in argv:
        for ns_rounding in (True, False):
            for last in (False, True):
                rec = {"path": path, "ns_rounding": ns_rounding, "include_last_profiler_step": last}
                for key, fn in (("temporal", hta_temporal_breakdown), ("idle", hta_idle_breakdown)):
                    try:
                        rec[key] = fn(path, include_last_profiler_step=last, ns_rounding=ns_rounding)
                    except Exception as exc:  # report, keep going
                        rec[key + "_error"] = f"{type(exc).__name__}: {exc}"
                        rec[key + "_traceback"] = traceback.format_exc(limit=-3)
                print(json.dumps(rec, default=str), flush=True)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
