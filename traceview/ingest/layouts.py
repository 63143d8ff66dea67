"""Trace folder layouts of the tools that write traces: the rank and iteration a path names, and which writer
(TorchTitan, `tensorboard_trace_handler` as Megatron-LM uses it, dynolog on-demand, Lightning's PyTorchProfiler)
a file's name and head say wrote it. Sources of every pattern: docs/integrations.md."""

from __future__ import annotations

import re
from pathlib import Path

#: a rank in a file name (`rank3_trace.json`, `rank-3.…`, `rank_0.json`) or its folder (`rank3/`, `rank/3/`);
#: not inside a word (`frank2`)
RANK_IN_NAME = re.compile(r"(?<![A-Za-z])rank[-_]?(\d+)")
RANK_DIR = re.compile(r"(?<![A-Za-z])rank[-_]?(\d+)$")
#: TorchTitan `profiling.save_traces_folder`: `iteration_<N>/rank<R>_trace.json`
ITERATION_DIR = re.compile(r"^iteration_(\d+)$")
TITAN_FILE = re.compile(r"^rank(\d+)_trace\.json(\.gz)?$")
#: torch.profiler.tensorboard_trace_handler: `<worker_name>.<time_ns>.pt.trace.json[.gz]`, worker name
#: `<hostname>_<pid>` by default (Megatron-LM's `--use-pytorch-profiler` passes none)
TB_HANDLER = re.compile(r"^(?P<worker>.+)\.(?P<ts>\d{16,})\.pt\.trace\.json(\.gz)?$")
#: dynolog `dyno gputrace --log-file DIR/libkineto_trace.json`: one `libkineto_trace_<pid>.json` per process
DYNOLOG = re.compile(r"^libkineto_trace(_.+)?_(?P<pid>\d+)\.json(\.gz)?$")
#: Lightning PyTorchProfiler: `<stage>-<filename>-<local_rank>-<action>` as tensorboard_trace_handler's worker
LIGHTNING_STAGES = ("fit", "validate", "test", "predict", "sanity_check")
LIGHTNING_MARK = b'"Framework": "pytorch-lightning"'

#: writers whose files are one process each of a job: several unranked ones in a folder deserve a warning
PER_PROCESS_WRITERS = ("torchtitan", "tensorboard_trace_handler", "dynolog", "lightning")


def path_rank(path: Path) -> int | None:
    """The rank a trace's path names: in its file name, else its folder (`rank3/`, `rank/3/`); None if neither."""
    m = RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1))
    parent = path.parent
    m = RANK_DIR.search(parent.name)
    if m:
        return int(m.group(1))
    if parent.name.isdigit() and parent.parent.name.lower() == "rank":
        return int(parent.name)
    return None


def iteration(folder: Path) -> int | None:
    """N of a TorchTitan `iteration_<N>` folder, else None."""
    m = ITERATION_DIR.match(folder.name)
    return int(m.group(1)) if m else None


def writer(path: Path, head: bytes | None = None) -> str | None:
    """Which tool's layout a trace file follows (None: none known). `head`: its first bytes, when read."""
    name = path.name
    if head is not None and LIGHTNING_MARK in head:
        return "lightning"
    if TITAN_FILE.match(name) and iteration(path.parent) is not None:
        return "torchtitan"
    if DYNOLOG.match(name):
        return "dynolog"
    m = TB_HANDLER.match(name)
    if m:
        return (
            "lightning"
            if m.group("worker").split("-", 1)[0] in LIGHTNING_STAGES
            else "tensorboard_trace_handler"
        )
    return None


def unknown_ranks_warning(folder: str, paths: list[str], job: bool = False) -> str:
    """The warning for the traces of one folder that name no rank: analyzed one by one (`batch`), or as the ranks
    of one job in file-name order (`analyze DIR`, `job`)."""
    by = ", ".join(sorted({w for w in (writer(Path(p)) for p in paths) if w})) or "no known writer"
    how = (
        "ranks are numbered in file-name order for the cross-rank analysis"
        if job
        else "each is analyzed on its own, with no cross-rank analysis"
    )
    return (
        f"{folder}: ranks unknown for {len(paths)} traces ({by}): no distributedInfo rank and no rank in their "
        f"names (rank[-_/]?N); {how}"
    )
