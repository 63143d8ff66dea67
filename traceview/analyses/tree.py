"""Call tree of host slices per thread, without a per-event loop.

For properly nested slices sorted by (ts asc, dur desc), the ancestors of slice i are exactly
the slices that started before it and had not ended by its start. So
    depth_i = (#slices before i on its thread) - (#slices on its thread that ended by ts_i)
and the parent of i is the last slice before it with depth_i - 1 (one as-of join).
"""

from __future__ import annotations

import numpy as np
import polars as pl

# outermost first on exact ties
_CAT_RANK = {"python_function": 0, "user_annotation": 1, "cpu_op": 2}


def call_tree(host: pl.DataFrame) -> pl.DataFrame:
    """Add `depth` (0 = root) and `parent` (row id `i` of the enclosing slice, null at roots).

    numpy sorts and binary searches (no per-event Python): cheaper than polars window
    expressions for this shape of work, and single-threaded, so it stays fast on a busy box.
    """
    n = host.height
    if n == 0:
        return host.with_columns(depth=pl.lit(None, pl.Int32), parent=pl.lit(None, pl.UInt32))
    pid = host["pid"].to_numpy()
    tid = host["tid"].to_numpy()
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    cr = host["cat"].replace_strict(_CAT_RANK, default=3, return_dtype=pl.Int8).to_numpy()
    # Ev Idx orders exact ties; python frames without it keep file order (their call order)
    ev = (host["ev_idx"].fill_null(-1).to_numpy() if "ev_idx" in host.columns else np.full(n, -1, np.int64))
    ev = np.where(ev < 0, host["i"].to_numpy().astype(np.int64), ev)
    order = np.lexsort((ev, cr, -dur, ts, tid, pid))  # last key is the primary one
    pid, tid, ts, dur = pid[order], tid[order], ts[order], dur[order]
    end = ts + dur
    pos = np.arange(n, dtype=np.int64)
    new = np.ones(n, bool)
    new[1:] = (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
    gid = np.cumsum(new) - 1
    S = pos - pos[new][gid]  # slices before i on its thread
    lo = int(min(ts.min(), 0))
    span = int(end.max()) - lo + 1
    if (gid[-1] + 1) * span >= 2**62:  # composite keys would overflow: never seen in practice
        raise ValueError("trace too long for the call-tree keys")
    base = gid * span - lo
    ekeys = np.sort(base + end)
    E = np.searchsorted(ekeys, base + ts, side="right") - np.searchsorted(ekeys, base + lo, side="left")
    # zero-length slices at the same (thread, ts) sort last; those at or after i have not "ended" before it
    zero = dur == 0
    tkey = base + ts
    zkeys = tkey[zero]
    nzero = np.searchsorted(zkeys, tkey, side="right") - np.searchsorted(zkeys, tkey, side="left")
    zrank = np.zeros(n, np.int64)
    if zero.any():
        zpos = pos[zero]
        zfirst = np.ones(zpos.size, bool)
        zfirst[1:] = zkeys[1:] != zkeys[:-1]
        run = np.cumsum(zfirst) - 1
        zrank[zero] = zpos - zpos[zfirst][run]
    depth = np.maximum(S - (E - (nzero - zrank)), 0)
    # parent: the last earlier slice on the thread one level up
    D = int(depth.max()) + 2
    k3 = gid * D + depth
    comb = k3 * n + pos
    sorter = np.argsort(comb, kind="stable")
    comb_s = comb[sorter]
    q = (gid * D + depth - 1) * n + pos
    j = np.searchsorted(comb_s, q, side="left") - 1
    ok = (j >= 0) & (depth > 0)
    cand = np.where(ok, sorter[np.clip(j, 0, n - 1)], 0)
    ok &= k3[cand] == gid * D + depth - 1
    ids = host["i"].to_numpy()[order]
    parent = np.where(ok, ids[cand], 0)
    out = pl.DataFrame({
        "i": ids, "depth": depth.astype(np.int32),
        "parent": parent,
        "_ok": ok,
    }).with_columns(parent=pl.when(pl.col("_ok")).then(pl.col("parent").cast(pl.UInt32))).drop("_ok")
    return host.drop("depth", "parent", strict=False).join(out, on="i", how="left")


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
