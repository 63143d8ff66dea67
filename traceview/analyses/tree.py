"""Call tree of host slices per thread, without a per-event loop.

For properly nested slices sorted by (ts asc, dur desc), the ancestors of slice i are exactly
the slices that started before it and had not ended by its start. So
    depth_i = (#slices before i on its thread) - (#slices on its thread that ended by ts_i)
and the parent of i is the last slice before it with depth_i - 1 (one as-of join).
"""

from __future__ import annotations

import polars as pl

# outermost first on exact ties (TRACE_FORMAT §7.5)
_CAT_RANK = {"python_function": 0, "user_annotation": 1, "cpu_op": 2}


def call_tree(host: pl.DataFrame) -> pl.DataFrame:
    """Add `depth` (0 = root) and `parent` (row id `i` of the enclosing slice, null at roots)."""
    if host.height == 0:
        return host.with_columns(depth=pl.lit(None, pl.Int32), parent=pl.lit(None, pl.UInt32))
    df = (host.with_columns(
        _cr=pl.col("cat").replace_strict(_CAT_RANK, default=3, return_dtype=pl.Int8),
        _ev=pl.col("ev_idx").cast(pl.Int64, strict=False).fill_null(0) if "ev_idx" in host.columns else pl.lit(0),
    ).sort("pid", "tid", "ts", "dur", "_cr", "_ev", descending=[False, False, False, True, False, False])
        .with_row_index("_pos"))
    df = df.with_columns(_S=pl.col("_pos") - pl.col("_pos").min().over("pid", "tid"))
    ends = (df.group_by("pid", "tid", "end").len().sort("pid", "tid", "end")
            .with_columns(_E=pl.col("len").cum_sum().over("pid", "tid"))
            .select("pid", "tid", pl.col("end").alias("_end"), "_E"))
    df = df.sort("ts").join_asof(ends.sort("_end"), left_on="ts", right_on="_end", by=["pid", "tid"],
                                 strategy="backward", check_sortedness=False).sort("_pos")
    zero = pl.col("dur") == 0
    nzero = zero.sum().over("pid", "tid", "ts")
    zrank = pl.when(zero).then(pl.col("_pos") - pl.col("_pos").filter(zero).min().over("pid", "tid", "ts")).otherwise(0)
    df = df.with_columns(
        depth=(pl.col("_S") - (pl.col("_E").fill_null(0) - (nzero - zrank))).cast(pl.Int32)
    )
    df = df.with_columns(depth=pl.col("depth").clip(lower_bound=0))
    left = df.select("_pos", "pid", "tid", (pl.col("depth") - 1).alias("_d")).sort("_pos")
    right = df.select(pl.col("_pos").alias("_ppos"), "pid", "tid", pl.col("depth").alias("_d"),
                      pl.col("i").alias("parent"))
    par = left.join_asof(right.sort("_ppos"), left_on="_pos", right_on="_ppos", by=["pid", "tid", "_d"],
                         strategy="backward", allow_exact_matches=False, check_sortedness=False)
    df = df.join(par.select("_pos", "parent"), on="_pos", how="left")
    return df.drop("_cr", "_ev", "_pos", "_S", "_end", "_E", strict=False).sort("i")


def ancestor_where(host: pl.DataFrame, rows: pl.DataFrame, cond: pl.Expr, out: str,
                   include_self: bool = False) -> pl.DataFrame:
    """For each row id `i` in `rows`, the nearest ancestor (by `parent`) whose row satisfies `cond`.

    Climbs one level per iteration for all rows at once (a join per tree level, not per event).
    Returns frame [i, out].
    """
    nodes = host.select("i", "parent", cond.alias("_ok"))
    rows = rows.select("i").join(host.select("i", "parent"), on="i", how="left")
    cur = rows.select("i", (pl.col("i") if include_self else pl.col("parent")).alias("_cur"))
    found: list[pl.DataFrame] = []
    while cur.height:
        cur = cur.filter(pl.col("_cur").is_not_null()).join(
            nodes.rename({"i": "_cur", "parent": "_up"}), on="_cur", how="inner")
        found.append(cur.filter(pl.col("_ok")).select("i", pl.col("_cur").alias(out)))
        cur = cur.filter(~pl.col("_ok")).select("i", pl.col("_up").alias("_cur"))
    if not found:
        return pl.DataFrame({"i": pl.Series([], dtype=pl.UInt32), out: pl.Series([], dtype=pl.UInt32)})
    return pl.concat(found)


def enclosing_op(host: pl.DataFrame, runtime_cats: list[str]) -> pl.DataFrame:
    """Add `op`: for runtime/driver calls, the innermost enclosing `cpu_op` (the op that launched)."""
    rt = host.filter(pl.col("cat").is_in(runtime_cats)).select("i")
    got = ancestor_where(host, rt, pl.col("cat") == "cpu_op", "op")
    return host.join(got, on="i", how="left")
