"""Achieved bus bandwidth of a job's matched collectives and the link it is compared with (docs/multi-rank.md).

- Bytes: the `record_param_comms` op that launched the kernel (Kineto, torch >= 2.1) records `In msg nelems`,
  `dtype` and `Group size`; the collective's size is nelems × the dtype's width (all-gather: the gathered
  output, nelems × group size).
- Time: the collective's pure transfer time (`comm.match`: the minimum duration across ranks — the rank that
  arrived last waited for nobody).
- Bus bandwidth (nccl-tests' `busbw`, PERFORMANCE.md): algbw = bytes / time, times 2(n−1)/n for all-reduce,
  (n−1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast / reduce / send-recv: the per-link
  rate comparable with the link's own.
- Link: from the trace's `deviceProperties` GPU name, the intra-node link of that part (`LINKS`, per direction);
  a part not in the table is compared with PCIe. Ranks on different hosts (InfiniBand / RoCE) are not told apart
  by a Kineto trace: a multi-node job is compared with the intra-node link and reads low.
"""

from __future__ import annotations

import polars as pl

from ..model import Trace

#: bytes per element of Kineto's `dtype` names (c10 ScalarType)
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
               "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8}
#: (GPU name pattern, link, GB/s per direction): the part's intra-node GPU-to-GPU link (vendor datasheets)
LINKS = (
    (r"(?i)\b(B200|B100|GB200|B300|GB300)\b", "NVLink 5", 900.0),
    (r"(?i)\b(H100|H200|H800|GH200)\b(?!.*PCIe)", "NVLink 4", 450.0),
    (r"(?i)\bA100\b(?!.*PCIe)", "NVLink 3", 300.0),
    (r"(?i)\bA800\b(?!.*PCIe)", "NVLink 3", 200.0),
    (r"(?i)\bV100\b(?!.*PCIe)", "NVLink 2", 150.0),
    (r"(?i)\bMI300X?\b", "Infinity Fabric", 448.0),
    (r"(?i)(H100|H200).*PCIe", "PCIe 5.0 x16", 64.0),
)
PCIE = ("PCIe 4.0 x16", 32.0)  # anything else


def link(trace: Trace) -> dict:
    """{gpu, link, peak_gbps} of the trace's first GPU (`deviceProperties`)."""
    import re

    props = trace.meta.device_properties or []
    name = str(props[0].get("name", "")) if props and isinstance(props[0], dict) else ""
    for pat, kind, gbps in LINKS:
        if name and re.search(pat, name):
            return {"gpu": name, "link": kind, "peak_gbps": gbps}
    return {"gpu": name or None, "link": PCIE[0], "peak_gbps": PCIE[1]}


def _factor(coll: pl.Expr, n: pl.Expr) -> pl.Expr:
    c = coll.str.to_lowercase().str.replace_all("_", "")
    return (pl.when(c.str.contains("allreduce")).then(2 * (n - 1) / n)
            .when(c.str.contains("allgather|reducescatter|alltoall")).then((n - 1) / n)
            .otherwise(1.0))


def bus_bandwidth(trace: Trace, m: pl.DataFrame, rank: int) -> dict | None:
    """Per collective name and in all: bytes, transfer time and bus bandwidth (GB/s) of the matched
    collectives `m` (`comm.match`) as rank `rank` (its `trace`) launched them; None where Kineto recorded no sizes."""
    mine = m.filter((pl.col("rank") == rank) & pl.col("op").is_not_null())
    if mine.height == 0 or "in_nelems" not in trace.host.columns:
        return None
    ops = trace.host.select(pl.col("i").cast(pl.Int64).alias("op"), "collective", "in_nelems", "dtype", "group_size")
    j = mine.join(ops, on="op").filter(pl.col("in_nelems").is_not_null() & (pl.col("transfer") > 0))
    if j.height == 0:
        return None
    width = pl.col("dtype").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    n = pl.col("group_size").fill_null(2).cast(pl.Float64).clip(lower_bound=2)
    coll = pl.col("collective").fill_null(pl.col("family"))
    gather = coll.str.to_lowercase().str.replace_all("_", "").str.contains("allgather")
    j = j.with_columns(bytes=pl.col("in_nelems") * width * pl.when(gather).then(n).otherwise(1.0),
                       f=_factor(coll, n), coll=coll).filter(pl.col("bytes").is_not_null())
    if j.height == 0:
        return None
    j = j.with_columns(bus_bytes=pl.col("bytes") * pl.col("f"))
    per = (j.group_by("coll").agg(pl.len().alias("n"), pl.col("bytes").sum(), pl.col("transfer").sum(),
                                  pl.col("bus_bytes").sum())
           .sort(["transfer", "coll"], descending=[True, False], maintain_order=True))

    def gbps(bus_bytes: float, ns: float) -> float:
        return round(bus_bytes / ns, 2) if ns else 0.0  # bytes per ns = GB/s

    rows = [{"collective": r["coll"], "count": r["n"], "bytes": int(r["bytes"]),
             "transfer_us": round(r["transfer"] / 1000, 3), "bus_gbps": gbps(r["bus_bytes"], r["transfer"])}
            for r in per.iter_rows(named=True)]
    return {"by_collective": rows, "bytes": int(j["bytes"].sum()),
            "transfer_us": round(float(j["transfer"].sum()) / 1000, 3),
            "bus_gbps": gbps(float(j["bus_bytes"].sum()), float(j["transfer"].sum()))}
