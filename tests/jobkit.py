"""Job-level helpers of the tests: the job entry of loaded rank traces, as `traceview analyze RUN_DIR` builds it."""

from __future__ import annotations

import polars as pl

from traceview.analyses.windows import complete_steps
from traceview.findings import Finding
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
