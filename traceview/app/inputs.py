"""The app's inputs and caches: bundled samples, staged uploads, the analyze document, timelines, layer details."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import streamlit as st

from .. import report
from ..ingest import loader
from ..ingest.inputs import parse_size, safe_file_name
from ..layer_detail import layer_detail
from ..model import Trace
from ..options import Options
from ..sections.timeline import timeline
from ..trace_cache import TraceCache

ROOT = Path(__file__).resolve().parents[2]  # the checkout (app.py, sample_traces/)
SAMPLES = ROOT / "sample_traces"
NO_SAMPLE = "(none)"
# Untrusted uploads on a shared server: the decompressed size of one trace is capped lower than on the
# CLI (whose default is 8 GiB), and each session keeps at most this much of loaded traces. Uploads
# themselves are capped by server.maxUploadSize in .streamlit/config.toml.
# Read at each use: the server's environment may change between sessions (and tests set it per test).


def app_max_bytes() -> int:
    return parse_size(os.environ.get("TRACEVIEW_APP_MAX_BYTES", "2G"))


def app_cache_bytes() -> int:
    return parse_size(os.environ.get("TRACEVIEW_APP_CACHE_BYTES", "1G"))


@st.cache_data(show_spinner=False)
def sample_choices() -> dict[str, Path]:
    """Bundled traces (every `*.json.gz` under sample_traces/), plus each directory that holds the ranks of one
    run as `traceview batch` finds them (`discover`: distributedInfo, `rank<N>` names, framework layouts such as
    TorchTitan's `iteration_<N>/`), analyzed as one job like `traceview analyze RUN_DIR/`."""
    from ..ci.discover import discover

    if not SAMPLES.is_dir():  # an installed package without the checkout's samples
        return {}
    files = sorted(p for p in SAMPLES.rglob("*.json.gz") if p.is_file() and not p.name.startswith("."))
    out = {str(p.relative_to(SAMPLES)): p for p in files}
    for j in discover([SAMPLES]).jobs:
        if j.folder and j.whole_folder and len(j.files) > 1:
            out[f"{Path(j.folder).relative_to(SAMPLES)}/ (all ranks)"] = Path(j.folder)
    return dict(sorted(out.items()))


def _release(tmp: tempfile.TemporaryDirectory) -> None:
    tmp.cleanup()


@st.cache_resource(max_entries=4, show_spinner=False, on_release=_release)
def staged(digest: str, _data: tuple[tuple[str, bytes], ...]) -> tempfile.TemporaryDirectory:
    """The uploaded bytes as files with their original names (the loader reads the suffix: .json / .gz).
    Only read by the loader as JSON, never executed or unpickled."""
    tmp = tempfile.TemporaryDirectory(prefix="traceview-upload-")
    for name, data in _data:
        (Path(tmp.name) / name).write_bytes(data)
    return tmp


def default_options(step: int | None, unprofiled_ms: float | None = None) -> Options:
    """What `traceview analyze PATHS [--step N] [--unprofiled-ms MS]` runs with: [tool.traceview] of the working
    directory, if any."""
    return Options.build(step=step, unprofiled_ms=unprofiled_ms)


def load_cached(path: Path) -> Trace:
    """A loaded trace, kept in this session while its file is unchanged (switching steps re-analyzes without
    re-reading); the session's cache is bounded in bytes, and no session sees another's traces."""
    s = path.stat()
    cache = st.session_state.get("_traces")
    if cache is None:
        cache = st.session_state["_traces"] = TraceCache(app_cache_bytes())
    # through the module: a test may count the loader's calls
    return cache.get(
        (str(path), s.st_mtime_ns, s.st_size), lambda: loader.load_file(path, max_bytes=app_max_bytes())
    )


@st.cache_data(max_entries=32, show_spinner="Analyzing…")
def analyze_doc(key: str, step: int | None, _paths: tuple[str, ...], unprofiled_ms: float | None = None) -> dict:
    """The `--format json` document for these inputs (`key` identifies their content)."""
    try:
        return report.analyze(list(_paths), default_options(step, unprofiled_ms), load=load_cached).to_dict()
    except Exception as e:  # noqa: BLE001 - as the CLI: one line, never a traceback
        first = (str(e).strip().splitlines() or [""])[0]
        return report.Report(
            errors=[{"path": "", "error": f"internal error ({type(e).__name__}: {first})"}]
        ).to_dict()


@st.cache_data(max_entries=4, show_spinner="Preparing the trace for Perfetto…")
def perfetto_payload(path: str, mtime_ns: int, step: int | None) -> bytes | None:
    """The trace with traceview's tracks (`traceview annotate`), gzipped; None when too large to send from a page."""
    import gzip

    from ..cli.annotate import annotated
    from ..formatters.perfetto import MAX_EMBED_BYTES

    blob, _ = annotated(path, default_options(step), app_max_bytes(), trace=load_cached(Path(path)))
    data = gzip.compress(blob, 6)
    return data if len(data) <= MAX_EMBED_BYTES else None


@st.cache_data(max_entries=16, show_spinner="Building the timeline…")
def timeline_data(path: str, mtime_ns: int, step: int, max_items: int) -> dict:
    return timeline(load_cached(Path(path)), step, max_items)


@st.cache_data(max_entries=32, show_spinner=False)
def layer_data(path: str, mtime_ns: int, layer: str, step: int | None, _findings: list[dict]) -> dict:
    return layer_detail(load_cached(Path(path)), layer, step=step, findings=_findings)


def upload_inputs(files: list[Any]) -> tuple[str, tuple[str, ...], str]:
    """(cache key, paths to analyze, staging dir) for the uploaded files."""
    items: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for k, f in enumerate(files):
        name = safe_file_name(f.name, f"trace{k}.json")
        if name in seen:  # same name twice: keep both
            name = f"{k}_{name}"
        seen.add(name)
        items.append((name, f.getvalue()))
    h = hashlib.sha256()
    for name, data in items:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    digest = h.hexdigest()
    tmp = staged(digest, tuple(items))
    base = Path(tmp.name)
    # Several files are the ranks of one job: a directory, as `traceview analyze RUN_DIR/` does.
    paths = (str(base),) if len(items) > 1 else (str(base / items[0][0]),)
    return digest, paths, str(base)


def chosen_inputs(
    files: list[Any] | None, sample: str, samples: dict[str, Path]
) -> tuple[str, tuple[str, ...], str]:
    if files:
        return upload_inputs(files)
    if sample != NO_SAMPLE:
        p = samples[sample]
        return f"sample:{p}", (str(p),), ""
    return "", (), ""
