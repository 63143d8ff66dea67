"""The msgspec structs a trace file decodes into: the document, its events (typed and lenient) and the
`grid`/`block` triples. Shared by the typed decoder (`decode.py`) and the lenient one (`lax.py`)."""

# (no `from __future__ import annotations`: msgspec would compile each field's annotation string, as a
# ForwardRef, whenever it reads the fields: ~140 of them in a run)
from typing import Any

import msgspec


class Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None  # missing is not 0: the loader skips (ts) or warns (dur)
    dur: float | None = None
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


class EvLax(msgspec.Struct, gc=False):
    """An event whose fields may have any JSON type: decoded only when `Ev` does not validate."""

    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    id: Any = None
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


class Dim3(msgspec.Struct, array_like=True, frozen=True, gc=False):
    x: int | None = None
    y: int | None = None
    z: int | None = None
