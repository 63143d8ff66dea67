"""Call tree of host slices per thread, without a per-event loop.

For properly nested slices sorted by (ts asc, dur desc), the ancestors of slice i are exactly
the slices that started before it and had not ended by its start. So
    depth_i = (#slices before i on its thread) - (#slices on its thread that ended by ts_i)
and the parent of i is the last slice before it with depth_i - 1 (one as-of join).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..engine import IN_MEMORY
from ..errors import TraceError
from ..frames import filled, isnull, pick

# outermost first on exact ties (TRACE_FORMAT §7.5)
_CAT_RANK = {"python_function": 0, "user_annotation": 1, "cpu_op": 2}


def thread_ids(pid: np.ndarray, tid: np.ndarray) -> np.ndarray | None:
    """A dense id per (pid, tid) (any order: threads are independent), or None when the pair does not pack
    into one int64 (ids beyond 32 bits)."""
    lim = 2**31
    if pid.size and (pid.min() < -lim or pid.max() >= lim or tid.min() < -lim or tid.max() >= lim):
        return None
    key = (pid.astype(np.int64) << 32) | (tid.astype(np.int64) + lim)
    run = np.ones(key.size, bool)  # the distinct keys are among the run starts (events come in thread runs)
    run[1:] = key[1:] != key[:-1]
    distinct = np.unique(key[run])
    return np.zeros(key.size, np.intp) if distinct.size == 1 else np.searchsorted(distinct, key)


def _order(host: pl.DataFrame, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray,
           dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row order by (thread, ts asc, dur desc, category rank, Ev Idx), thread id per row).

    Events are nearly sorted by time already, so a stable sort on (thread, ts) costs little; only the rows that
    tie on (thread, ts) are ordered by the other keys (the tie-breaks below)."""
    n = host.height
    gid = thread_ids(pid, tid)
    if gid is None:  # huge pid/tid values
        return _order_general(host, pid, tid, ts, dur)
    lo = int(ts.min())
    span = int(ts.max()) - lo + 1
    if (int(gid.max()) + 1) * span >= 2**62:  # the composite key would overflow: call_tree says why
        return _order_general(host, pid, tid, ts, dur)
    key = gid * span + (ts - lo)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    tie = np.zeros(n, bool)
    tie[1:] = ks[1:] == ks[:-1]
    tie[:-1] |= tie[1:]
    idx = np.flatnonzero(tie)
    if idx.size:
        sub = order[idx]
        order[idx] = sub[np.lexsort((*_tie_keys(host, sub, dur), ks[idx]))]
    return order, gid


