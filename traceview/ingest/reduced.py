"""A job's rank reduced to what the job's analysis reads once the rank's own entry is built, and reloaded in full
where the job replay needs it (docs/multi-rank.md, "Scale and memory").

The job's analysis reads each rank's collectives, its GPU work by name and time, its host events by thread,
name and time, its blocking syncs, its steps and the sizes of its collectives; it never reads the profiler's
bookkeeping (correlation ids, Python ids, input shapes and strides, launch geometry), the memory events or the
flows. A reduced rank keeps the columns listed here and drops the rest (an 11 k-event rank of our 2 x H200 DDP
job: 2.3 MB of frames to 1.5 MB, most of it the kernel and op names). The replay graph and a rule context need every column: `full` loads such a rank again from its
file, for the few ranks the job replay prices (`job_answer.replayed`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..model import Trace

#: the GPU frame's columns a job's analysis reads (collectives, busy time, kernels by name, syncs, launches)
GPU_COLUMNS = (
    "i",
    "cat",
    "name",
    "ts",
    "dur",
    "end",
    "kind",
    "stream",
    "device",
    "op",
    "launch",
    "launch_ts",
    "launch_end",
    "launch_tid",
    "pg_name",
    "seq_comm",
    "collective",
    "in_nelems",
    "group_size",
    "dtype",
)
#: the host frame's columns it reads (program threads, ops and their nesting, syncs, collective sizes)
HOST_COLUMNS = (
    "i",
    "cat",
    "name",
    "tid",
    "ts",
    "dur",
    "end",
    "depth",
    "parent",
    "op",
    "kind",
    "collective",
    "in_nelems",
    "dtype",
    "group_size",
    "pg_name",
)


@dataclass(frozen=True)
class ReducedTrace(Trace):
    """A rank's trace with only the columns of `GPU_COLUMNS` / `HOST_COLUMNS` (no memory events, no flows);
    `max_bytes`: the limit it was loaded with, to load it again (`full`)."""

    max_bytes: int | None = None


def reduce(trace: Trace, max_bytes: int | None = None) -> ReducedTrace:
    """`trace` with only what a job's analysis reads."""

    def keep(df, cols):
        return df.select([c for c in cols if c in df.columns])

    return ReducedTrace(
        meta=trace.meta,
        host=keep(trace.host, HOST_COLUMNS),
        gpu=keep(trace.gpu, GPU_COLUMNS),
        gpu_annotations=trace.gpu_annotations.clear(),
        memory=trace.memory.clear(),
        flows=trace.flows.clear(),
        steps=trace.steps,
        threads=trace.threads,
        max_bytes=max_bytes,
    )


def full(trace: Trace) -> Trace:
    """The rank's whole trace: `trace` itself, or a reduced one loaded again from its file (the same bytes give
    the same frames)."""
    if not isinstance(trace, ReducedTrace):
        return trace
    from .loader import load_file

    path = Path(trace.meta.path)
    t = load_file(path) if trace.max_bytes is None else load_file(path, max_bytes=trace.max_bytes)
    # the meta the job read (rank and clock), whatever the reload says
    return replace(t, meta=trace.meta)
