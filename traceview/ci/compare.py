"""Two runs side by side: each side's analyze document, trace keys and kernel tables, and their diff document."""

from __future__ import annotations

from pathlib import Path

from ..errors import TraceError
from ..options import Options


def side(path: str, options: Options | None) -> tuple[dict, list[str], dict[str, list[dict]]]:
    """One side of a diff: its merged analyze document, the keys of its traces, their full kernel tables."""
    from .diff import kernel_rows
    from .digest import file_label, job_keys
    from .discover import discover
    from .jobrun import analyze_job

    disc = discover([path])
    if disc.errors:
        raise TraceError(disc.errors[0]["error"])
    p = Path(path)
    root = p.name if p.is_dir() else file_label(p.name)
    doc: dict = {"traces": [], "jobs": [], "errors": []}
    keys: list[str] = []
    kernels: dict[str, list[dict]] = {}
    for spec in disc.jobs:
        keep: dict = {}
        d = analyze_job(spec, options, keep)
        for k in ("traces", "jobs", "errors"):
            doc[k] += d[k]
        keys += job_keys(d, "" if spec.label == root else spec.label)
        for t in d["traces"]:
            if t["path"] in keep:
                kernels[t["path"]] = kernel_rows(keep[t["path"]], t)
    return doc, keys, kernels


def diff_paths(a: str, b: str, options: Options | None = None) -> dict:
    """The diff document of two traces or run folders (with the full kernel tables)."""
    from ..ingest.remote import stage
    from .diff import diff

    (a, b), _ = stage([a, b], options.max_bytes if options else None)  # s3://, gs://… read into a temp folder
    doc_a, keys_a, ka = side(a, options)
    doc_b, keys_b, kb = side(b, options)
    return diff(doc_a, doc_b, keys_a, keys_b, {**ka, **kb})