def _order_general(host: pl.DataFrame, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray,
                   dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_order` by a full lexicographic sort."""
    n = host.height
    order = np.lexsort((*_tie_keys(host, np.arange(n), dur), ts, tid, pid))
    p, t = pid[order], tid[order]
    new = np.ones(n, bool)
    new[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
    gid = np.empty(n, np.int64)
    gid[order] = np.cumsum(new) - 1
    return order, gid


def _tie_keys(host: pl.DataFrame, rows: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Ev Idx, category rank, -dur) of `rows`: the order of slices that start together, least significant first.
    Outermost first on exact ties (TRACE_FORMAT §7.5); Ev Idx orders them, python frames without it keep file order
    (their call order)."""
    sub = host.select(*(c for c in ("cat", "i", "ev_idx") if c in host.columns))[rows]
    cr = sub["cat"].replace_strict(_CAT_RANK, default=3, return_dtype=pl.Int8).to_numpy()
    ids = sub["i"].to_numpy().astype(np.int64)
    ev = sub["ev_idx"].fill_null(-1).to_numpy() if "ev_idx" in sub.columns else np.full(rows.size, -1, np.int64)
    return np.where(ev < 0, ids, ev), cr, -dur[rows]


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
    order, gid = _order(host, pid, tid, ts, dur)
    # intermediates are dropped as soon as they are used, positions and counts are int32 (below 2**31 rows), and
    # arrays are updated in place: this runs on every host event of the trace (~45 bytes a row at most)
    idx = np.int32 if n < 2**31 else np.int64
    gid = gid[order]
    new = np.ones(n, bool)
    new[1:] = gid[1:] != gid[:-1]
    del gid
    first = np.flatnonzero(new).astype(idx)  # each thread's first position
    tno = np.cumsum(new, dtype=idx)  # threads numbered in sorted order (from 1 here)
    tno -= 1
    ts, dur = ts[order], dur[order]
    zero = dur == 0
    end = ts + dur
    del dur
    lo = int(min(ts.min(), 0))
    span = int(end.max()) - lo + 1
    if (int(tno[-1]) + 1) * span >= 2**62:  # composite keys would overflow: never seen in practice
        raise TraceError(f"{tno[-1] + 1:,} host threads over {span / 1e9:,.0f} s: too many threads over too long "
                         "a time span to nest the host events")
    base = tno.astype(np.int64)
    base *= span
    base -= lo
    end += base
    end.sort(kind="stable")  # the ends' keys; nearly sorted: nested slices end in start order but for a few
    tkey = ts  # (the sorted copy: its own array)
    tkey += base  # ascending: sorted queries keep the binary searches cheap
    starts = base[new] + lo  # each thread's lowest key
    del ts, base
    # depth = slices before i on its thread (S) - those of them that ended by its start (E)
    depth = np.arange(n, dtype=idx)
    depth -= first[tno]
    depth -= np.searchsorted(end, tkey, side="right")
    depth += np.searchsorted(end, starts)[tno]
    del end, new
    # zero-length slices at the same (thread, ts) sort last; those at or after i have not "ended" before it
    if zero.any():
        zkeys = tkey[zero]
        depth += np.searchsorted(zkeys, tkey, side="right") - np.searchsorted(zkeys, tkey, side="left")
        zpos = np.flatnonzero(zero)
        zfirst = np.ones(zpos.size, bool)
        zfirst[1:] = zkeys[1:] != zkeys[:-1]
        depth[zero] -= zpos - zpos[zfirst][np.cumsum(zfirst) - 1]
    del tkey, zero
    np.maximum(depth, 0, out=depth)
    # parent: the last earlier slice on the thread one level up (positions are in (thread, time) order, so the
    # last earlier slice one level up of any thread is on this thread when this thread has one)
    cand = np.full(n, -1, idx)
    up = np.zeros(n, bool)  # the common case: the previous slice is the parent (a first child)
    up[1:] = depth[:-1] == depth[1:] - 1  # (on another thread: refused below)
    cand[up] = np.flatnonzero(up) - 1
    rest = ~up & (depth > 0)
    del up
    if rest.any():  # the others: per level, a binary search among the slices one level up
        top = int(depth.max())
        by_level = np.argsort(depth.astype(np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.int64),
                              kind="stable")  # radix sort: positions grouped by depth, ascending in each level
        bounds = np.searchsorted(depth[by_level], np.arange(top + 2))
        for lv in range(1, top + 1):
            above, here = by_level[bounds[lv - 1]:bounds[lv]], by_level[bounds[lv]:bounds[lv + 1]]
            q = here[rest[here]]
            if q.size and above.size:
                j = np.searchsorted(above, q) - 1
                cand[q] = np.where(j >= 0, above[np.maximum(j, 0)], -1)
        del by_level
    del rest
    ok = cand >= 0
    ok[ok] = tno[cand[ok]] == tno[ok]
    del tno
    ids = host["i"].to_numpy()
    par_s = np.where(ok, ids[order[np.maximum(cand, 0)]], 0)
    del cand
    # back to the host's row order: sorted position p is row order[p]
    dep = np.empty(n, np.int32)
    dep[order] = depth
    del depth
    par = np.zeros(n, ids.dtype)
    okr = np.zeros(n, bool)
    par[order] = par_s
    okr[order] = ok
    del order
    cols = pl.DataFrame({"depth": dep, "parent": par, "_ok": okr}).select(
        "depth", parent=pl.when("_ok").then(pl.col("parent").cast(pl.UInt32)))
    return host.drop("depth", "parent", strict=False).hstack(cols)


def roots(host: pl.DataFrame) -> pl.Series:
    """Per row: True for a slice with no enclosing slice on its thread (`call_tree`'s depth 0), without building
    the tree: in the call tree's order, a slice is a root when no earlier slice on its thread ends after it
    starts (a running maximum of the ends)."""
    n = host.height
    if n == 0:
        return pl.Series("root", [], pl.Boolean)
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    order, gid = _order(host, host["pid"].to_numpy(), host["tid"].to_numpy(), ts, dur)
    g, ts = gid[order], ts[order]
    end = ts + dur[order]
    new = np.ones(n, bool)
    new[1:] = g[1:] != g[:-1]
    tno = np.cumsum(new) - 1
    lo = int(min(ts.min(), end.min()))
    span = int(max(ts.max(), end.max())) - lo + 1
    if (int(tno[-1]) + 1) * span >= 2**62:  # lifted keys would overflow: the tree says it
        return (call_tree(host)["depth"] == 0).rename("root")
    lift = tno * span - lo  # one running maximum over all threads: each thread's ends lifted above the earlier ones'
    prev = np.maximum.accumulate(end + lift)
    root = new.copy()
    root[1:] |= prev[:-1] - lift[1:] <= ts[1:]
    out = np.empty(n, bool)
    out[order] = root
    return pl.Series("root", out)


def ancestor_where(host: pl.DataFrame, rows: pl.DataFrame, cond: pl.Expr | np.ndarray, out: str,
                   include_self: bool = False) -> pl.DataFrame:
    """For each row id `i` in `rows`, the nearest ancestor (by `parent`) whose row satisfies `cond` (a row-wise
    expression: it is evaluated only on the rows the climbs pass through; or a boolean per `host` row).

    Pointer doubling over the tree (each node points at itself when it satisfies `cond`, else at its parent;
    log2(depth) vectorised passes), not a climb per event. Returns frame [i, out] for the rows that have one
    (a parent missing from `host`, or a row where `cond` is null, ends the climb)."""
    q = rows["i"]
    found = ancestor_ids(host, q, cond, include_self)
    hit = found >= 0
    return pl.DataFrame({"i": q.filter(pl.Series(hit)), out: pl.Series(found[hit]).cast(pl.UInt32)})


@dataclass(frozen=True, eq=False)
class TreePositions:
    """`host`'s row ids and parents as positions, for several `ancestor_ids` climbs over one frame (built once)."""

    ids: np.ndarray  # the row id of each position
    at: np.ndarray  # row id -> position in `host`; n (and `size`) = none
    par: np.ndarray  # each position's parent's position (n: none), and n for the sentinel n

    def pos(self, v: pl.Series) -> np.ndarray:
        size = self.at.size - 1
        return self.at[np.minimum(filled(v, size).to_numpy(), size)]


def tree_positions(host: pl.DataFrame, q_max: int = 0) -> TreePositions:
    """`TreePositions` of a non-empty `host` (ids up to `q_max` at least: a queried id beyond the frame's is none)."""
    n = host.height
    ids = host["i"].to_numpy()
    size = int(max(ids.max(), q_max)) + 1
    idx = np.int32 if size < 2**31 else np.int64
    at = np.full(size + 1, n, idx)
    at[ids] = np.arange(n, dtype=idx)
    tp = TreePositions(ids, at, np.empty(0, idx))
    return TreePositions(ids, at, np.append(tp.pos(host["parent"]), n))


def ancestor_ids(host: pl.DataFrame, q: pl.Series, cond: pl.Expr | np.ndarray, include_self: bool = False,
                 tree: TreePositions | None = None) -> np.ndarray:
    """`ancestor_where` as the ancestor's id per id of `q` (-1: none), in the order of `q`; `tree`: `host`'s
    `tree_positions`, given by a caller that climbs the same frame several times."""
    n = host.height
    if n == 0 or q.len() == 0:
        return np.full(q.len(), -1, np.int64)
    if tree is None or (q.max() or 0) >= tree.at.size - 1:
        tree = tree_positions(host, q.max() or 0)
    ids, par, idx = tree.ids, tree.par, tree.at.dtype
    start = tree.pos(q)
    if not include_self:
        start = par[start]
    ok = np.zeros(n + 1, bool)  # the sentinel n satisfies nothing
    stop = np.zeros(n + 1, bool)  # a row where `cond` is null ends the climb unanswered
    few = q.len() * 64 <= n  # a few climbs (syncs, say): along their own paths, not over the whole tree
    if isinstance(cond, np.ndarray):
        ok[:n] = cond
    else:
        cols = list(dict.fromkeys(cond.meta.root_names())) or ["i"]
        if not few:  # many climbs: they cover most of the tree anyway
            on = np.arange(n)
            val = pick(host, *cols).with_columns(cond.alias("_ok"))["_ok"]
        else:  # `cond` only on the rows the climbs pass through, the starts and their ancestors
            seen = np.zeros(n + 1, bool)
            f = np.unique(start)
            while f.size:
                f = f[~seen[f]]
                seen[f] = True
                f = np.unique(par[f])
            seen[n] = False
            on = np.flatnonzero(seen)
            val = pick(host, *cols)[on].with_columns(cond.alias("_ok"))["_ok"]
        ok[on] = filled(val, False).to_numpy()
        stop[on] = isnull(val).to_numpy()
    if few:  # one step up per level for the climbs still going: the first row satisfying `cond`, else n
        hit = np.full(start.size, n, idx)
        act, cur = np.arange(start.size), start
        for _ in range(n + 1):  # (a path is at most n rows long)
            if not act.size:
                break
            yes = ok[cur]
            hit[act[yes]] = cur[yes]
            go = ~yes & ~stop[cur] & (cur != n)
            act, cur = act[go], par[cur[go]]
        return np.where(ok[hit], ids[np.minimum(hit, n - 1)].astype(np.int64), -1)
    nxt = np.where(ok, np.arange(n + 1, dtype=idx), np.where(stop, n, par))
    while True:
        nn = nxt[nxt]
        if np.array_equal(nn, nxt):
            break
        nxt = nn
    hit = nxt[start]
    return np.where(ok[hit], ids[np.minimum(hit, n - 1)].astype(np.int64), -1)


def enclosing_op(host: pl.DataFrame, runtime_cats: list[str]) -> pl.DataFrame:
    """Add `op`: for runtime/driver calls, the innermost enclosing `cpu_op` (the op that launched)."""
    rt = host.lazy().filter(pl.col("cat").is_in(runtime_cats)).select("i").collect(**IN_MEMORY)
    got = ancestor_where(host, rt, pl.col("cat") == "cpu_op", "op")
    if host.height < 4096:  # (fewer polars calls)
        return host.join(got, on="i", how="left")
    # set beside `host` (as a left join on the unique `i` gives it), the wide frame not copied: the ops by row id
    # in numpy (one int column: cheaper than `rowid.locate` and a polars gather with null positions)
    ids, gi = host["i"].to_numpy(), got["i"].to_numpy()
    size = int(max(ids.max(initial=0), gi.max(initial=0))) + 1
    found = np.zeros(size, bool)
    found[gi] = True
    val = np.zeros(size, np.uint32)
    val[gi] = got["op"].to_numpy()
    op = pl.Series("op", val[ids])
    hit = found[ids]
    return host.drop("op", strict=False).with_columns(op if hit.all() else op.set(pl.Series(~hit), None))
