"""The `traceview collect` run manifest (`<run dir>/manifest.json`): its schema, read once by the loader.

Plain stdlib, shared with the collector (collectors/manifest.py writes what this reads), so the launcher and
`traceview trigger` stay light. Keys (docs/collect.md): `manifest_version`, `run`, `command`, `argv`,
`options`, `ranks` [{rank, traces: [{file}], unprofiled_step_ms, profiled_step_ms, *_median,
step_time_method, cpu_count, cpu_affinity}], `step_time` {profiled_ms_median, unprofiled_ms_median}, `exit_code`.
The loader keeps the parsed document in `TraceMeta.manifest`; analyses and rules read it from there, never
from disk.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few kB; anything huge is not one


def parse_manifest(doc: Any) -> tuple[dict | None, str | None]:
    """(the manifest, a warning or None) when `doc` is one: only the keys traceview reads, each of the expected
    type (a value of another type is left out and named in the warning); (None, None) for any other JSON
    document (not a collector run)."""
    if not isinstance(doc, dict) or "manifest_version" not in doc:
        return None, None
    bad: list[str] = []
    clean = {"manifest_version": doc.get("manifest_version"),
             "run": _str(doc.get("run"), "run", bad), "command": _str(doc.get("command"), "command", bad),
             "options": doc.get("options") if isinstance(doc.get("options"), dict) else None,
             "step_time": _numbers(doc.get("step_time"), _STEP_TIME_KEYS, "step_time", bad), "ranks": []}
    ranks = doc.get("ranks")
    if ranks is not None and not isinstance(ranks, list):
        bad.append("ranks")
        ranks = []
    for k, r in enumerate(ranks or []):
        if not isinstance(r, dict):
            bad.append(f"ranks[{k}]")
            continue
        rank = r.get("rank")
        entry = _numbers(r, _RANK_KEYS, f"ranks[{k}]", bad)
        entry["rank"] = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        if rank is not None and entry["rank"] is None:
            bad.append(f"ranks[{k}].rank")
        entry["step_time_method"] = _str(r.get("step_time_method"), f"ranks[{k}].step_time_method", bad)
        # `traceview collect --settle`: whether the step time had settled when the capture started (None: not used)
        got = r.get("settle")
        entry["settled"] = got.get("settled") if isinstance(got, dict) and isinstance(got.get("settled"), bool) \
            else None
        # ... and the DataLoader workers whose batches its steps took in turn (counted while it settled)
        k_ = got.get("loader_period") if isinstance(got, dict) else None
        entry["loader_period"] = k_ if isinstance(k_, int) and not isinstance(k_, bool) and k_ >= 1 else None
        for key, test in (("unprofiled_step_ms", _is_num), ("profiled_step_ms", _is_num),
                          ("traces", lambda t: isinstance(t, dict))):
            v = r.get(key)
            entry[key] = [x for x in v if test(x)] if isinstance(v, list) else []
            if v is not None and (not isinstance(v, list) or len(entry[key]) < len(v)):
                bad.append(f"ranks[{k}].{key}")
        clean["ranks"].append(entry)
    why = (f"values of an unexpected type ({', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}): those were "
           "ignored") if bad else None
    return clean, why


_STEP_TIME_KEYS = ("profiled_ms_median", "unprofiled_ms_median")
_RANK_KEYS = ("unprofiled_step_ms_median", "profiled_step_ms_median", "cpu_count", "cpu_affinity")


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _str(v: object, key: str, bad: list[str]) -> str | None:
    if v is None or isinstance(v, str):
        return v
    bad.append(key)
    return None


def _numbers(d: object, keys: tuple[str, ...], where: str, bad: list[str]) -> dict:
    """{key: finite positive number or None} for `keys` of the dict `d`."""
    if d is None:
        return dict.fromkeys(keys)
    if not isinstance(d, dict):
        bad.append(where)
        return dict.fromkeys(keys)
    out: dict = {}
    for k in keys:
        v = d.get(k)
        if v is None or (_is_num(v) and v > 0):
            out[k] = v
        else:
            bad.append(f"{where}.{k}")
            out[k] = None
    return out


def read_manifest(run_dir: str | Path) -> tuple[dict | None, str | None]:
    """(manifest of the collector run in `run_dir`, warning): both None outside a collector run."""
    p = Path(run_dir) / MANIFEST_NAME
    try:
        if not p.is_file():
            return None, None
        if p.stat().st_size > MAX_MANIFEST_BYTES:
            return None, f"{p.name} beside the trace is larger than {MAX_MANIFEST_BYTES >> 20} MiB: ignored"
        doc = json.loads(p.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError) as e:
        return None, f"{p.name} beside the trace is not valid JSON ({type(e).__name__}): ignored"
    man, why = parse_manifest(doc)
    return man, (f"{p.name} beside the trace has {why}" if why else None)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def median(xs: Any) -> float | None:
    v = sorted(x for x in map(_num, xs if isinstance(xs, list) else []) if x is not None)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def step_overhead_ms(manifest: dict | None) -> float | None:
    """Profiled minus unprofiled median step time (ms, >= 0) of the job (the manifest's `step_time`)."""
    st = (manifest or {}).get("step_time") or {}
    prof, unprof = _num(st.get("profiled_ms_median")), _num(st.get("unprofiled_ms_median"))
    if prof is not None and unprof is not None:
        return max(prof - unprof, 0.0)
    return None


def rank_entry(manifest: dict, file_name: str, rank: int | None) -> dict:
    """The manifest's entry for one rank file (by file name, else by rank)."""
    ranks = manifest.get("ranks") or []
    for r in ranks:
        if any(isinstance(t, dict) and t.get("file") == file_name for t in r.get("traces") or []):
            return r
    return next((r for r in ranks if r.get("rank") == (rank or 0)), {})


def rank_cpus(manifest: dict, file_name: str, rank: int | None) -> int | None:
    """The CPUs this rank's process may run on (its affinity, else the machine's count; its DataLoader workers
    inherit them), or None: a manifest of a collector that did not record them."""
    r = rank_entry(manifest, file_name, rank)
    n = _num(r.get("cpu_affinity")) or _num(r.get("cpu_count"))
    return int(n) if n else None


def rank_step_samples(manifest: dict, file_name: str, rank: int | None) -> list[float]:
    """This rank's measured unprofiled step periods (ms), in order (empty when none were recorded)."""
    xs = rank_entry(manifest, file_name, rank).get("unprofiled_step_ms") or []
    return [float(x) for x in xs if _is_num(x)] if isinstance(xs, list) else []


#: an unprofiled step more than this many times the rank's fastest is slow (`recurring_slow`)
SLOW_X = 3.0


def recurring_slow_steps(xs: list[float]) -> list[int] | None:
    """The positions in the step times `xs` (all positive) of the slow steps that recur: above `SLOW_X` times the
    fastest, after the first step that was not slow, two or more of them; None otherwise (or under 4 steps)."""
    if len(xs) < 4:
        return None
    fast = min(xs)
    first = next(i for i, x in enumerate(xs) if x <= SLOW_X * fast)
    at = [i for i in range(first, len(xs)) if xs[i] > SLOW_X * fast]
    return at if len(at) >= 2 else None


def recurring_slow(entry: dict) -> dict | None:
    """Slow steps that recur on one rank (its manifest entry), or None: {slow, of, fastest_ms, median_ms, mean_ms,
    slowest_ms, captured_slow, captured}. The unprofiled steps the collector timed (settling, then waiting; the very
    first step is the warm-up's) more than `SLOW_X` times the fastest of them, counted from the first step that was
    not slow: slow steps only before it are a warm-up (compiles, the first shapes), slow steps after it recur (a
    per-shape setup, a data stall, periodic work). Two or more recurring ones make the result; `captured_slow` of
    the `captured` profiled steps are slow against the fastest of those."""
    xs = [float(x) for x in (entry.get("settle_step_ms") or []) + (entry.get("unprofiled_step_ms") or [])
          if _is_num(x) and x > 0]
    at = recurring_slow_steps(xs)
    if at is None:
        return None
    fast = min(xs)
    first = next(i for i, x in enumerate(xs) if x <= SLOW_X * fast)
    later = [xs[i] for i in at]
    prof = [float(x) for x in entry.get("profiled_step_ms") or [] if _is_num(x) and x > 0]
    cap = sum(x > SLOW_X * min(prof) for x in prof) if prof else 0
    rest = xs[first:]
    n = len(rest)
    return {"slow": len(later), "of": n, "fastest_ms": round(fast, 3),
            "median_ms": round(median(rest), 3), "mean_ms": round(sum(rest) / n, 3),
            "slowest_ms": round(max(later), 3), "captured_slow": int(cap), "captured": len(prof)}


#: the step time has settled when two windows' medians differ by at most this share (collectors/settle.py)
SETTLE_TOL = 0.05


def settle_half(wait: int) -> int:
    """Steps in each of the two windows the settle rule compares: a median of three resists one slow step."""
    return max(3, -(-wait // 2))


def settle_window(wait: int, period: int = 1) -> int:
    """Steps in each window the settle rule compares: `settle_half(wait)`, rounded up to whole periods of a loop fed
    by `period` DataLoader workers (their batches arrive in turn: a slow step every `period` steps)."""
    h, k = settle_half(wait), max(1, int(period))
    return -(-h // k) * k


def period_mean(xs: list[float], period: int) -> float | None:
    """The mean of the last whole periods of `xs` (all of them when shorter than a period)."""
    k = max(1, int(period))
    n = len(xs) // k * k or len(xs)
    return sum(xs[-n:]) / n if n else None


def step_reference(xs: list[float], period: int = 1) -> float | None:
    """The unprofiled reference of step times `xs`: their median, or for a loop fed by `period` > 1 DataLoader
    workers in turn the mean over whole periods (the pace it keeps: a fast, fast, slow pattern's median is the fast
    step)."""
    return period_mean(xs, period) if period > 1 and len(xs) >= period else median(xs)


def step_trend(samples: list[float], wait: int, period: int = 1) -> float | None:
    """The median of the last window of step times (`settle_window`) over the median of as many before them; None
    with fewer than `wait` or two windows of steps. Below 1 the steps were still getting faster (a warm-up), above
    it slower (a prefetch buffer draining). A loop fed by `period` > 1 DataLoader workers compares the windows'
    means (each a whole number of periods: its steps alternate between the loop's pace and the workers')."""
    h = settle_window(wait, period)
    if len(samples) < max(wait, 2 * h):
        return None
    stat = median if period <= 1 else (lambda xs: period_mean(list(xs), period))
    before = stat(samples[-2 * h : -h])
    last = stat(samples[-h:])
    return last / before if before and last is not None and before > 0 else None


def unsettled_reference(manifest: dict, file_name: str, rank: int | None) -> float | None:
    """Where the collector's --settle gave up waiting for this rank's step time to settle (it recorded after
    --settle-max-s): the trend of its last wait steps (the last window's median over the one before; 1.0 when too
    few), else None. Runs recorded without --settle are not judged: over the 284 bundled runs the trend of their
    five to eight wait steps flagged 63, most of them with a reference the steady rounds later confirmed."""
    if rank_entry(manifest, file_name, rank).get("settled") is not False:
        return None
    xs = rank_step_samples(manifest, file_name, rank)
    t = step_trend(xs, len(xs) - 1, loader_period(manifest, file_name, rank)) if len(xs) > 1 else None
    return t if t is not None else 1.0


def steady_unprofiled_ms(manifest: dict, file_name: str, rank: int | None) -> float | None:
    """This rank's steady unprofiled step (ms): the median of its measured unprofiled steps after the first, whose
    period still holds the warm-up (a compiled run's first wait steps: 5.9 and 4.2 ms, then 2.3 and 2.1 ms); the
    median of all of them when fewer than three were recorded, else rank_step_times' unprofiled median. The rule of
    tools/labels.py (`steady_tail`) for the twin sets' labels."""
    xs = rank_step_samples(manifest, file_name, rank)
    k = loader_period(manifest, file_name, rank)
    if k > 1 and len(xs) >= k:  # batches from k workers in turn: the steps' mean over whole periods is the pace
        return period_mean(xs, k)
    if len(xs) >= 3:
        return median(xs[1:])
    return median(xs) if xs else rank_step_times(manifest, file_name, rank)[0]


def loader_period(manifest: dict, file_name: str, rank: int | None) -> int:
    """The DataLoader workers whose batches this rank's steps took in turn while the collector settled, 1 without."""
    return rank_loader_period(rank_entry(manifest, file_name, rank))


def rank_loader_period(entry: dict) -> int:
    """`loader_period` of one rank's entry: its `settle.loader_period` as the collector wrote it (parse_manifest keeps
    it as the entry's `loader_period`), 1 without."""
    info = entry.get("settle")
    k = _num(entry.get("loader_period")) or (_num(info.get("loader_period")) if isinstance(info, dict) else None)
    return int(k) if k and k > 1 else 1


def rank_step_times(manifest: dict, file_name: str, rank: int | None) -> tuple[float | None, float | None, Any]:
    """(unprofiled, profiled) median step ms of this rank, and how they were measured."""
    r = rank_entry(manifest, file_name, rank)
    k = rank_loader_period(r)  # (the collector wrote its medians so: a loader-fed rank's are period means)
    prof_xs = [float(x) for x in r.get("profiled_step_ms") or [] if _is_num(x)]
    unprof = _num(r.get("unprofiled_step_ms_median")) or step_reference(rank_step_samples(manifest, file_name, rank), k)
    prof = _num(r.get("profiled_step_ms_median")) or step_reference(prof_xs, k)
    return unprof, prof, r.get("step_time_method")
