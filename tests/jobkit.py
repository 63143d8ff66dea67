"""Job-level helpers of the tests: the job entry of loaded rank traces, as `traceview analyze RUN_DIR` builds it."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl

from traceview.analyses.windows import complete_steps
from traceview.finding_model import Finding
from traceview.model import Job
from traceview.options import Options
from traceview.report import analyze_job_traces


def job_nccl(job: Job, options: Options | None = None) -> tuple[dict, list[Finding]]:
    """(the job's `nccl` section, its job-level findings)."""
    entry, _ = analyze_job_traces(job, options)
    return entry["nccl"], [Finding(**{("cls" if k == "class" else k): v for k, v in f.items()}) for f in entry["findings"]]


def job_steps(job: Job) -> dict[int, pl.DataFrame]:
    """Each rank's analysed steps (complete steps only)."""
    return {k: complete_steps(t, t.steps)[0] for k, t in enumerate(job.traces)}


GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def insert_time(src: Path, out: Path, points: dict[int, list[tuple]]) -> Path:
    """A copy of the job directory `src` in `out` where, on rank file k (sorted by name), X µs are inserted at each
    (t, X[, which]) of `points[k]` (t in the file's own µs; `which`: "all" (default), "nccl" for the NCCL kernels
    only, "other" for every other event): every event starting at or after t moves X later, every host event and
    NCCL kernel running through t (ending at or after it) grows by X — the collective and whatever waits for it
    took X longer; other GPU work already running at t (a copy on another stream) is not stretched, except the
    activity ending exactly at t (the one made longer)."""
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in src.iterdir() if p.name.endswith(".pt.trace.json.gz"))
    for p in src.iterdir():
        if p not in files:
            shutil.copy(p, out / p.name)
    for k, f in enumerate(files):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        pts = [(p[0], p[1], p[2] if len(p) > 2 else "all") for p in points.get(k, [])]
        if pts:
            sets = {}
            for nccl in (True, False):
                sel = sorted((t, x) for t, x, w in pts if w == "all" or (w == "nccl") == nccl)
                at = np.array([t for t, _ in sel])
                sets[nccl] = (at, np.concatenate([[0.0], np.cumsum([x for _, x in sel])]), set(at.tolist()))
            for e in doc["traceEvents"]:
                ts = e.get("ts")
                if not isinstance(ts, (int, float)):
                    continue
                is_nccl = str(e.get("name", "")).startswith("nccl") and e.get("cat") == "kernel"
                at, add, at_set = sets[is_nccl]
                end = ts + e["dur"] if isinstance(e.get("dur"), (int, float)) else None
                e["ts"] = ts + add[np.searchsorted(at, ts, side="right")]
                gpu = e.get("cat") in GPU_CATS and not is_nccl
                if end is not None:
                    grow = end + add[np.searchsorted(at, end, side="right")] - e["ts"]
                    # GPU work running through t keeps its duration, except the activity that ends at t itself
                    e["dur"] = grow if not gpu or (end in at_set) else end - ts
        (out / f.name).write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return out


def nccl_kernels(path: Path) -> list[dict]:
    """The NCCL kernel events of a raw rank file, by start."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")),
                  key=lambda e: e["ts"])


def step_last_collectives(path: Path, gap_us: float = 5000.0) -> list[float]:
    """End (µs) of the last NCCL kernel of each burst (kernels closer than `gap_us` belong to one step's burst)."""
    ks = nccl_kernels(path)
    ends = [k["ts"] + k["dur"] for k in ks]
    return [ends[i] for i in range(len(ks)) if i + 1 == len(ks) or ks[i + 1]["ts"] - ends[i] > gap_us]


def kernels(path: Path) -> list[dict]:
    """The kernel events of a raw rank file, by start."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def unranked_job(out: Path) -> Path:
    """A folder of the two ranks of a real job (gloo_straggler/slowed, recorded at the same time) as dynolog lays them
    out (`libkineto_trace_<pid>.json.gz`), with every rank mark taken off (distributedInfo, the collector's block):
    a job whose ranks are unknown."""
    src = Path(__file__).resolve().parent.parent / "sample_traces/gloo_straggler/slowed"
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("rank*.pt.trace.json.gz")):
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        doc.pop("distributedInfo")
        doc.pop("traceview_collect", None)
        pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
        with gzip.open(out / f"libkineto_trace_{pid}.json.gz", "wt") as fh:
            json.dump(doc, fh)
    return out
