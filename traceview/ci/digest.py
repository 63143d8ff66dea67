"""A compact, comparable summary of one trace entry of the analyze document (`--format json`).

Diff, baselines and batch rows all read a trace through this digest, so they agree on what "the step
time" and "a class's time" are:

- the **step time** is the mean over the classifier's analyzed steps (complete steps only: a step cut
  off by the end of the recording is left out), with its per-step spread (sample standard deviation);
- a **class's time per step** is its classifier time over those steps divided by their number, i.e.
  share x mean step, so the per-class shifts between two runs add up to the step-time change;
- a **finding's key** is its rule and its title with numbers masked ("N elementwise kernels in a row
  (mul → add)", "… at train.py(N)"), so a finding is the same finding when only its counts or the
  source line number moved.
Without a classification (CPU-only traces) the step time comes from `summary`/`steps`.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

_NUM = re.compile(r"\d+(?:[.,]\d+)*")
_STAMP = re.compile(r"\.\d{10,}(?=\.)")  # the collector's rank<R>.<time_ns>.pt.trace.json.gz
_SUFFIX = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$|\.gz$")


def primary(cls: dict | None) -> str | None:
    """The class to act on: `primary` (the class whose fix saves the most) when the report has it, else
    `dominant` (the largest share)."""
    if not cls:
        return None
    return cls.get("primary") or cls.get("dominant")


def mean_sd(values: list[float]) -> tuple[float | None, float]:
    """Mean and sample standard deviation (0 for fewer than two values)."""
    n = len(values)
    if not n:
        return None, 0.0
    m = sum(values) / n
    if n < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))


def step_values(entry: dict) -> list[float]:
    """Per-step durations (µs) of the analyzed steps."""
    cls = entry.get("classification") or {}
    rows = cls.get("steps") or []
    if rows:
        return [float(sum(r["time_us"].values())) for r in rows]
    return [float(s["dur_us"]) for s in entry.get("steps") or [] if s.get("dur_us") is not None]


def class_values(entry: dict) -> dict[str, list[float]]:
    """Per class: its time (µs) in each analyzed step. A trace without GPU activity has the host's split instead
    (`cpu`: input, cpu_ops, communication, outside_ops), its classes for diffs, rows and trends."""
    rows = (entry.get("classification") or {}).get("steps") or []
    if not rows:
        split = (entry.get("cpu") or {}).get("split_by_step") or []
        names = [k.removesuffix("_pct") for k in (split[0] if split else {}) if k.endswith("_pct")]
        return {c: [float(r["dur_us"]) * float(r[f"{c}_pct"]) / 100 for r in split] for c in sorted(names)}
    classes = sorted({c for r in rows for c in r["time_us"]})
    return {c: [float(r["time_us"].get(c, 0.0)) for r in rows] for c in classes}


def _host_split(entry: dict) -> tuple[str | None, dict[str, float]]:
    """(dominant, shares %) of a trace without GPU activity: its host split (`cpu`), else (None, {})."""
    cpu = entry.get("cpu") or {}
    return cpu.get("dominant"), dict(cpu.get("split_pct") or {})


def finding_key(f: dict) -> str:
    return f"{f['rule']}: {_NUM.sub('N', f['title'])}"


def file_label(name: str) -> str:
    """A file name without the collector's time stamp and the trace suffix (stable across runs)."""
    return _SUFFIX.sub("", _STAMP.sub("", name))


def trace_key(entry: dict, job_label: str | None, multi_rank: bool) -> str:
    """Stable name of a trace across runs: its job's label, plus `rank<R>` for the ranks of a job."""
    label = job_label if job_label is not None else file_label(Path(entry["path"]).name)
    if not multi_rank:
        return label
    rank = entry.get("rank")
    part = f"rank{rank}" if rank is not None else file_label(Path(entry["path"]).name)
    return part if label in ("", ".") else f"{label}/{part}"


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def layer_times(entry: dict, limit: int | None = None) -> dict[str, dict[str, float]]:
    """Per layer: GPU µs per step (total, forward, backward), the largest `limit` layers."""
    sec = entry.get("layers") or {}
    n = len(sec.get("steps") or []) or 1
    rows = [r for r in sec.get("layers") or [] if r.get("gpu_us") is not None]
    rows.sort(key=lambda r: -r["gpu_us"])
    out = {}
    for r in rows[:limit] if limit else rows:
        out[r["layer"]] = {"gpu_us": _r(r["gpu_us"] / n), "fwd_gpu_us": _r((r.get("fwd_gpu_us") or 0) / n),
                           "bwd_gpu_us": _r((r.get("bwd_gpu_us") or 0) / n)}
    return out


def digest(entry: dict, key: str, layers_limit: int | None = 30) -> dict[str, Any]:
    """The compact summary of one trace entry (also one entry of a baseline file)."""
    steps = step_values(entry)
    mean, sd = mean_sd(steps)
    cls = entry.get("classification") or {}
    classes = {}
    for c, vals in class_values(entry).items():
        m, s = mean_sd(vals)
        classes[c] = {"us": _r(m), "sd_us": _r(s)}
    findings = [{"key": finding_key(f), "rule": f["rule"], "code": f["code"], "severity": f["severity"],
                 "title": f["title"], "savings_us": f["savings_us"], "savings_pct": f.get("savings_pct")}
                for f in entry.get("findings") or []]
    host_dominant, host_shares = _host_split(entry)
    return {
        "key": key, "path": entry["path"], "rank": entry.get("rank"),
        "steps": len(steps), "step_us": _r(mean), "step_sd_us": _r(sd),
        "primary": primary(cls) or host_dominant, "shares": dict(cls.get("shares") or {}) or host_shares,
        "classes": classes, "host_split": not (cls.get("steps") or []) and bool(classes),
        "findings": findings, "layers": layer_times(entry, layers_limit),
    }


def job_keys(doc: dict, job_label: str | None) -> list[str]:
    """The key of each trace entry of one job's document (the ranks of one run, or one trace)."""
    multi = len(doc.get("traces") or []) > 1
    return [trace_key(t, job_label, multi) for t in doc.get("traces") or []]
