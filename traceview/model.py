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
  py_module, input_dims, input_type (raw JSON bytes; parse on demand), collective, ...].
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
  gpu_end, ts, end] where [ts, end) is the device-side step window (tb_plugin's rule).
- `threads`: [pid, tid, name].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

# host categories of runtime/driver API calls (launches, copies, syncs) across backends
RUNTIME_CATS = ["cuda_runtime", "cuda_driver", "xpu_runtime", "xpu_driver", "mtia_runtime",
                "privateuse1_runtime", "privateuse1_driver"]
STEP_RE = r"^ProfilerStep#(\d+)$"  # group 1: the step number


@dataclass(frozen=True)
class TraceMeta:
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

    @property
    def epoch_offset_ns(self) -> int:
        """Add to a frame's ns time to get absolute epoch ns (for cross-rank alignment)."""
        return (self.base_time_ns or 0) + round(self.t0_us * 1000)

    def device_name(self, device: int = 0) -> str | None:
        for p in self.device_properties:
            if p.get("id", 0) == device:
                return p.get("name")
        return self.device_properties[0].get("name") if self.device_properties else None


@dataclass(frozen=True)
class Trace:
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


@dataclass(frozen=True)
class Job:
    """Several rank files of one job (a directory)."""

    path: str
    traces: list[Trace]

    @property
    def ranks(self) -> list[int | None]:
        return [t.meta.rank for t in self.traces]
