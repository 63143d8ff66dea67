"""Which `args` fields the loader reads, from which events: the args tables, one per `_args_frame` read.

The C scanner (`_scan.Scanner`) parses each kept `args` object once, as it scans, into typed columns of the
tables that read it (`tables_of(ph, cat, name)` names them: one bit each), instead of keeping the objects'
text for a second parse. The loader's msgspec path reads the same tables from the same rows. No polars here:
the CLI's prefetch thread builds the scanner while the main thread still imports.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, NamedTuple

import msgspec

from .argstructs import GpuArgs, HostArgs, MemArgs, MetaArgs
from .categories import GPU_CATS, HOST_CATS, META_NAMES, OLD_CATS, RARE_NAMES

# host args by category: each category's table holds only the columns it carries
PY_FIELDS = {"py_id": "py_id", "py_parent": "py_parent", "py_module": "py_module", "ev_idx": "ev_idx"}
OP_FIELDS = {"external_id": "external_id", "external_id_old": "external_id_old", "seq": "seq", "fwd_tid": "fwd_tid",
             "ev_idx": "ev_idx", "input_dims": "input_dims", "input_type": "input_type"}
RT_FIELDS = {"external_id": "external_id", "external_id_old": "external_id_old", "correlation": "correlation"}
RARE_FIELDS = {"concrete": "concrete", "strides": "strides", "collective": "collective", "in_nelems": "in_nelems",
               "dtype": "dtype", "group_size": "group_size", "pg_name": "pg_name", "seq_comm": "seq_comm",
               "kind": "kind", "size": "size"}
GPU_FIELDS = {
    "external_id": "external_id", "external_id_old": "external_id_old", "a_device": "device",
    "a_stream": "stream", "correlation": "correlation", "grid_x": "grid.x", "grid_y": "grid.y", "grid_z": "grid.z",
    "block_x": "block.x", "block_y": "block.y", "block_z": "block.z", "regs": "regs",
    "shmem": "shmem", "blocks_per_sm": "blocks_per_sm", "occupancy": "occupancy", "bytes": "bytes",
    "from_device": "from_device", "collective": "collective", "in_nelems": "in_nelems",
    "out_nelems": "out_nelems", "group_size": "group_size", "dtype": "dtype", "pg_name": "pg_name",
    "pg_ranks": "pg_ranks", "seq_comm": "seq_comm", "graph_id": "graph_id",
}
GANN_FIELDS = {"external_id": "external_id"}
MEM_FIELDS = {"bytes": "bytes", "total_allocated": "total_allocated", "total_reserved": "total_reserved",
              "device_id": "device_id", "device_type": "device_type", "addr": "addr"}
META_FIELDS = {"aname": "name", "labels": "labels"}

RAW_ATTRS = ("input_dims", "input_type", "concrete", "strides")
# struct attributes that msgspec types as plain `int | None`: their columns are built typed
INT_ATTRS = {"external_id", "external_id_old", "seq", "fwd_tid", "ev_idx", "correlation", "py_id", "py_parent",
             "py_module", "in_nelems", "group_size", "seq_comm", "regs", "shmem", "out_nelems", "graph_id",
             "grid.x", "grid.y", "grid.z", "block.x", "block.y", "block.z", "total_allocated",
             "total_reserved", "device_id", "device_type", "addr", "from_device"}


class Table(NamedTuple):
    typ: type
    fields: dict[str, str]  # output column -> struct attribute


PY, OP, RT, RARE, GPU, GANN, MEM, META = range(8)
TABLES = [Table(HostArgs, PY_FIELDS), Table(HostArgs, OP_FIELDS), Table(HostArgs, RT_FIELDS),
          Table(HostArgs, RARE_FIELDS), Table(GpuArgs, GPU_FIELDS), Table(GpuArgs, GANN_FIELDS),
          Table(MemArgs, MEM_FIELDS), Table(MetaArgs, META_FIELDS)]

# polars' `str.contains(RARE_NAMES)` exactly: its `$` is the end of the text (Python's also matches before a
# final newline)
_RARE_EXACT = re.compile(RARE_NAMES.replace("$", r"\Z"))
_OPS = ("cpu_op", "user_annotation")


def tables_of(ph: str, cat: str, name: str) -> int:
    """The tables (a bit each) that read the `args` of an event: exactly the loader's row selections
    (`_host_args`, `load_file`), which use the category as the loader rewrites it."""
    if ph == "X":
        c = "cpu_op" if cat == "" else OLD_CATS.get(cat, cat)
        if c in HOST_CATS:
            if c == "python_function":
                m = 1 << PY if name.startswith("nn.Module:") else 0
            else:
                m = 1 << (OP if c in _OPS else RT)
            return m | (1 << RARE if _RARE_EXACT.search(name) else 0)
        if c in GPU_CATS:
            return 1 << GPU
        return 1 << GANN if c == "gpu_user_annotation" else 0
    if ph == "i":
        return 1 << MEM if name == "[memory]" else 0
    return 1 << META if ph == "M" and name in META_NAMES else 0


# JSON type bits of the scanner, and how a table column holds a field
T_NULL, T_INT, T_FLOAT, T_STR, T_ARR_INT, T_ARR, T_OBJ, T_BOOL = 1, 2, 4, 8, 16, 32, 64, 128
MODE_INT, MODE_RAW, MODE_DIM3, MODE_OBJ = 1, 2, 3, 4
_ANY = T_NULL | T_INT | T_FLOAT | T_STR | T_ARR | T_OBJ | T_BOOL


def _types(t: Any) -> int:
    """JSON types a field of type `t` (its resolved annotation) accepts, as msgspec decodes it (as far as the
    scanner checks them). From the annotations: `msgspec.inspect.type_info` costs ~2 ms of every run's
    start-up (the CLI builds the scanner before it imports polars)."""
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        bits = 0
        for u in typing.get_args(t):
            bits |= _types(u)
        return bits
    if t is type(None):
        return T_NULL
    if t is int:
        return T_INT
    if t is float:
        return T_INT | T_FLOAT
    if t is str:
        return T_STR
    if typing.get_origin(t) is list and typing.get_args(t) == (int,):
        return T_ARR_INT
    if t is msgspec.Raw or t is Any:
        return _ANY
    raise TypeError(f"no scanner support for {t}")


class Column(NamedTuple):
    attr: str  # struct attribute (a Dim3 one: its x, y, z columns are attr.x ...)
    mode: int
    pytype: Any  # the field's type (MODE_OBJ values are decoded as it)


def _struct_fields(typ: type) -> list[tuple[str, bytes, int, bool, Any]]:
    """(attr, JSON key, type bits, dim3, type) of each field of an args struct."""
    out = []
    for f in msgspec.structs.fields(typ):
        dim3 = isinstance(f.type, type) and issubclass(f.type, msgspec.Struct)  # Dim3: [x, y, z]
        out.append((f.name, f.encode_name.encode(), T_ARR_INT | T_ARR if dim3 else _types(f.type), dim3, f.type))
    return out


def _mode(attr: str, bits: int, dim3: bool, pytype: Any) -> int:
    if dim3:
        return MODE_DIM3
    if pytype is msgspec.Raw:
        return MODE_RAW
    return MODE_INT if bits == T_INT | T_NULL and attr in INT_ATTRS else MODE_OBJ


def scanner_spec() -> tuple[list, list, list[list[Column]]]:
    """(structs, tables) as `_scan.Scanner` takes them, and each table's columns in its output order."""
    typs = list(dict.fromkeys(t.typ for t in TABLES))
    fields = {typ: _struct_fields(typ) for typ in typs}
    structs = [[(key, bits, int(dim3)) for _, key, bits, dim3, _ in fields[typ]] for typ in typs]
    tables, columns = [], []
    for t in TABLES:
        want = {a.split(".")[0] for a in t.fields.values()}
        cols = [(j, attr, _mode(attr, bits, dim3, pytype), pytype)
                for j, (attr, _, bits, dim3, pytype) in enumerate(fields[t.typ]) if attr in want]
        tables.append((typs.index(t.typ), [(j, mode) for j, _, mode, _ in cols]))
        columns.append([Column(attr, mode, pytype) for _, attr, mode, pytype in cols])
    return structs, tables, columns


_SPEC: tuple | None = None


def spec() -> tuple[list, list, list[list[Column]]]:
    global _SPEC
    if _SPEC is None:
        _SPEC = scanner_spec()
    return _SPEC
