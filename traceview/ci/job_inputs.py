"""`analyze`'s inputs with framework job folders expanded (TorchTitan's `profiling/traces/iteration_<N>/`)."""

from __future__ import annotations

from pathlib import Path

from ..ingest.decode import trace_files


def expand_inputs(paths: list[str]) -> list[str]:
    """`analyze`'s inputs with each folder that holds no trace file itself but framework job folders below it
    (TorchTitan's `profiling/traces/` with its `iteration_<N>/` folders, a log dir of runs) replaced by those
    jobs, in name order: a run folder, or the trace files of a job that shares its folder."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        try:
            if not path.is_dir() or trace_files(path):
                out.append(p)
                continue
        except Exception:  # noqa: BLE001 - the loader reports an unreadable input with its own message
            out.append(p)
            continue
        from .discover import discover  # only for a folder (its imports cost ~5 ms of a one-file run)

        disc = discover([path])
        if not disc.jobs:
            out.append(p)  # the loader's own error: no trace files
            continue
        for j in disc.jobs:
            out += [j.folder] if j.folder and j.whole_folder and len(j.files) > 1 else list(j.files)
    return out
