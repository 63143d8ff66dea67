"""The trace model: one immutable `Trace` of polars frames per trace file.

Times are Int64 **nanoseconds** relative to `meta.t0_us` (the earliest event), so sub-µs
GPU activities keep their length (HTA's integer-µs rounding makes them negative).
Reports convert to µs at the edge.

Frames (columns in brackets). `i` is the event's position in the file: a stable row id that
`parent`, `op` and `launch` refer to.
- `host`: every host-side slice — cpu_op, user_annotation, python_function, cuda_runtime,
  cuda_driver — nested into one call tree per thread
  [i, cat, name, pid, tid, ts, dur, end, depth, parent, op (innermost enclosing cpu_op
  `i`, for runtime calls), external_id, correlation, seq, fwd_tid, ev_idx, py_id, py_parent,
  py_module, input_dims, input_type (raw JSON text as Categorical codes; parse on demand), collective, ...].
- `gpu`: kernel, gpu_memcpy, gpu_memset, cuda_sync activities
  [i, cat, name, device, stream, ts, dur, end, correlation, external_id, grid/block xyz,
  regs, shmem, blocks_per_sm, occupancy, bytes, collective keys, launch (host `i` of the
  runtime/driver call), op (host `i` of the cpu_op that launched it), graph (launched by a
  cudaGraphLaunch), kind (compute | comm | memcpy | memset | sync)].
- `gpu_annotations`: gpu_user_annotation [name, device, stream, ts, dur, end, external_id].
- `memory`: `[memory]` instant events [ts, pid, tid, bytes, total_allocated, total_reserved,
  device_type, device_id, addr].
- `flows`: s/f flow events [cat, id, ph, pid, tid, ts] (`fwdbwd`, `ac2g`).
- `steps`: one row per ProfilerStep#N [step, name, host_idx, cpu_ts, cpu_end, gpu_ts,
  gpu_end, ts, end, tb_ts, tb_end] where [ts, end) is the step's period (consecutive periods partition
  time; loader._periods) and [tb_ts, tb_end) the tb_plugin's device-side window (kept for comparison).
- `threads`: [pid, tid, name].
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Any

import polars as pl

from .frames import pick
from .ingest.categories import RUNTIME_CATS
from .records import record

STEP_RE = r"^ProfilerStep#(\d+)$"  # group 1: the step number

_I, _U, _S, _F = pl.Int64, pl.UInt32, pl.String, pl.Float64
#: the raw JSON text of an op's Input Dims / Input type / Concrete Inputs / Input Strides: a few hundred distinct
#: values over a whole trace, so held as codes (4 bytes a row; text, even null, costs 16: ~20 MB on a 132 MB trace)
_RAW = pl.Categorical
#: a column of few distinct names (a row's category, a GPU row's kind): codes, 4 bytes a row instead of a 16-byte
#: text view
_C = pl.Categorical
#: The trace model's columns, declared once: every reader (trace format) produces exactly these frames, with
#: these columns and types (`conform` fills an absent column with nulls; tests validate every bundled trace).
SCHEMA: dict[str, dict[str, pl.DataType]] = {
    "host": {"i": _U, "cat": _C, "name": _S, "pid": _I, "tid": _I, "ts": _I, "dur": _I, "end": _I, "py_id": _I,
             "py_parent": _I, "py_module": _I, "ev_idx": _I, "external_id": _I, "seq": _I, "fwd_tid": _I,
             "input_dims": _RAW, "input_type": _RAW, "correlation": _I, "concrete": _RAW, "strides": _RAW, "collective": _S,
             "in_nelems": _I, "dtype": _S, "group_size": _I, "pg_name": _S, "seq_comm": _I, "kind": _S, "size": _S,
             "depth": pl.Int32, "parent": _U, "op": _U},
    "gpu": {"i": _U, "cat": _C, "name": _S, "pid": _I, "tid": _I, "ts": _I, "dur": _I, "end": _I, "external_id": _I,
            "correlation": _I, "grid_x": _I, "grid_y": _I, "grid_z": _I, "block_x": _I, "block_y": _I, "block_z": _I,
            "regs": _I, "shmem": _I, "blocks_per_sm": _F, "occupancy": _F, "bytes": _I, "collective": _S,
            "in_nelems": _I, "out_nelems": _I, "group_size": _I, "dtype": _S, "pg_name": _S, "pg_ranks": _S,
            "seq_comm": _I, "graph_id": _I, "device": _I, "stream": _I, "launch": _U, "op": _U,
            "launch_ts": _I, "launch_end": _I, "launch_tid": _I, "graph": pl.Boolean, "kind": _C},
    "gpu_annotations": {"name": _S, "device": _I, "stream": _I, "ts": _I, "dur": _I, "end": _I, "external_id": _I},
    "memory": {"ts": _I, "pid": _I, "tid": _I, "bytes": _I, "total_allocated": _I, "total_reserved": _I,
               "device_id": _I, "device_type": _I, "addr": _I},
    "flows": {"cat": _S, "ph": _S, "pid": _I, "tid": _I, "ts": _I, "id": _I},
    "steps": {"step": _I, "name": _S, "host_idx": _U, "cpu_ts": _I, "cpu_end": _I, "gpu_ts": _I, "gpu_end": _I,
              "ts": _I, "end": _I, "tb_ts": _I, "tb_end": _I},
    "threads": {"pid": _I, "tid": _I, "name": _S},
}


def conform(name: str, df: pl.DataFrame) -> pl.DataFrame:
    """`df` with the declared columns of frame `name`, in order and type (absent ones null); extra columns
    a reader adds are kept after them."""
    decl = SCHEMA[name]
    have = df.schema
    if list(have.items())[:len(decl)] == list(decl.items()):  # conforms already (a reloaded or cached frame)
        return df
    cols = [(c if have[c] == t else pl.col(c).cast(t)) if c in have else pl.lit(None, t).alias(c)
            for c, t in decl.items()]  # (a name costs less than an expression: hundreds of columns per trace)
    rest = [c for c in have if c not in decl]
    return pick(df, *cols, *rest) if all(isinstance(c, str) for c in cols) else df.select(*cols, *rest)


def schema_problems(trace: Trace) -> list[str]:
    """How the trace's frames differ from SCHEMA (empty when they conform)."""
    out = []
    for name, decl in SCHEMA.items():
        got = dict(getattr(trace, name).schema)
        for c, t in decl.items():
            if c not in got:
                out.append(f"{name}.{c}: missing")
            elif got[c] != t:
                out.append(f"{name}.{c}: {got[c]} (declared {t})")
        out += [f"{name}.{c}: not declared" for c in got if c not in decl]
    return out


