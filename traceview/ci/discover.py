"""Batch inputs -> jobs: which trace files are analyzed together.

`traceview batch PATH…` recurses into directories. In each folder the trace files are read only up to their
`traceEvents` key (the first MiB at most; Kineto writes `distributedInfo` before it) and grouped:

- files that say they are ranks of a distributed run (`distributedInfo` rank with world size > 1, or a
  rank in the file or folder name: `layouts.path_rank`, e.g. TorchTitan's `iteration_<N>/rank<R>_trace.json`) and share a world size and backend are **one job** — the ranks of one run, analyzed
  together (cross-rank matching, straggler). When a rank occurs twice (two runs, or `--repeat`, in one
  folder) the k-th file of each rank, in name order, forms the k-th job;
- every other trace file is a job of its own: unrelated traces that happen to share a folder are analyzed
  separately; several such files of a per-process writer (tensorboard_trace_handler / Megatron-LM, dynolog,
  Lightning) in one folder add a warning that their ranks are unknown;
- a JSON file that is not a trace (a complete JSON document without `traceEvents`, smaller than the sniffed
  head, e.g. a `labels.json`) is skipped, not a failure; an empty or cut-off file is analyzed (and fails, named). A file named on the command line is always analyzed.

Each job has a `label` that stays the same across CI runs: the run folder (when the folder holds one job)
or the file without the collector's time stamp, relative to the input it was found under, e.g. `smoke`
for `tv_traces/smoke/` whether the input was `tv_traces/` or `tv_traces/smoke/`.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..ingest import layouts
from ..ingest.decode import trace_files
from ..ingest.lenient import int_in
from .digest import file_label

HEAD_BYTES = 1 << 20


@dataclass(frozen=True)
class JobSpec:
    label: str
    files: tuple[str, ...]
    folder: str | None = None  # the run folder, for the ranks of one run
    whole_folder: bool = False  # the files are all trace files of `folder`

    @property
    def path(self) -> str:
        return self.folder if self.folder and len(self.files) > 1 else self.files[0]


@dataclass
class Discovery:
    jobs: list[JobSpec] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}
    errors: list[dict] = field(default_factory=list)  # {"path", "error"}: inputs that do not exist / hold no traces
    warnings: list[dict] = field(default_factory=list)  # {"path", "warning"}: e.g. ranks unknown (layouts.py)


def read_head(path: Path, n: int = HEAD_BYTES, until: bytes = b'"traceEvents"') -> bytes | None:
    """The decompressed head of a file: up to `until` (plus a chunk) or `n` bytes; None when the file cannot
    be read that far (the analysis reports why)."""
    try:
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        head = b""
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
            while len(head) < n:
                chunk = fh.read(64 << 10)
                head += chunk
                if not chunk or until in head:
                    break
        return head
    except (OSError, EOFError, zlib.error):
        return None


def _distributed_info(head: bytes) -> dict:
    i = head.find(b'"distributedInfo"')
    if i < 0:
        return {}
    j = head.find(b"{", i)
    if j < 0:
        return {}
    try:
        info, _ = json.JSONDecoder().raw_decode(head[j:].decode("utf-8", "replace"))
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _complete_json(head: bytes) -> bool:
    """Whether `head` (a whole file) is one complete JSON value: an empty or cut-off file is a damaged trace that
    the analysis must report (a rank of a job), not a file to skip."""
    try:
        json.loads(head)
    except (ValueError, RecursionError):
        return False
    return True


def sniff(path: Path) -> dict | None:
    """{rank, world_size, backend, writer} of a trace file, or None when the file is plainly not a trace. The rank:
    `distributedInfo`'s, else the one its path names (`layouts.path_rank`); the writer: `layouts.writer`."""
    head = read_head(path)
    info: dict = {}
    if head is not None:
        looks = b'"traceEvents"' in head or head.lstrip()[:1] == b"["
        if not looks and len(head) < HEAD_BYTES and _complete_json(head):  # a whole JSON document, no events
            return None
        info = _distributed_info(head)

    def _int(v: object) -> int | None:
        return int_in(v, 0, 2**31 - 1)

    rank = _int(info.get("rank"))
    if rank is None:
        rank = layouts.path_rank(path)
    return {"rank": rank, "world_size": _int(info.get("world_size")), "backend": info.get("backend"),
            "writer": layouts.writer(path, head)}


