"""The one place where batch and diff call `report.analyze`: one job (a trace, or the ranks of one run) in,
the analyze document (`--format json`) out. Everything downstream (digest, diff, baseline, batch rows)
reads only that document."""

from __future__ import annotations

from pathlib import Path

from ..errors import TraceError
from ..model import Trace
from ..options import Options
from .discover import JobSpec


class _NotInJob(TraceError):
    pass


def analyze_job(spec: JobSpec, options: Options | None = None, keep: dict[str, Trace] | None = None) -> dict:
    """The analyze document of one job. `keep`, when given, receives the loaded traces by path (diff
    computes the full kernel table from them)."""
    from .. import report
    from ..ingest.loader import load_file

    members: set[Path] | None = None
    if spec.folder and len(spec.files) > 1:
        inputs: list[str] = [spec.folder]  # a folder is one job: cross-rank sections
        if not spec.whole_folder:  # other traces share the folder: load only this run's ranks
            members = {Path(f).resolve() for f in spec.files}
    else:
        inputs = list(spec.files)

    def load(path: Path) -> Trace:
        if members is not None and path.resolve() not in members:
            raise _NotInJob(str(path))
        t = load_file(path)
        if keep is not None:
            keep[t.meta.path] = t
        return t

    doc = report.analyze(inputs, options, load=load).to_dict()
    if members is not None:
        doc["errors"] = [e for e in doc["errors"] if Path(e["path"]).resolve() in members]
    return doc
