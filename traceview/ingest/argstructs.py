"""The msgspec structs of the `args` objects the loader reads (one per kind of event). Shared by the msgspec
decoder (`decode.py`) and the C scanner's table specs (`argtables.py`, no polars: read while the CLI imports)."""

# (no `from __future__ import annotations`: msgspec would compile each field's annotation string, as a
# ForwardRef, whenever it reads the fields: ~140 of them in a run)
import msgspec

from .structs import Dim3

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
