"""Bytes -> typed event structs -> columns.

msgspec decodes the whole `traceEvents` array into small C structs (no dicts), keeping
`args` as an undecoded `Raw` slice. Columns are pulled out with `map(attrgetter(...))`
(C-level iteration, no Python bytecode per event), and `args` are decoded in one batch
per category, only for the categories that need them (see `_ARG_SPECS`).
"""

from __future__ import annotations

import functools
import math
import re
import sys
from collections import Counter
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec

from ..errors import TraceError
from . import inputs
from .argstructs import GpuArgs, HostArgs, MemArgs, MetaArgs  # noqa: F401 - re-exported: the loader reads them as decode.*
from .structs import Dim3, Doc, Ev, EvLax  # noqa: F401 - re-exported: the loader reads them as decode.*


@functools.cache
def _decoders() -> tuple[msgspec.json.Decoder, msgspec.json.Decoder]:
    """(the document's typed decoder, a legacy trace's bare event list's): built on the first file the msgspec path
    reads (~0.6 ms of every start-up otherwise: the C scanner reads most traces)."""
    return msgspec.json.Decoder(Doc), msgspec.json.Decoder(list[Ev])


TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_PREFETCH: dict[tuple[str, int], Any] = {}
_NOT_TRACES = r"^(manifest\.json|control.*|.*\.collect\.json|.*\.traceview\.json)$"  # .traceview.json: integrations.torchtitan


def trace_files(directory: Path) -> list[Path]:
    """Trace files of a folder: the `*.pt.trace.json[.gz]` ones when there are any (a collector run
    also holds manifest.json and per-rank status files), else every `.json` / `.json.gz`."""
    try:
        files = sorted(p for p in directory.iterdir() if p.name.endswith(TRACE_SUFFIXES)
                       and not p.name.startswith(".") and p.is_file())
    except OSError as e:
        raise inputs.os_error(directory, e) from None
    pt = [p for p in files if ".pt.trace.json" in p.name]
    return pt or [p for p in files if not re.match(_NOT_TRACES, p.name)]


def prefetch(path: Path, max_bytes: int = inputs.DEFAULT_MAX_BYTES) -> None:
    """Start reading, gunzipping and (C scanner) scanning `path` in threads (`stream.Scan`: gunzip and
    the scan release the GIL), so that it overlaps the ~0.4 s of importing polars, numpy and the analyses;
    the loader picks it up (`take_prefetched`)."""
    import os

    from . import stream

    try:
        if os.environ.get("TRACEVIEW_NO_C", "") in ("1", "true", "yes"):
            raise ImportError
        job: Any = stream.Scan(path, max_bytes)
    except ImportError:  # no C scanner: read ahead only
        job = stream.Stream(path, max_bytes)
    _PREFETCH[(str(Path(path).resolve()), max_bytes)] = job


def drop_prefetched() -> None:
    """Forget prefetch jobs nobody took (their threads end on their own; the results are dropped)."""
    _PREFETCH.clear()


def take_prefetched(path: Path, max_bytes: int) -> Any:
    """The prefetch job of `path` (`stream.Scan` or `stream.Stream`), or None."""
    if _PREFETCH and str(path) != inputs.STDIN:
        return _PREFETCH.pop((str(Path(path).resolve()), max_bytes), None)
    return None


def open_stream(path: Path, max_bytes: int = inputs.DEFAULT_MAX_BYTES) -> Any:
    """The `stream.Stream` of `path`: the prefetched one, or a new one."""
    from .stream import Scan, Stream

    job = take_prefetched(path, max_bytes)
    if isinstance(job, Scan):  # (not asked for: the loader takes a Scan itself)
        job.close()
        job = None
    return job or Stream(path, max_bytes)


def read_bytes(path: Path, max_bytes: int = inputs.DEFAULT_MAX_BYTES) -> tuple[bytes, list[str]]:
    """The whole document's UTF-8 bytes (gunzipped, re-encoded) and warnings; see `inputs.read_input`."""
    hit = take_prefetched(path, max_bytes)
    if hit is not None:
        hit.close()
    return inputs.read_input(path, max_bytes)


