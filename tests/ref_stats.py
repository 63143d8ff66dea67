"""Independent, deliberately simple reference statistics for tests.

Test-only code. It uses nothing but ``json``/``gzip`` and plain Python loops so that it shares no code
(and hopefully no bugs) with ``traceview``: readability over speed. Times are the trace's own units
(µs, floats kept exactly: no rounding of nanosecond-resolution timestamps).

(a) ``gpu_busy(path)``: GPU busy % exactly as defined in ``sample_traces/gpu_h200/README.md``:
    the span runs from the earliest start to the latest end of all ``ProfilerStep#N`` spans (the CPU
    ops and their GPU-side ``gpu_user_annotation`` twins together); busy = the union of kernel, memcpy
    and memset intervals clipped to that span; ``gpu_busy_pct`` = busy / span * 100.

(b) ``idle_split(path)``: per-stream GPU idle time split with HTA's rule
    (``hta/analyzers/breakdown_analysis.py::_analyze_idle_time_for_stream``) but with exact timestamps:
    per stream, take the events with cat in {kernel, gpu_memcpy, gpu_memset}, sort them by ts;
    gap = ts - end of the previous event (only positive gaps count as idle);
    * host_wait   if the runtime/driver call that launched this event (same ``correlation`` in a
                  ``cuda_runtime`` / ``cuda_driver`` event) started after the previous event's end;
    * kernel_wait if not host_wait and gap < 30 µs (``consecutive_kernel_delay``);
    * other       otherwise.
    Differences from HTA itself: HTA rounds float µs (ceil start, floor end) unless
    ``HTA_DISABLE_NS_ROUNDING=1``, drops the last ProfilerStep by default, and also sums negative gaps
    (overlapping events on one stream); none of that happens here.

Both also accept the old (2021, schemaVersion 1) category names ``Kernel``/``Memcpy``/``Memset`` and
``Runtime``, which HTA accepts too.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")


def load_events(path_or_events) -> list[dict]:
    """Return the ``traceEvents`` list of a trace file (``.json`` or ``.json.gz``).

    A list of events is returned unchanged, so the functions below accept either.
    """
    if isinstance(path_or_events, list):
        return path_or_events
    path = Path(path_or_events)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    if isinstance(data, list):  # a bare event array is valid chrome-trace JSON too
        return data
    return data.get("traceEvents", [])


def _is_complete(e: dict) -> bool:
    return e.get("ph") == "X" and "ts" in e and "dur" in e


def _gpu_events(events: list[dict]) -> list[dict]:
    return [e for e in events if _is_complete(e) and e.get("cat") in GPU_CATS]


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a list of (start, end) intervals."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def profiler_step_span(path_or_events) -> tuple[float, float] | None:
    """(earliest start, latest end) over all ProfilerStep#N spans, CPU and GPU rows alike."""
    events = load_events(path_or_events)
    steps = [e for e in events if _is_complete(e) and PROFILER_STEP_RE.match(str(e.get("name", "")))]
    if not steps:
        return None
    return min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)


def gpu_busy(path_or_events) -> dict:
    """GPU busy time over the ProfilerStep span (see module docstring, (a)).

    Returns {"steps", "span_start", "span_end", "span_us", "busy_us", "gpu_busy_pct"}; the span keys are
    None and the pct is None when the trace has no ProfilerStep#N span.
    """
    events = load_events(path_or_events)
    steps = [e for e in events if _is_complete(e) and PROFILER_STEP_RE.match(str(e.get("name", "")))]
    span = profiler_step_span(events)
    if span is None:
        return {
            "steps": 0,
            "span_start": None,
            "span_end": None,
            "span_us": None,
            "busy_us": None,
            "gpu_busy_pct": None,
        }
    lo, hi = span
    clipped = []
    for e in _gpu_events(events):
        start = max(e["ts"], lo)
        end = min(e["ts"] + e["dur"], hi)
        if end > start:
            clipped.append((start, end))
    busy = union_length(clipped)
    span_us = hi - lo
    return {
        "steps": len(steps),
        "span_start": lo,
        "span_end": hi,
        "span_us": span_us,
        "busy_us": busy,
        "gpu_busy_pct": 100.0 * busy / span_us if span_us > 0 else None,
    }


def idle_split(path_or_events, consecutive_kernel_delay_us: float = 30.0) -> dict:
    """Per-stream idle time split host_wait / kernel_wait / other (see module docstring, (b)).

    Returns {"streams": {stream: {"host_wait": µs, "kernel_wait": µs, "other": µs, "idle": µs,
    "host_wait_ratio": ..., "kernel_wait_ratio": ..., "other_ratio": ..., "events": n}},
    "total": the same keys summed over all streams}. Ratios are of the idle time (0.0 when no idle).
    """
    events = load_events(path_or_events)

    launch_ts = {}  # correlation id -> ts of the runtime/driver call that launched it
    for e in events:
        if _is_complete(e) and e.get("cat") in LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launch_ts[corr] = e["ts"]

    by_stream: dict = {}
    for e in _gpu_events(events):
        stream = (e.get("args") or {}).get("stream")
        if stream is None:
            continue
        by_stream.setdefault(stream, []).append(e)

    result = {}
    for stream, evs in sorted(by_stream.items(), key=lambda kv: str(kv[0])):
        evs.sort(key=lambda e: e["ts"])
        acc = {c: 0.0 for c in IDLE_CATEGORIES}
        prev_end = None
        for e in evs:
            if prev_end is not None:
                gap = e["ts"] - prev_end
                if gap > 0:
                    launched = launch_ts.get((e.get("args") or {}).get("correlation"))
                    if launched is not None and launched > prev_end:
                        acc["host_wait"] += gap
                    elif gap < consecutive_kernel_delay_us:
                        acc["kernel_wait"] += gap
                    else:
                        acc["other"] += gap
            # HTA uses the previous row's end (not a running max) for the next gap; so do we.
            prev_end = e["ts"] + e["dur"]
        result[stream] = _with_ratios(acc, len(evs))

    total = {c: sum(s[c] for s in result.values()) for c in IDLE_CATEGORIES}
    return {"streams": result, "total": _with_ratios(total, sum(s["events"] for s in result.values()))}


def _with_ratios(acc: dict, n_events: int) -> dict:
    idle = sum(acc[c] for c in IDLE_CATEGORIES)
    out = dict(acc)
    out["idle"] = idle
    for c in IDLE_CATEGORIES:
        out[c + "_ratio"] = acc[c] / idle if idle > 0 else 0.0
    out["events"] = n_events
    return out


if __name__ == "__main__":  # quick look: python tests/ref_stats.py TRACE...
    import sys

    for p in sys.argv[1:]:
        b = gpu_busy(p)
        s = idle_split(p)["total"]
        print(
            f"{p}: busy {b['gpu_busy_pct']}% of {b['span_us']} us; idle host {s['host_wait']:.1f} "
            f"kernel {s['kernel_wait']:.1f} other {s['other']:.1f} us"
        )
