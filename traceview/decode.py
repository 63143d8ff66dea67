"""Bytes -> typed event structs -> columns.

msgspec decodes the whole `traceEvents` array into small C structs (no dicts), keeping
`args` as an undecoded `Raw` slice. Columns are pulled out with `map(attrgetter(...))`
(C-level iteration, no Python bytecode per event), and `args` are decoded in one batch
per category, only for the categories that need them (see `_ARG_SPECS`).
"""

from __future__ import annotations

import gzip
import re
import zlib
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec

from .errors import TraceError


class Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class Doc(msgspec.Struct, gc=False):
    traceEvents: list[Ev]
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: int | None = None
    displayTimeUnit: str | None = None
    traceName: str | None = None
    trace_id: str | None = None
    record_shapes: Any = None
    profile_memory: Any = None
    with_stack: Any = None
    with_modules: Any = None
    with_flops: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    roctracer_version: Any = None
    host_name: Any = None


_F = msgspec.field
_EMPTY = msgspec.Raw(b"")


class HostArgs(msgspec.Struct, gc=False):
    """Args of cpu_op / user_annotation / python_function / runtime events."""

    external_id: int | None = _F(default=None, name="External id")
    external_id_old: int | None = _F(default=None, name="external id")
    seq: int | None = _F(default=None, name="Sequence number")
    fwd_tid: int | None = _F(default=None, name="Fwd thread id")
    ev_idx: int | None = _F(default=None, name="Ev Idx")
    input_dims: msgspec.Raw = _F(default=_EMPTY, name="Input Dims")
    input_type: msgspec.Raw = _F(default=_EMPTY, name="Input type")
    concrete: msgspec.Raw = _F(default=_EMPTY, name="Concrete Inputs")
    strides: msgspec.Raw = _F(default=_EMPTY, name="Input Strides")
    correlation: int | None = None
    cbid: int | None = None
    cid: int | None = None
    py_id: int | None = _F(default=None, name="Python id")
    py_parent: int | None = _F(default=None, name="Python parent id")
    py_module: int | None = _F(default=None, name="Python module id")
    collective: str | None = _F(default=None, name="Collective name")
    in_nelems: int | None = _F(default=None, name="In msg nelems")
    dtype: str | None = None
    group_size: int | None = _F(default=None, name="Group size")
    pg_name: str | None = _F(default=None, name="Process Group Name")
    seq_comm: int | None = _F(default=None, name="Seq")
    kind: int | str | None = None
    size: int | str | None = None


class Dim3(msgspec.Struct, array_like=True, frozen=True, gc=False):
    x: int | None = None
    y: int | None = None
    z: int | None = None


_NO_DIM = Dim3()