@record(frozen=True)
class TraceMeta:
    """What the loader read about one trace file besides its events: where it came from, its format, rank,
    devices and the warnings of its load."""

    path: str
    format: str  # "kineto" | "kineto-2021" | "legacy-autograd"
    schema_version: Any = None
    trace_name: str | None = None
    base_time_ns: int | None = None
    t0_us: float = 0.0  # ts of the earliest event, in the file's own µs
    device_properties: list[dict] = field(default_factory=list)
    distributed: dict = field(default_factory=dict)
    rank: int | None = None
    world_size: int | None = None
    versions: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    event_counts: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    has_steps: bool = False
    backend: str = "cuda"  # "cuda" | "rocm" | "mtia" | "cpu"
    manifest: dict | None = None  # the `traceview collect` run manifest beside the file (traceview.ingest.manifest)

    @property
    def epoch_offset_ns(self) -> int:
        """Add to a frame's ns time to get absolute epoch ns (for cross-rank alignment)."""
        return (self.base_time_ns or 0) + round(self.t0_us * 1000)

    def device_name(self, device: int = 0) -> str | None:
        for p in self.device_properties:
            if p.get("id", 0) == device:
                return p.get("name")
        return self.device_properties[0].get("name") if self.device_properties else None


# (eq=False: it holds frames/arrays, whose field-wise == and hash raise; it is compared and keyed by identity,
# and the generated __eq__/__hash__ cost start-up time at import)
@record(frozen=True, eq=False)
class Trace:
    """One loaded trace: its metadata and its host, GPU and step frames."""

    meta: TraceMeta
    host: pl.DataFrame
    gpu: pl.DataFrame
    gpu_annotations: pl.DataFrame
    memory: pl.DataFrame
    flows: pl.DataFrame
    steps: pl.DataFrame
    threads: pl.DataFrame

    @property
    def path(self) -> Path:
        return Path(self.meta.path)

    @property
    def ops(self) -> pl.DataFrame:
        return self.host.filter(pl.col("cat") == "cpu_op")

    @property
    def runtime(self) -> pl.DataFrame:
        return self.host.filter(pl.col("cat").is_in(RUNTIME_CATS))

    @property
    def kernels(self) -> pl.DataFrame:
        return self.gpu.filter(pl.col("cat") == "kernel")

    @property
    def has_gpu(self) -> bool:
        return self.gpu.height > 0


@record(frozen=True)
class Job:
    """Several rank files of one job (a directory)."""

    path: str
    traces: list[Trace]

    @property
    def ranks(self) -> list[int | None]:
        return [t.meta.rank for t in self.traces]