# the repairs' patterns, compiled on first use (`re` caches them): only an input that fails to decode reads them,
# and compiling them costs ~1 ms of every run's start-up (issue 32)
_BARE = rb"(?<=[:\[,])\s*(-?inf|-?Infinity|nan|NaN|N/A)\s*(?=[,}\]])"
# a number with a 3-digit exponent: msgspec rejects those that overflow a double (1e999)
# or an integer literal of 309 digits or more (1e400 written out: beyond a double, or beyond what msgspec
# decodes as an integer)
_HUGE = rb"(?<=[:\[,])(\s*)(-?\d+(?:\.\d+)?[eE][+-]?\d{3,}|-?\d{309,}(?:\.\d+)?)(?=\s*[,}\]])"
_LONE_SURROGATE = (rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                   rb"|(?<![0-9a-fA-F]{2}\\u[dD][89abAB][0-9a-fA-F]{2})(?<!\\)\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_CTRL = rb"[\x00-\x08\x0b\x0c\x0e-\x1f]"  # never valid raw in JSON text, in strings or out
_EVENT_END = rb"\}\s*,\s*\{"
_AT_BYTE = r"\(byte (\d+)\)"


def _repair(data: bytes) -> tuple[bytes, list[str]]:
    """Known writer bugs: bare inf/nan/N/A numbers and numbers beyond a double (quoted: the loader
    treats them as missing), unescaped quotes in names, lone UTF-16 surrogate escapes, raw control
    characters and invalid UTF-8 (replaced). Returns the bytes and what was repaired."""
    done: list[str] = []

    def sub(rx: bytes, repl: Any, what: str) -> None:
        nonlocal data
        new, n = re.subn(rx, repl, data)
        if new != data:  # the names pattern matches every name; count only real changes
            data = new
            done.append(f"{n:,} {what}" if what != "names" else "unescaped quotes in names")

    sub(_BARE, lambda m: b'"' + m.group(1) + b'"', "bare inf/nan")
    sub(_HUGE, lambda m: m.group(0) if _finite(m.group(2)) else m.group(1) + b'"' + m.group(2) + b'"',
        "out-of-range numbers")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = data.decode("utf-8", "replace").encode("utf-8")
        done.append("invalid UTF-8")
    sub(_LONE_SURROGATE, rb"\\ufffd", "lone surrogate escapes")
    sub(_CTRL, lambda m: b"\\u%04x" % m.group(0)[0], "raw control characters")
    # a '"' inside a "name" value that is not followed by , } ] : is literal: escape it
    sub(rb'("name"\s*:\s*")(.*?)("\s*[,}\]])',
        lambda m: m.group(1) + re.sub(rb'(?<!\\)"', rb'\\"', m.group(2)) + m.group(3), "names")
    return data, done


def _finite(num: bytes) -> bool:
    return len(num.split(b".")[0].lstrip(b"-")) < 309 and math.isfinite(float(num))


def _salvage(data: bytes, at: int, warnings: list[str]) -> tuple[Doc, int] | None:
    """Cut the document after the last complete top-level event before byte `at` (where decoding failed:
    the end of a truncated file, or damage inside it) and close it."""
    start = data.find(b'"traceEvents"')
    if start < 0:
        return None
    at = min(max(at, 0), len(data))
    ends = [m.start() for m in re.compile(_EVENT_END).finditer(data, max(start, at - 4_000_000), at)]
    for cut in reversed(ends[-50:]):
        cand = data[: cut + 1] + b"]}"
        try:
            return _typed_or_lax(cand, warnings), len(data) - cut - 1
        except (msgspec.DecodeError, TraceError):
            continue
    return None


def _error_at(err: Exception, size: int) -> int:
    m = re.search(_AT_BYTE, str(err))
    return int(m.group(1)) if m else size


#: the start of an execution trace (`torch.profiler.ExecutionTraceObserver`, Chakra's schema): a graph of ops without
#: their times, often saved beside the Kineto trace and uploaded in its place
_ET_HEAD = rb'^\s*\{\s*"schema"\s*:\s*"[^"]*"\s*,\s*"pid"'


def _not_a_trace(path: Path, e: msgspec.ValidationError, head: bytes = b"") -> TraceError | None:
    msg = str(e)
    if "traceEvents" in msg and "missing required field" in msg:
        if re.match(_ET_HEAD, head):
            return TraceError(f"{path}: an execution trace (ExecutionTraceObserver's graph of ops, no timings), not "
                              "the profiler's timed trace: analyze the Kineto trace of the same run "
                              "(`prof.export_chrome_trace(...)` or `tensorboard_trace_handler`)")
        return TraceError(f"{path}: JSON has no 'traceEvents' array: not a PyTorch profiler trace")
    if msg.endswith("at `$.traceEvents`") or msg.startswith("Expected `object`"):
        return TraceError(f"{path}: 'traceEvents' is not an array of events: not a PyTorch profiler trace")
    return None


def _typed_or_lax(data: bytes, warnings: list[str], legacy: bool = False) -> Doc:
    """Decode with the typed structs; when a field has an unexpected type, decode leniently and coerce
    (see `lenient.doc_from_lax`). DecodeError (invalid JSON) propagates."""
    try:
        doc, bare = _decoders()
        return Doc(traceEvents=bare.decode(data)) if legacy else doc.decode(data)
    except msgspec.ValidationError:
        from .lenient import decode_lax

        return decode_lax(data, warnings, legacy)


def decode(data: bytes, path: Path) -> tuple[Doc, list[str]]:
    """Decode a Kineto document (object with traceEvents) or the legacy top-level array."""
    warnings: list[str] = []
    head = data[:64].lstrip()
    if not head:
        raise TraceError(f"{path}: empty file")
    legacy = head[:1] == b"["
    if not legacy and head[:1] != b"{":
        raise TraceError(f"{path}: not a JSON trace (does not start with '{{' or '[')")
    try:
        try:
            return _typed_or_lax(data, warnings, legacy), warnings
        except msgspec.ValidationError as e:
            if "out of range" not in str(e):  # 1e999, 400 digits: the repairs below quote it
                raise _not_a_trace(path, e, data[:256]) or TraceError(f"{path}: not a valid trace: {e}") from None
            err: Exception = e
        except msgspec.DecodeError as e:
            err = e
        fixed, repaired = _repair(data)
        if repaired:
            try:
                doc = _typed_or_lax(fixed, warnings, legacy)
                warnings.append("repaired invalid JSON written by the profiler (" + ", ".join(repaired) + ")")
                return doc, warnings
            except msgspec.DecodeError as e:
                err = e
        got = None if legacy else _salvage(fixed, _error_at(err, len(fixed)), warnings)
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply (over {sys.getrecursionlimit()} levels): not a "
                         "profiler trace") from None
    except msgspec.ValidationError as e:
        raise _not_a_trace(path, e, data[:256]) or TraceError(f"{path}: not a valid trace: {e}") from None
    if got is None:
        raise TraceError(f"{path}: invalid JSON: {err}") from None
    doc, dropped = got
    if repaired:
        warnings.append("repaired invalid JSON written by the profiler (" + ", ".join(repaired) + ")")
    at = _error_at(err, len(fixed))
    if at >= len(fixed) - 1:
        warnings.append(
            f"trace is truncated: analyzed {len(doc.traceEvents):,} complete events, skipped the last "
            f"{dropped:,} bytes (incomplete event) and any metadata written after the event list")
    else:
        warnings.append(
            f"invalid JSON at byte {at:,} ({str(err).split(' (byte')[0]}): analyzed the "
            f"{len(doc.traceEvents):,} complete events before it, skipped the last {dropped:,} bytes")
    return doc, warnings


def column(evs: list[Ev], attr: str) -> list:
    return list(map(attrgetter(attr), evs))


def decode_args(raws: list[msgspec.Raw], typ: type, issues: Counter | None = None) -> list:
    """Decode many (non-empty) args objects in one call: join them into one JSON array. An object with
    a value of an unexpected type keeps its other fields; that value is coerced or dropped and counted in
    `issues` (see `lax.args_lenient`)."""
    if not raws:
        return []
    body = b",".join(raws)
    try:
        return msgspec.json.decode(b"[" + body + b"]", type=list[typ])
    except msgspec.ValidationError:
        from .lenient import args_lenient

        dec = msgspec.json.Decoder(typ)
        out = []
        for r in raws:  # only for files with odd values: the typed batch above is the normal path
            try:
                out.append(dec.decode(r))
            except msgspec.ValidationError:
                out.append(args_lenient(r, typ, issues))
        return out