class GpuArgs(msgspec.Struct, gc=False):
    """Args of kernel / gpu_memcpy / gpu_memset / cuda_sync events."""

    external_id: int | None = _F(default=None, name="External id")
    external_id_old: int | None = _F(default=None, name="external id")
    device: int | str | None = None
    stream: int | str | None = None
    correlation: int | None = None
    grid: Dim3 = _NO_DIM
    block: Dim3 = _NO_DIM
    regs: int | None = _F(default=None, name="registers per thread")
    shmem: int | None = _F(default=None, name="shared memory")
    blocks_per_sm: float | str | None = _F(default=None, name="blocks per SM")
    occupancy: float | str | None = _F(default=None, name="est. achieved occupancy %")
    bytes: int | str | None = None
    from_device: int | None = _F(default=None, name="fromDevice")
    collective: str | None = _F(default=None, name="Collective name")
    in_nelems: int | None = _F(default=None, name="In msg nelems")
    out_nelems: int | None = _F(default=None, name="Out msg nelems")
    group_size: int | None = _F(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | None = _F(default=None, name="Process Group Name")
    pg_ranks: str | list[int] | None = _F(default=None, name="Process Group Ranks")
    seq_comm: int | None = _F(default=None, name="Seq")
    graph_id: int | None = _F(default=None, name="graph id")


class MemArgs(msgspec.Struct, gc=False):
    bytes: int | None = _F(default=None, name="Bytes")
    total_allocated: int | None = _F(default=None, name="Total Allocated")
    total_reserved: int | None = _F(default=None, name="Total Reserved")
    device_id: int | None = _F(default=None, name="Device Id")
    device_type: int | None = _F(default=None, name="Device Type")
    addr: int | None = _F(default=None, name="Addr")


class MetaArgs(msgspec.Struct, gc=False):
    name: str | None = None
    labels: str | None = None


_DEC_DOC = msgspec.json.Decoder(Doc)
_DEC_LEGACY = msgspec.json.Decoder(list[Ev])


TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_PREFETCH: dict[str, tuple] = {}
_NOT_TRACES = re.compile(r"^(manifest\.json|control.*|.*\.collect\.json)$")


def trace_files(directory: Path) -> list[Path]:
    """Trace files of a folder: the `*.pt.trace.json[.gz]` ones when there are any (a collector run
    also holds manifest.json and per-rank status files), else every `.json` / `.json.gz`."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                   and not p.name.startswith("."))
    pt = [p for p in files if ".pt.trace.json" in p.name]
    return pt or [p for p in files if not _NOT_TRACES.match(p.name)]


def prefetch(path: Path) -> None:
    """Start reading and gunzipping `path` in a thread (gunzip releases the GIL), so that it overlaps
    the ~0.4 s of importing polars, numpy and the analyses; `read_bytes` picks the result up."""
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["v"] = _read_bytes(path)
        except BaseException as e:  # noqa: BLE001 - re-raised in the reader's thread
            box["e"] = e

    t = threading.Thread(target=work, name="traceview-prefetch", daemon=True)
    t.start()
    _PREFETCH[str(Path(path).resolve())] = (t, box)


def read_bytes(path: Path) -> tuple[bytes, list[str]]:
    """File bytes, gunzipped when the gzip magic is present. A cut gzip yields what it can."""
    hit = _PREFETCH.pop(str(Path(path).resolve()), None) if _PREFETCH else None
    if hit is not None:
        hit[0].join()
        if "e" in hit[1]:
            raise hit[1]["e"]
        return hit[1]["v"]
    return _read_bytes(path)


def _read_bytes(path: Path) -> tuple[bytes, list[str]]:
    warnings: list[str] = []
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    if raw[:2] != b"\x1f\x8b":
        return raw, warnings
    try:
        return _gunzip(raw), warnings
    except (EOFError, OSError, zlib.error):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(raw)
        except zlib.error:
            out = b""
        if not out:
            raise TraceError(f"{path}: corrupt gzip stream, nothing could be decompressed") from None
        warnings.append(f"gzip stream is truncated; decompressed the first {len(out):,} bytes")
        return out, warnings


try:  # ISA-L's gunzip is ~1.7x faster than zlib's on trace files
    from isal.igzip import decompress as _gunzip
except ImportError:  # pragma: no cover - optional speed-up
    _gunzip = gzip.decompress


_BARE = re.compile(rb"(?<=[:\[,])\s*(-?inf|-?Infinity|nan|NaN|N/A)\s*(?=[,}\]])")
_EVENT_END = re.compile(rb"\}\s*,\s*\{")


def _repair(data: bytes) -> bytes:
    """Known writer bugs: bare inf/nan/N/A numbers (quote them) and unescaped quotes in names."""
    data = _BARE.sub(lambda m: b'"' + m.group(1) + b'"', data)
    # a '"' inside a "name" value that is not followed by , } ] : is literal: escape it
    return re.sub(
        rb'("name"\s*:\s*")(.*?)("\s*[,}\]])',
        lambda m: m.group(1) + re.sub(rb'(?<!\\)"', rb'\\"', m.group(2)) + m.group(3),
        data,
    )


def _salvage(data: bytes) -> tuple[bytes, int] | None:
    """Cut a truncated document after its last complete top-level event and close it."""
    start = data.find(b'"traceEvents"')
    if start < 0:
        return None
    ends = [m.start() for m in _EVENT_END.finditer(data, max(start, len(data) - 4_000_000))]
    for cut in reversed(ends[-50:]):
        cand = data[: cut + 1] + b"]}"
        try:
            msgspec.json.decode(cand, type=Doc)
        except msgspec.DecodeError:
            continue
        return cand, len(data) - cut - 1
    return None


def decode(data: bytes, path: Path) -> tuple[Doc, list[str]]:
    """Decode a Kineto document (object with traceEvents) or the legacy top-level array."""
    warnings: list[str] = []
    head = data[:64].lstrip()
    if not head:
        raise TraceError(f"{path}: empty file")
    if head[:1] == b"[":
        try:
            return Doc(traceEvents=_DEC_LEGACY.decode(data)), warnings
        except msgspec.DecodeError as e:
            raise TraceError(f"{path}: not a valid trace: {e}") from None
    if head[:1] != b"{":
        raise TraceError(f"{path}: not a JSON trace (does not start with '{{' or '[')")
    try:
        return _DEC_DOC.decode(data), warnings
    except msgspec.ValidationError as e:
        if "traceEvents" in str(e) and "missing required field" in str(e):
            raise TraceError(f"{path}: JSON has no 'traceEvents' array: not a PyTorch profiler trace") from None
        err = e
    except msgspec.DecodeError as e:
        err = e
    fixed = _repair(data)
    if fixed != data:
        try:
            doc = _DEC_DOC.decode(fixed)
            warnings.append("repaired invalid JSON written by the profiler (bare inf/nan or unescaped quotes)")
            return doc, warnings
        except msgspec.DecodeError:
            pass
    got = _salvage(fixed)
    if got is None:
        raise TraceError(f"{path}: invalid JSON: {err}") from None
    cand, dropped = got
    doc = _DEC_DOC.decode(cand)
    warnings.append(
        f"trace is truncated: analyzed {len(doc.traceEvents):,} complete events, skipped the last "
        f"{dropped:,} bytes (incomplete event) and any metadata written after the event list"
    )
    return doc, warnings


def column(evs: list[Ev], attr: str) -> list:
    return list(map(attrgetter(attr), evs))


def decode_args(raws: list[msgspec.Raw], typ: type) -> list:
    """Decode many (non-empty) args objects in one call: join them into one JSON array."""
    if not raws:
        return []
    body = b",".join(raws)
    try:
        return msgspec.json.decode(b"[" + body + b"]", type=list[typ])
    except msgspec.ValidationError:
        # one odd value somewhere (a type we did not expect): decode one by one, dropping bad ones
        dec = msgspec.json.Decoder(typ)
        out = []
        for r in raws:
            try:
                out.append(dec.decode(r))
            except msgspec.DecodeError:
                out.append(typ())
        return out