def _label(folder: Path, root: Path, name: str | None) -> str:
    """Label of a job in `folder` found under input `root` (a folder job when `name` is None)."""
    rel = folder.relative_to(root).as_posix()
    base = root.name if rel == "." else rel
    if name is None:
        return base or "."
    stem = file_label(name)
    return stem if rel == "." else f"{rel}/{stem}"


def group_folder(folder: Path, root: Path, files: list[Path], out: Discovery) -> None:
    """Jobs of one folder (see the module docstring)."""
    ranks: dict[tuple, list[tuple[int, Path]]] = defaultdict(list)
    singles: list[Path] = []
    unranked: list[Path] = []  # files of per-process writers that name no rank
    for f in files:
        info = sniff(f)
        if info is None:
            out.skipped.append({"path": str(f), "reason": "not a trace (no traceEvents)"})
            continue
        ws = info["world_size"]
        if info["rank"] is not None and (ws is None or ws > 1):
            ranks[(ws, info["backend"])].append((info["rank"], f))
        else:
            singles.append(f)
            if info["rank"] is None and info["writer"] in layouts.PER_PROCESS_WRITERS:
                unranked.append(f)
    if len(unranked) > 1:  # several processes of one job, maybe, but nothing says which rank each is
        out.warnings.append({"path": str(folder), "warning": layouts.unknown_ranks_warning(
            str(folder), [str(f) for f in unranked])})
    # a rank that does not say its world size (a `rank<N>` name over an empty or cut-off file, no or a bad
    # distributedInfo) belongs to the folder's one run, if there is one: left out, the run would look whole
    for key in [k for k in ranks if k[0] is None]:
        runs = [k for k in ranks if k[0] is not None and key[1] in (None, k[1])]
        if len(runs) == 1:
            ranks[runs[0]] += ranks.pop(key)
    jobs: list[tuple[str | None, list[Path]]] = []
    for members in ranks.values():
        if len({r for r, _ in members}) < 2:  # one rank of a run on its own: a trace like any other
            singles += [f for _, f in members]
            continue
        by_rank: dict[int, list[Path]] = defaultdict(list)
        for r, f in sorted(members, key=lambda m: (m[0], m[1].name)):
            by_rank[r].append(f)
        for k in range(max(len(v) for v in by_rank.values())):
            jobs.append((None if k == 0 else f"#{k + 1}", [v[k] for v in by_rank.values() if k < len(v)]))
    all_traces = {str(f) for f in files}
    found: list[JobSpec] = []
    for suffix, members in jobs:
        label = _label(folder, root, None) + (suffix or "")
        paths = tuple(str(f) for f in sorted(members))
        if len(paths) == 1:
            singles.append(members[0])
            continue
        found.append(JobSpec(label, paths, str(folder), whole_folder=set(paths) == all_traces))
    found += [JobSpec(_label(folder, root, f.name), (str(f),)) for f in sorted(singles)]
    if len(found) == 1:  # a run folder (one run, one trace or its ranks) is named by the folder
        found = [JobSpec(_label(folder, root, None), found[0].files, found[0].folder, found[0].whole_folder)]
    out.jobs.extend(found)


def discover(paths: list[str | Path]) -> Discovery:
    out = Discovery()
    for p in map(Path, paths):
        if not p.exists():
            out.errors.append({"path": str(p), "error": f"{p}: no such file or directory"})
            continue
        if not p.is_dir():
            out.jobs.append(JobSpec(file_label(p.name), (str(p),)))
            continue
        before = len(out.jobs)
        for dirpath, dirnames, _ in os.walk(p):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            folder = Path(dirpath)
            files = trace_files(folder)
            if files:
                group_folder(folder, p, files, out)
        if len(out.jobs) == before:
            out.errors.append({"path": str(p), "error": f"{p}: directory holds no trace files (*.json, *.json.gz)"})
    _unique_labels(out.jobs)
    return out


def _unique_labels(jobs: list[JobSpec]) -> None:
    seen: dict[str, int] = {}
    for k, j in enumerate(jobs):
        n = seen.get(j.label, 0)
        seen[j.label] = n + 1
        if n:
            jobs[k] = JobSpec(f"{j.label}#{n + 1}", j.files, j.folder, j.whole_folder)
