"""Top kernels and top ops by GPU time."""

from __future__ import annotations

import polars as pl

from ..engine import CHAIN
from ..model import Trace
from .rowid import join_by_id


def with_op_names(trace: Trace, gpu: pl.DataFrame | None = None) -> pl.DataFrame:
    gpu = trace.gpu if gpu is None else gpu
    return join_by_id(gpu, "op", trace.host, pl.col("name").alias("op_name"))


def _busy(trace: Trace, gpu: pl.DataFrame | None) -> tuple[pl.DataFrame, int]:
    """(the non-sync GPU rows with their op's name, their total ns: the shares divide by it)."""
    g = with_op_names(trace, gpu).filter(pl.col("kind") != "sync")
    return g, g["dur"].sum() or 1


def top_tables(trace: Trace, n: int = 10, gpu: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(`top_kernels`, `top_ops`) of the same GPU rows, their op names looked up once."""
    g = _busy(trace, gpu)
    return top_kernels(trace, n, busy=g), top_ops(trace, n, busy=g)


def top_kernels(trace: Trace, n: int = 10, gpu: pl.DataFrame | None = None, *,
                busy: tuple[pl.DataFrame, int] | None = None) -> pl.DataFrame:
    """[name, kind, count, total, mean, min, max, share, op_name] sorted by total GPU time (ns)."""
    g, tot = busy or _busy(trace, gpu)
    return (g.lazy().group_by("name", "kind").agg(
        pl.len().alias("count"), pl.col("dur").sum().alias("total"), pl.col("dur").mean().alias("mean"),
        pl.col("dur").min().alias("min"), pl.col("dur").max().alias("max"),
        pl.col("op_name").drop_nulls().mode().sort().first().alias("op_name"))  # ties: by name, not by chance
        .with_columns(share=pl.col("total") / tot)
        .sort("total", "name", descending=[True, False], maintain_order=True).head(n).collect(**CHAIN))


def top_ops(trace: Trace, n: int = 10, gpu: pl.DataFrame | None = None, *,
            busy: tuple[pl.DataFrame, int] | None = None) -> pl.DataFrame:
    """GPU time per launching op name: [op_name, calls, kernels, gpu_total, cpu_total, share]."""
    g, tot = busy or _busy(trace, gpu)
    # (two queries and the lookup: a small trace's run is mostly polars' fixed cost per query)
    per = g.lazy().filter(pl.col("op_name").is_not_null()).group_by("op_name").agg(
        pl.col("op").n_unique().alias("calls"), pl.len().alias("kernels"), pl.col("dur").sum().alias("gpu_total"),
        pl.col("op").unique().alias("_ops")).explode("_ops").collect(**CHAIN)
    per = join_by_id(per, "_ops", trace.host, pl.col("dur").alias("_cpu")).lazy().group_by(
        "op_name", "calls", "kernels", "gpu_total").agg(pl.col("_cpu").sum().alias("cpu_total"))
    return per.with_columns(share=pl.col("gpu_total") / tot).sort(
        "gpu_total", "op_name", descending=[True, False], maintain_order=True).head(n).collect(**CHAIN)


def kernel_table(trace: Trace, gpu: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every kernel/copy by (name, launching op): [name, kind, op_name, count, total] (ns), largest first.
    Unlike `top_kernels` a kernel launched by two ops is two rows, so runs can be matched on both."""
    g = with_op_names(trace, gpu).filter(pl.col("kind") != "sync")
    return (g.group_by("name", "kind", "op_name").agg(pl.len().alias("count"), pl.col("dur").sum().alias("total"))
            .sort("total", "name", descending=[True, False], maintain_order=True))
