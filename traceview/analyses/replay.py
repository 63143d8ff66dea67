"""The replay simulator: the trace's dependency graph (replay_graph) replayed as a max-plus longest path, the
transformations that predictions apply to it (`Transform`), and the step periods it gives.

A `Transform` is written on the trace's own rows (gpu and host `i`), never on the graph, so that a rule can
declare its fix next to its detection:

    t = Transform("host-sync", no_wait=sync_ids)              # the host no longer waits in these calls
    t = Transform("fused", gpu_dur={first: fused_ns, **{k: 0 for k in rest}})
    t = Transform("dataloader", host_removed=loader_span_ids)  # host spans off the critical path
    periods = replay(trace, steps, [profiler_cost(trace), t])  # per-step replayed periods (ns)
    saved = overhead.saving(trace, steps, t)                            # per step, in unprofiled terms

Several transforms given together are applied together (a row named twice takes the smaller duration; host
reductions add up but never take a gap or call below zero): savings are never summed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace

import numpy as np
import polars as pl

from ..frames import filled, isnull, members
from ..memo import once_in, per_trace, per_windows
from ..model import Trace
from ..records import record
from .memory import DRIVER_WORK_RE
from .replay_graph import KINDS, Graph, _narrow, build

try:  # the compiled kernel (setup.py); the pure-Python loop below is its reference
    from ._replay import longest as _longest_c
except ImportError:  # pragma: no cover - without a compiler
    _longest_c = None
try:  # the same longest path over the graph's own arrays (no edge list; an older build lacks it)
    from ._replay import pull as _pull_c
except ImportError:  # pragma: no cover - without a compiler, or a kernel built before it
    _pull_c = None
try:  # the index widths `pull` reads (a kernel built before int32 indices reads int64 only)
    from ._replay import INDEX_WIDTHS as _PULL_WIDTHS
except ImportError:  # pragma: no cover
    _PULL_WIDTHS = (8,)
try:  # the offset widths `pull` reads, array by array (a kernel built before int32 offsets reads int64 only)
    from ._replay import OFFSET_WIDTHS as _OFFSET_WIDTHS
except ImportError:  # pragma: no cover
    _OFFSET_WIDTHS = (8,)
try:  # `pull` reads an array of one value (a stride-0 view) as that value (a kernel built before reads every row)
    from ._replay import CONSTANTS as _PULL_CONSTANTS
except ImportError:  # pragma: no cover
    _PULL_CONSTANTS = 0

NEG = np.iinfo(np.int64).min
#: rows (or slots) per block of a replay's sums over every recorded row: a block's temporaries, not every row's
BLOCK = 1 << 20
#: the longest host interval a Transform's host_share scales whole (see simulate)
HOST_SHARE_MAX_NS = 1_000_000


@record(frozen=True)
class Transform:
    """A change to the trace, on its own rows.

    - gpu_dur: gpu row `i` -> new duration (ns), never above the activity's own (transforms compose by the
      minimum: a longer value is clipped); 0 removes the activity's time (a fused chain: its longest kernel gets
      the fused time, the others 0);
    - gpu_gap: gpu row `i` -> new gap (ns) between the activity before it on its stream and it (a batch of k calls
      in one: k times fewer kernels, so k times fewer gaps, a CUDA graph's node-to-node latency among them);
    - gpu_add: gpu row `i` -> ns of device work the fix adds on its stream with it (autocast's cast kernels, each
      run beside the GEMM whose input it casts): added to the activity's duration after gpu_dur's minimum, and
      summed over transforms (each fix's own work);
    - host_cut: host row `i` -> ns taken off the host time around it (its self time made shorter);
    - host_removed: host rows whose whole duration leaves the host path (DataLoader time off the critical path): a
      sequence of ids or an int64 array (a fix that removes millions of rows: no Python int per row);
    - no_wait: host rows of blocking calls that no longer wait for the device (they keep their floor time);
    - cost_us: µs taken off every recorded host row of a kind ("op", "runtime", "python"): the profiler's cost;
    - host_share: the share of all host time (every gap between calls, every call's own time) taken off once
      cost_us is (the other cuts come off after it): a slowdown of the whole host thread (the profiler's: its
      callbacks on every op and call); an interval is scaled only up to HOST_SHARE_MAX_NS of it;
    - long_share: the share taken off the part of each host interval beyond HOST_SHARE_MAX_NS (work of its own,
      which host_share leaves whole): only where a measurement says the profiler slowed that work too
      (`overhead.measured_transform`: a recompiling step's Dynamo/Inductor compilation).
    - long_cost_us: µs taken off every recorded host row of a kind that starts more than HOST_SHARE_MAX_NS into
      its host interval (the part host_share leaves whole): the profiler's recording of each op inside work of
      its own (a CPU-only step, whose ops are its work; a long stretch of CPU work in a GPU step);
    - host_spans: (tid, ts, end) spans whose host time leaves the host path, whatever rows or calls it holds (a
      DataLoader's `__next__`, a compilation); the profiler's cost of the rows inside is not taken twice."""

    name: str
    gpu_dur: Mapping[int, int] = field(default_factory=dict)
    gpu_gap: Mapping[int, int] = field(default_factory=dict)
    gpu_add: Mapping[int, int] = field(default_factory=dict)
    host_cut: Mapping[int, int] = field(default_factory=dict)
    host_removed: Sequence[int] = ()
    no_wait: Sequence[int] = ()
    cost_us: Mapping[str, float] = field(default_factory=dict)
    host_share: float = 0.0
    long_share: float = 0.0
    long_cost_us: Mapping[str, float] = field(default_factory=dict)
    host_spans: Sequence[tuple[int, int, int]] = ()
    bound_us: float | None = None  # the most the fix saves per step (fixes.per_step_us), None: the replay's saving
    #: a pace from outside the graph (ns per step): the mean replayed period is at least this, unless a transform
    #: given with it is `input_ready` (the DataLoader's worker processes: fixes.input_floor_ns); an `input_ready`
    #: transform's own floor is the pace of the workers its fix gives (rules/loader_workers.py: the free cores)
    floor_ns: float | None = None
    #: the fix keeps batches ready: the workers' pace (`floor_ns`) no longer holds the step, nor do the arrivals of
    #: the batches the traced loop waited for (`replay_graph.Graph.a_arrive`)
    input_ready: bool = False
    #: the fix takes away a drain the problem's host makes in every step (a host-bound stretch the device waits for: the
    #: single-tensor optimizer's update loop): where the fixed loop's host then runs ahead of its device, its mean is
    #: the device's own pace, not the replayed window's start-up from the problem's drained device (`fixes.led_mean`)
    leads: bool = False


def span_coverage(spans: np.ndarray, tids: np.ndarray):
    """(tid, t) -> host time of the merged `spans` [(tid, ts, end)] before t on that thread, as a function of
    arrays (a prefix sum over the spans, searched: no per-event loop)."""
    codes = np.unique(np.concatenate([spans[:, 0], tids]))
    base = int(spans[:, 1].min())

    def key(tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.searchsorted(codes, tid).astype(np.int64) * (1 << 42) + (np.asarray(t, np.int64) - base).clip(0)

    s, e = key(spans[:, 0], spans[:, 1]), key(spans[:, 0], spans[:, 2])
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    # merge: a span starting before the running end joins it
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > e[:-1]
    grp = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(ms.size, np.int64)
    np.maximum.at(me, grp, e)
    cum = np.concatenate([[0], np.cumsum(me - ms)[:-1]])

    def covered(tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        k = key(tid, t)
        j = np.searchsorted(ms, k, side="right") - 1
        jj = np.maximum(j, 0)
        return np.where(j >= 0, cum[jj] + np.clip(k - ms[jj], 0, me[jj] - ms[jj]), 0)

    return covered


def spans(df: pl.DataFrame) -> list[tuple[int, int, int]]:
    """`Transform.host_spans` from a frame [tid, ts, end] (rows without a thread or an extent left out)."""
    d = df.select(pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64), pl.col("end").cast(pl.Int64)).drop_nulls()
    return [tuple(r) for r in d.filter(pl.col("end") > pl.col("ts")).rows()]


def longest(base: np.ndarray, src: np.ndarray, dst: np.ndarray, off: np.ndarray) -> np.ndarray:
    """out[v] = max(base[v], max over edges (src -> v) of out[src] + off), in topological order."""
    out = np.empty(base.size, np.int64)
    if _longest_c is not None:
        reached = _longest_c(base, src, dst, off, out)
    else:
        reached = _longest_py(base, src, dst, off, out)
    if reached != base.size:
        raise ValueError(f"replay graph has a cycle ({base.size - reached} events unreached)")
    return out


def _longest_py(base, src, dst, off, out) -> int:
    """The kernel in Python (a per-event loop: only without the compiled kernel)."""
    n = base.size
    order = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[order], np.arange(n + 1))
    indeg = np.bincount(dst, minlength=n)
    out[:] = base
    queue = list(np.flatnonzero(indeg == 0))
    head = 0
    while head < len(queue):
        v = queue[head]
        head += 1
        for e in order[starts[v]:starts[v + 1]]:
            w = dst[e]
            if out[v] != NEG and out[v] + off[e] > out[w]:
                out[w] = out[v] + off[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    return len(queue)


def _unique(x: np.ndarray) -> np.ndarray:
    """np.unique of integers by a sort (numpy's hash unique takes seconds on a million ids)."""
    x = x.ravel()
    if x.size < 2 or bool((x[1:] > x[:-1]).all()):  # (unique and in order already: a fix's own array, no copy)
        return x
    x = np.sort(x)
    return x[np.concatenate([[True], x[1:] != x[:-1]])]


def activity_positions(d_i: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Activity positions of gpu row ids (-1 where the graph has none)."""
    o = np.argsort(d_i, kind="stable")
    return _positions_in(o, d_i[o], ids)


def _positions_in(o: np.ndarray, so: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions of `ids` in an array whose stable order is `o` (None: the array is in order) and sorted values
    `so` (-1 where absent)."""
    p = np.searchsorted(so, ids)
    pc = np.minimum(p, max(so.size - 1, 0))
    ok = (p < so.size) & (so[pc] == ids) if so.size else np.zeros(ids.size, bool)
    return np.where(ok, (pc if o is None else o[pc].astype(np.int64)) if so.size else -1, -1)


def _flat(g: Graph, p: np.ndarray | slice = slice(None)) -> np.ndarray:
    """The cuts' slot of the recorded rows at positions `p`: (gap | join | own) * n_a + anchor."""
    rows = g.seg_rows
    return rows.where[p].astype(np.int64) * g.a_ts.size + rows.seg[p]


@per_trace
def _kind_count(g: Graph, k: int) -> np.ndarray:
    """The recorded rows of kind `k` (a position in KINDS) per cuts slot (3 * n_a; the narrowest unsigned type that
    holds the largest count: a byte a slot where no slot holds 256 rows): once per graph and kind, for every replay
    that takes a cost per row of that kind off."""
    n = np.bincount(_flat(g)[g.seg_rows.kind == k], minlength=3 * g.a_ts.size)
    top = int(n.max()) if n.size else 0
    return n.astype(next(t for t in (np.uint8, np.uint16, np.uint32, np.int64) if top <= np.iinfo(t).max))


@per_trace
def _parts(g: Graph) -> dict:
    """(field, id of a transform's mapping or sequence) -> (that object, its length, what `_cuts` reads of it on
    this graph): a transform's rows are searched once, however many replays it is given to (each rule's fix is
    replayed alone, with the profiler's cost removed, in the projection and the marginal savings). The object
    is held, so its id is not reused while the entry lives."""
    return {}


def _part(g: Graph, field_: str, objs: tuple, make):
    """The cached `make(*objs)` of transforms' field (a mapping or sequence of each) on graph `g` (`_parts`)."""
    parts = _parts(g)
    key = (field_, tuple(id(o) for o in objs))
    hit = parts.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], objs, strict=True)) or hit[1] != [len(o) for o in objs]:
        hit = parts[key] = (objs, [len(o) for o in objs], make(*objs))
    return hit[2]


def _cuts(g: Graph, transforms: Sequence[Transform]) -> tuple[np.ndarray, ...]:
    """(gap cut, join cut, own cut per anchor, new duration per activity, wait kept per anchor, device gap before
    each activity, the profiler's cost per recorded row per cuts slot) of the transforms together. The cost per row
    (`cost_us`) is kept apart: it is time the unprofiled host never spends, taken off before the host shares scale
    what is left (`edges`)."""
    n_a = g.a_ts.size
    rows = g.seg_rows
    cuts = np.zeros(3 * n_a, np.float64)
    pre = np.zeros(3 * n_a, np.float64)
    dur = (g.d_end - g.d_ts).astype(np.int64)
    d_gap = g.d_gap
    keep_wait = g.a_wait >= 0
    sp = [s for t in transforms for s in t.host_spans]
    in_span = None  # rows inside a removed span (none without spans)
    if sp and n_a:
        covered = span_coverage(np.asarray(sp, np.int64).reshape(-1, 3), g.a_tid)
        # a joined anchor's gap runs from the previous call's end to the handoff; the rest, up to its start, is
        # the join edge's time (`replay_graph._joins`)
        joined = (g.a_join >= 0) & (g.a_prev >= 0) & ~g.a_overlap
        prev_end = np.where(joined, g.a_end[np.maximum(g.a_prev, 0)], g.a_ts - g.a_gap)
        gap_to = np.where(joined, prev_end + g.a_gap, g.a_ts)
        cuts[:n_a] += covered(g.a_tid, gap_to) - covered(g.a_tid, prev_end)
        join_from = np.maximum(g.a_end[np.maximum(g.a_join, 0)], gap_to)
        cuts[n_a:2 * n_a] += np.where(joined, covered(g.a_tid, g.a_ts) - covered(g.a_tid, np.minimum(join_from, g.a_ts)), 0)
        cuts[2 * n_a:] += covered(g.a_tid, g.a_ts + g.a_own) - covered(g.a_tid, g.a_ts)
        if rows.i.size:
            rt = g.a_tid[rows.seg]
            rts = rows.ts
            in_span = covered(rt, rts + 1) > covered(rt, rts)
            del rts
    for t in transforms:
        if t.cost_us:
            per_kind = np.array([float(t.cost_us.get(k, 0.0)) * 1000 for k in KINDS])
            if in_span is None and all(float(c).is_integer() for c in per_kind):
                # whole ns per row: the rows counted per slot give the same sums as adding row by row (exact
                # integers in float64), without a pass over every row
                # (block by block: each slot's sum is the same, with a block's temporaries instead of two arrays of
                # every slot)
                counts = [(_kind_count(g, k), per_kind[k]) for k in np.flatnonzero(per_kind).tolist()]
                for b in range(0, pre.size, BLOCK):
                    got = np.zeros(min(BLOCK, pre.size - b), np.float64)
                    for kc, c in counts:
                        got += kc[b:b + BLOCK] * c
                    pre[b:b + BLOCK] += got
                del counts
            else:
                # (an anchor's own runtime row is among its rows: `inside` its own time); rows in a removed span: once
                _slot_sums(g, lambda p, c=per_kind: c[rows.kind[p]] if in_span is None
                           else np.where(in_span[p], 0.0, c[rows.kind[p]]), pre)
        if t.long_cost_us:
            # (rows beyond the share's HOST_SHARE_MAX_NS: the share does not scale them, so the order is moot)
            per_kind = np.array([float(t.long_cost_us.get(k, 0.0)) * 1000 for k in KINDS])
            _slot_sums(g, lambda p, c=per_kind: c[rows.kind[p]], cuts, _beyond(g), in_span)
        if t.host_cut:
            _add(cuts, *_part(g, "host_cut", (t.host_cut,), lambda m: _host_cut(g, m)))
        if t.gpu_dur:
            k, new = _part(g, "gpu_dur", (t.gpu_dur,), lambda m: _by_activity(g, m))
            np.minimum.at(dur, k, new)
        if t.gpu_gap:
            k, new = _part(g, "gpu_gap", (t.gpu_gap,), lambda m: _by_activity(g, m))
            d_gap = d_gap.astype(np.int64) if d_gap is g.d_gap else d_gap  # (a copy, int64 whatever the graph's width)
            np.minimum.at(d_gap, k, new)
        if len(t.no_wait):
            keep_wait &= _part(g, "no_wait", (t.no_wait,),
                               lambda ids: ~np.isin(g.a_i, np.asarray(list(ids), np.int64)) | g.a_marker)
    # device work a fix adds (after every transform's minimum: a shortened kernel keeps the work added beside it)
    for t in transforms:
        if t.gpu_add:
            k, add = _part(g, "gpu_add", (t.gpu_add,), lambda m: _by_activity(g, m))
            np.add.at(dur, k, add)
    # a row that several fixes take off the host path (decode-loop's CUDA graph is launch-bound's) leaves it once
    removed = tuple(t.host_removed for t in transforms if len(t.host_removed))
    if removed:
        _add(cuts, *_part(g, "host_removed", removed, lambda *rs: _removed(g, rs)))
    return cuts[:n_a], cuts[n_a:2 * n_a], cuts[2 * n_a:], _narrow(dur), keep_wait, d_gap, pre


@per_trace
def _driver_work(g: Graph) -> np.ndarray:
    """Whether each anchor is a driver memory call (`memory.DRIVER_WORK_RE`: cudaMalloc/cudaFree, the `cuMem*` of
    expandable segments; not the stream-ordered allocator's few-µs calls). Its own time is the driver's work (page
    tables, the device's implicit synchronisation), which the profiler's callbacks around the call do not stretch
    (measured: a cudaFree 1.0x traced, a cache-missing malloc 1.2x, dispatch 1.3x), so the host share leaves it
    whole. Scaled like dispatch, `torch.cuda.empty_cache()` in a host-bound loop was priced at half its measured
    saving (ResNet-50 on two GPUs, HF GPT-2: docs/replay.md)."""
    names = g.a_name.unique().cast(pl.String)
    hit = names.filter(names.str.contains(DRIVER_WORK_RE)).to_list()
    return g.a_name.is_in(hit).fill_null(False).to_numpy() if hit else np.zeros(g.a_ts.size, bool)


@per_trace
def _beyond(g: Graph) -> np.ndarray:
    """Whether each recorded row (`Graph.seg_rows`) starts more than HOST_SHARE_MAX_NS into its host interval:
    the gap before its anchor from the previous call's end (its start where the calls overlap), the joined
    part of a gap from the other thread's call, or the call's own time."""
    rows = g.seg_rows
    if rows.i.size == 0:
        return np.zeros(0, bool)
    prev = np.maximum(g.a_prev, 0)
    gap_from = np.where(g.a_prev >= 0, np.where(g.a_overlap, g.a_ts[prev], g.a_end[prev]), g.a_ts - g.a_gap)
    del prev
    # a block of rows at a time (each row's start and its interval's: int64 arrays of a block, not of every row)
    out = np.empty(rows.i.size, bool)
    for b in range(0, rows.i.size, BLOCK):
        p = slice(b, b + BLOCK)
        a, where = rows.seg[p], rows.where[p]
        at = g.a_ts[a]
        start = np.where(where == 2, at, np.where(where == 1, at - g.a_jwake[a], gap_from[a]))
        out[p] = (at + rows.rel[p] - start) > HOST_SHARE_MAX_NS  # (a row's start: its anchor's plus `rel`)
    return out


def _slot_sums(g: Graph, weights: Callable[[slice | np.ndarray], np.ndarray], into: np.ndarray,
               sel: np.ndarray | None = None, unless: np.ndarray | None = None) -> None:
    """into += per cuts slot, the sum of `weights(rows)` over the recorded rows, as `np.bincount(_flat(g),
    weights=...)` sums them (row by row, in the rows' order, from 0: the same float64 sums), a block of rows at a
    time: no slot array or weight array of every row. Where `into` is all zeros the rows are added into it directly
    (0 + a sum is that sum: no array of every slot more). `sel` (and not `unless`): only those rows are added, the
    others weigh 0.0 (a few: the rows beyond the host share's limit are ~3 % of the 132 MB trace's); adding 0.0
    changes no sum (none is -0.0: they start at +0.0)."""
    if into.any():
        out = np.zeros(into.size, np.float64)
        _slot_sums(g, weights, out, sel, unless)
        into += out
        return
    for b in range(0, g.seg_rows.i.size, BLOCK):
        p = slice(b, b + BLOCK)
        if sel is not None:
            p = np.flatnonzero(sel[p] if unless is None else sel[p] & ~unless[p]) + b
        np.add.at(into, _flat(g, p), np.asarray(weights(p), np.float64))


def _add(cuts: np.ndarray, slots: np.ndarray, ns: np.ndarray) -> None:
    """cuts[slots] += ns, row by row in the rows' order, block by block (a block's values as float64: no float copy
    of every row's, nor a sum array of every slot as `np.bincount` makes; float64 adds are `np.add.at`'s fast
    path)."""
    for b in range(0, slots.size, BLOCK):
        np.add.at(cuts, slots[b:b + BLOCK], np.asarray(ns[b:b + BLOCK], np.float64))


def _removed(g: Graph, removed: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(slots, ns) of the host rows that transforms' `host_removed` take off the host path, each row once."""
    rows = g.seg_rows
    ids = [_part(g, "ids", (r,), lambda x: _unique(_ids(x))) for r in removed]  # (each fix's, once)
    ids = ids[0] if len(ids) == 1 else _unique(np.concatenate(ids))
    # (kept per graph while the fixes replay: slots as int32 while 3 * n_a fits, durations in the rows' own integer
    # width; `_add` sums them as float64, exactly: whole ns). A block of ids at a time, in their order: the search's
    # and the slots' int64 temporaries are a block's (a launch-bound fix removes nearly every host row)
    narrow = 3 * g.a_ts.size < 2**31
    slots, ns = [], []
    for b in range(0, max(ids.size, 1), BLOCK):
        p = rows.positions(ids[b:b + BLOCK])
        s = _flat(g, p)
        slots.append(s.astype(np.int32) if narrow else s)
        ns.append(rows.dur[p])
        del p, s
    return (slots[0], ns[0]) if len(slots) == 1 else (np.concatenate(slots), np.concatenate(ns))


def _ids(ids) -> np.ndarray:
    """Row ids of a transform's sequence (an array, or any iterable of ints) as int64."""
    return np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), np.int64)


def _host_cut(g: Graph, cut: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(slots, ns) of a transform's `host_cut`, in the order of the rows found."""
    rows = g.seg_rows
    p = rows.positions(np.fromiter(cut.keys(), np.int64))
    v = np.fromiter(cut.values(), np.float64)
    got = dict(zip(cut.keys(), v, strict=True))
    ns = np.array([got[int(i)] for i in rows.i[p]], np.float64)
    return _flat(g, p), ns


def _by_activity(g: Graph, new: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(activity positions, new values clipped at 0) of a transform's gpu row -> ns mapping (rows the graph does
    not hold left out)."""
    o, so = _sorted(g, "d_i")
    k = _positions_in(o, so, np.fromiter(new.keys(), np.int64))
    v = np.fromiter(new.values(), np.int64)
    return k[k >= 0], np.maximum(v[k >= 0], 0)


def simulate(g: Graph, transforms: Sequence[Transform] = (),
             own_cap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Replayed (anchor start, anchor end, activity start, activity end), ns on the trace's clock. `own_cap`: the
    most each anchor's own time may be after the transforms (`_host_pace`)."""
    got = edges(g, transforms, pull=True, own_cap=own_cap)
    return split(g, got if isinstance(got, np.ndarray) else longest(*got))


def split(g: Graph, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The graph's event times `t` as (anchor start, anchor end, activity start, activity end)."""
    n_a = g.a_ts.size
    return t[0:2 * n_a:2], t[1:2 * n_a:2], t[2 * n_a::2], t[2 * n_a + 1::2]


def edges(
    g: Graph, transforms: Sequence[Transform] = (), pull: bool = False, own_cap: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | np.ndarray:
    """(base, src, dst, off) of the graph's events with `transforms` applied: `longest`'s input (the job replay
    joins several ranks' arrays). With `pull`, the compiled kernel replays the graph from its own arrays when it
    can (no edge list: a third of the memory) and the event times come back instead."""
    n_a, n_d = g.a_ts.size, g.d_ts.size
    if any(t.input_ready for t in transforms):
        g = _unjoined_arrivals(g)
    gap_cut, join_cut, own_cut, dur, keep_wait, d_gap, pre = _cuts(g, transforms)
    # an activity a transform removes (a kernel fused into another) no longer pays the device's gap before it: the
    # stream's per-activity overhead between queued kernels goes with the kernel, not only its duration
    d_gap = np.where((dur == 0) & (g.d_end > g.d_ts), 0, d_gap)  # (the graph's width: `pull` reads int32 or int64)
    # host time kept by the transforms' host shares together (a blocking call's wait edge still holds it)
    keep = float(np.prod([1.0 - min(max(t.host_share, 0.0), 1.0) for t in transforms])) if transforms else 1.0
    keep_long = float(np.prod([1.0 - min(max(t.long_share, 0.0), 1.0) for t in transforms])) if transforms else 1.0
    # (an interval longer than HOST_SHARE_MAX_NS holds work of its own, a CPU kernel, a sleep, input loading, that
    # the slowdown does not scale: only its first HOST_SHARE_MAX_NS are; the rest only by a long_share)
    # the profiler's cost per recorded row first (time the unprofiled host never spends, so no share of it is
    # taken again: a `with_stack` step's Python events), a call's cost beyond its own time off the gap before it;
    # the shares then scale what is left
    # (the graph holds them as int32 while every value fits: each step below yields int64, from an int64 operand)
    a_own, a_gap, a_jwake = g.a_own, g.a_gap, g.a_jwake
    if pre.any():
        p_gap, p_join, p_own = pre[:n_a], pre[n_a:2 * n_a], pre[2 * n_a:]
        p_over = np.maximum(p_own - a_own, 0)
        a_own = np.maximum(a_own - np.round(p_own).astype(np.int64), 0)
        a_gap = np.maximum(a_gap - np.round(p_gap + p_over).astype(np.int64), 0)
        a_jwake = np.maximum(a_jwake - np.round(p_join).astype(np.int64), 0)
        del p_gap, p_join, p_own, p_over
    del pre
    if keep != 1.0 or keep_long != 1.0:
        own_in = a_own
        a_own, a_gap, a_jwake = (
            x - np.round(np.minimum(x, HOST_SHARE_MAX_NS) * (1 - keep)
                         + np.maximum(x - HOST_SHARE_MAX_NS, 0) * (1 - keep_long)).astype(np.int64)
            for x in (y.astype(np.int64, copy=False) for y in (a_own, a_gap, a_jwake)))
        driver = _driver_work(g)
        if driver.any():  # (the driver's own work: no share of it is the profiler's)
            a_own = np.where(driver, own_in, a_own)
        del own_in, driver
    # a call's recorded cost beyond its own time was paid around it (the profiler's hooks): off the gap before it
    over = np.maximum(own_cut - a_own, 0)
    # (each as int32 where its values fit, as the graph's: the kernel reads either width, and these three live
    # through the kernel's run beside the event times and its stack)
    own = np.maximum(a_own - np.round(own_cut).astype(np.int64), 0)
    own = _narrow(own if own_cap is None else np.minimum(own, own_cap))
    gap = _narrow(np.maximum(a_gap - np.round(gap_cut + over).astype(np.int64), 0))
    jwake = _narrow(np.maximum(a_jwake - np.round(join_cut).astype(np.int64), 0))
    del gap_cut, join_cut, own_cut, over, a_own, a_gap, a_jwake
    def initial() -> np.ndarray:  # each event's own earliest time (NEG: none)
        base = np.full(2 * (n_a + n_d), NEG, np.int64)
        first = np.flatnonzero((g.a_prev < 0) & (g.a_join < 0))  # (a thread's first call joined to another follows it)
        base[2 * first] = g.a_ts[first]
        if g.a_arrive is not None and not any(t.input_ready for t in transforms):
            # a batch the DataLoader's workers delivered while the thread waited arrives when it did: the anchor
            # after the wait starts no earlier than that, plus the host time from the arrival to it (scaled as host
            # time)
            pin = np.flatnonzero(g.a_arrive != NEG)
            after = g.a_ts[pin] - g.a_arrive[pin]
            after = after - np.round(np.minimum(after, HOST_SHARE_MAX_NS) * (1 - keep)
                                     + np.maximum(after - HOST_SHARE_MAX_NS, 0) * (1 - keep_long)).astype(np.int64)
            base[2 * pin] = np.maximum(base[2 * pin], g.a_arrive[pin] + after)
        unlaunched = np.flatnonzero(g.d_launch < 0)
        base[2 * n_a + 2 * unlaunched] = g.d_ts[unlaunched]  # work the trace does not say who launched starts when it did
        return base

    base = initial()
    if pull and _pull_c is not None:  # the compiled kernel reads the graph's arrays: no edge list
        # the graph's index arrays as they are (int32 while its events fit) where the kernel reads their width
        ix = (g.a_join, g.a_prev, g.a_wait, g.d_prev, g.d_launch, g.d_x)
        w = {x.dtype.itemsize for x in ix}
        it = next(iter(w)) if len(w) == 1 and next(iter(w)) in _PULL_WIDTHS else 8
        consts = 0

        def arg(i: int, x: np.ndarray, dtype) -> np.ndarray:  # argument i of the kernel: one value when x is a view of one
            nonlocal consts
            if _PULL_CONSTANTS and x.ndim == 1 and x.size > 1 and x.strides[0] == 0:
                consts |= 1 << i
                x = x[:1]
            return np.ascontiguousarray(x, dtype)

        aj, ap, aw, dp, dl, dx = (arg(i, x, np.int32 if it == 4 else np.int64)
                                  for i, x in zip((1, 2, 5, 6, 7, 8), ix, strict=True))
        # the offsets as they are where the kernel reads their width (the graph's int32 ones: no widened copy)
        off = [arg(9 + i, x, x.dtype if x.dtype in (np.int32, np.int64) and x.dtype.itemsize in _OFFSET_WIDTHS
                   else np.int64)
               for i, x in enumerate((jwake, gap, own, g.a_wake, d_gap, g.d_lat, g.d_xgap, dur))]
        # (the kernel counts the anchors by a_overlap's bytes, or keep_wait's when a_overlap is one value)
        kw = arg(4, keep_wait, np.uint8)
        flags = (np.ascontiguousarray(g.a_overlap, np.uint8) if consts & (1 << 4) else arg(3, g.a_overlap, np.uint8), kw)
        # the times are written over `base`: the kernel reads an event's base once, just before it writes the event's
        # time, and reads only the times of events already done (one array of every event less at a replay's peak)
        if _pull_c(base, aj, ap, *flags, aw, dp, dl, dx, *off, base, *((consts,) if consts else ())) == 0:
            return base
        del ix, aj, ap, aw, dp, dl, dx, off  # a cycle: the edge list's kernel below says so (on the base values,
        # which the kernel overwrote)
        base = initial()
    # the edges (src, dst, offset), kind by kind: each kind's arrays are written into the edge arrays and freed
    # before the next (no list of parts beside the whole: at 2 M events ~100 MB less at the peak)
    A = 2 * n_a  # noqa: N806 - anchor S(j) = 2j, E(j) = 2j + 1; activity S(k) = A + 2k, E(k) = A + 2k + 1
    kinds = [  # (rows of the kind, src, dst, offset) as functions of the rows' positions
        (g.a_join >= 0, lambda j: 2 * g.a_join[j] + 1, lambda j: 2 * j, lambda j: jwake[j]),
        (g.a_prev >= 0, lambda j: 2 * g.a_prev[j] + 1 - g.a_overlap[j], lambda j: 2 * j, lambda j: gap[j]),
        (n_a, lambda j: 2 * j, lambda j: 2 * j + 1, lambda j: own[j]),
        (keep_wait, lambda j: A + 2 * g.a_wait[j] + 1, lambda j: 2 * j + 1, lambda j: g.a_wake[j]),
        (g.d_prev >= 0, lambda k: A + 2 * g.d_prev[k] + 1, lambda k: A + 2 * k, lambda k: d_gap[k]),
        (g.d_launch >= 0, lambda k: 2 * g.d_launch[k], lambda k: A + 2 * k, lambda k: g.d_lat[k]),
        (g.d_x >= 0, lambda k: A + 2 * g.d_x[k] + 1, lambda k: A + 2 * k, lambda k: g.d_xgap[k]),
        (n_d, lambda k: A + 2 * k, lambda k: A + 2 * k + 1, lambda k: dur[k]),
    ]
    m = sum(sel if isinstance(sel, int) else int(np.count_nonzero(sel)) for sel, *_ in kinds)
    src, dst, off = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64)
    at = 0
    for sel, fs, fd, fo in kinds:
        r = np.arange(sel) if isinstance(sel, int) else np.flatnonzero(sel)
        src[at:at + r.size], dst[at:at + r.size], off[at:at + r.size] = fs(r), fd(r), fo(r)
        at += r.size
    del kinds, r
    return base, src, dst, off


def _unjoined_arrivals(g: Graph) -> Graph:
    """`g` with no join into an anchor that a DataLoader batch's arrival holds (`Graph.a_arrive`): each such anchor
    follows its own thread's previous call by the whole gap, as an anchor no other thread handed work to. The
    thread that handed it over while the loop waited is the input pipeline's (the pin-memory thread, which pins
    each batch as the workers deliver it and records a runtime call or two when it does): with batches ready
    (`Transform.input_ready`) that hand-off holds the loop no more than the arrival it follows."""
    if g.a_arrive is None:
        return g
    cut = np.flatnonzero((g.a_arrive != NEG) & (g.a_join >= 0) & (g.a_prev >= 0))
    if cut.size == 0:
        return g
    join, gap, jwake = g.a_join.copy(), g.a_gap.astype(np.int64), g.a_jwake.copy()
    prev = g.a_prev[cut]
    join[cut], jwake[cut] = -1, 0
    gap[cut] = g.a_ts[cut] - np.where(g.a_overlap[cut], g.a_ts[prev], g.a_end[prev])
    return replace(g, a_join=join, a_gap=gap, a_jwake=jwake)


def _first_equal(a: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(whether `a` holds each value of `t`, the first position of it in `a`; 0 where absent), None for an empty
    `a`: for the few values of the steps' boundaries, one hash lookup over `a` (no sorted copy of a whole-trace
    array kept for them)."""
    if a.size == 0:
        return np.zeros(t.size, bool), None
    pos = np.flatnonzero(pl.Series(a).is_in(members(pl.Series(np.asarray(t, a.dtype)))).to_numpy())
    vals, first = np.unique(a[pos], return_index=True)  # (positions ascend: each value's first)
    if vals.size == 0:
        return np.zeros(t.size, bool), np.zeros(t.size, np.int64)
    p = np.minimum(np.searchsorted(vals, t), vals.size - 1)
    ok = vals[p] == t
    return ok, np.where(ok, pos[first[p]], 0)


@per_trace
def _sorted(g: Graph, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(stable order of the graph's array `name`, the array in that order): once per graph, for every replay;
    (None, the array) when it is in order already (a single stream's activities: no order and no sorted copy kept)."""
    a = getattr(g, name)
    if a.size < 2 or bool((a[1:] >= a[:-1]).all()):
        return None, a
    o = np.argsort(a, kind="stable")
    return o.astype(np.int32) if a.size < 2**31 else o, a[o]


@per_trace
def _marker_at(g: Graph, hi: tuple[int, ...], t: tuple[int, ...]) -> np.ndarray:
    """Anchor position of the step marker of host row `hi` at time `t`, per step (-1: none); once per graph and
    steps, for every replay."""
    mk = np.flatnonzero(g.a_marker)
    key = pl.DataFrame({"i": g.a_i[mk].astype(np.int64), "t": g.a_ts[mk], "_p": mk.astype(np.int64)})
    key = key.unique(["i", "t"], keep="first", maintain_order=True)  # (a zero-length marker: one row per step)
    got = pl.DataFrame({"i": np.asarray(hi, np.int64), "t": np.asarray(t, np.int64)}).join(
        key, on=["i", "t"], how="left", maintain_order="left")
    return filled(got["_p"], -1).to_numpy()


def _boundaries(g: Graph, steps: pl.DataFrame, times: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Replayed (start, end) of each step's period [ts, end), in the order of `steps` (loader._periods' rule
    applied to the replayed times of the events it was read from)."""
    return _apply_plan(_plan(g, _steps_key(steps)), times)


def _steps_key(steps: pl.DataFrame) -> tuple[tuple, ...]:
    """The values of the step columns a replay reads (`_STEP_COLS`), as a memo key."""
    return tuple(tuple(steps[c].to_list()) for c in _STEP_COLS)


@per_trace
def _plan(g: Graph, key: tuple[tuple, ...]) -> dict:
    """What `_boundaries` reads of the graph for these steps (their columns `_STEP_COLS`, `key`) before any
    replayed time: the events each step's boundaries were read from, found once per graph and steps, for every
    replay."""
    st = pl.DataFrame(dict(zip(_STEP_COLS, map(list, key), strict=True)), schema={c: pl.Int64 for c in _STEP_COLS})
    n = st.height
    ts, end = st["ts"].to_numpy().astype(np.int64), st["end"].to_numpy().astype(np.int64)

    def marker(col: str) -> np.ndarray:  # the anchor of the step's host marker (-1 without one)
        hi, t = filled(st["host_idx"].cast(pl.Int64), -1).to_numpy(), filled(st[col], -1).to_numpy()
        return _marker_at(g, tuple(hi.tolist()), tuple(t.tolist()))

    def activity(t: np.ndarray, col_ts: bool) -> tuple[bool, np.ndarray, np.ndarray | None]:
        # (by start, found, position) of the activity starting (ending) at t: the first one, by position
        ok, at = _first_equal(g.d_ts if col_ts else g.d_end, t)
        return col_ts, ok, at

    cpu_ts = filled(st["cpu_ts"], -1).to_numpy().astype(np.int64)
    has_g = ~isnull(st["gpu_ts"]).to_numpy()
    gts = np.where(has_g, filled(st["gpu_ts"], 0).to_numpy(), 0).astype(np.int64)
    order = np.argsort(ts, kind="stable")
    last = int(order[-1]) if n else 0
    plan = {"n": n, "ts": ts, "end": end, "cpu_ts": cpu_ts, "has_g": has_g, "gts": gts, "order": order,
            "last": last, "c": marker("cpu_ts"), "gg": activity(gts, True), "bb": activity(ts, False)}
    if n:
        plan["ce"] = marker("cpu_end")[last]
        cpu_end = st["cpu_end"][last]
        plan["cpu_end"] = None if cpu_end is None else np.asarray([int(cpu_end)])
        if cpu_end is not None and g.a_end.size:  # without a marker: t moved as the last call that ended by t
            t = int(plan["cpu_end"][0])
            by = g.a_end <= t
            j = np.asarray([np.count_nonzero(by) - 1])  # (what a search of the sorted ends gives: its sign is read)
            k = int(np.flatnonzero(g.a_end == g.a_end[by].max())[-1]) if j[0] >= 0 else 0  # the last of the latest
            del by
            plan["host"] = (j, np.asarray([k]), g.a_end[[k]])
        elif cpu_end is not None:
            plan["host"] = None
        gpu_end = st["gpu_end"][last]
        plan["ge"] = activity(np.asarray([int(gpu_end) if gpu_end is not None else -1]), False)
    return plan


def _apply_plan(plan: dict, times: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """`_boundaries` of a plan (`_plan`) and replayed event times."""
    a_s, a_e, d_s, d_e = times
    n, ts, end, cpu_ts, has_g, gts = (plan[k] for k in ("n", "ts", "end", "cpu_ts", "has_g", "gts"))

    def marker(p: np.ndarray) -> np.ndarray:  # replayed time of the step's host marker (NaN without one)
        if a_s.size == 0:  # no anchor at all: no marker either
            return np.full(p.size, np.nan)
        return np.where(p >= 0, a_s[np.maximum(p, 0)].astype(np.float64), np.nan)

    def activity(found) -> np.ndarray:  # replayed start (end) of the activity starting (ending) at t
        col_ts, ok, at = found
        rep = d_s if col_ts else d_e
        return np.where(ok, rep[at] if at is not None else 0, np.nan).astype(np.float64)

    c = marker(plan["c"])
    gg = np.where(has_g, activity(plan["gg"]), np.nan)
    bb = activity(plan["bb"])
    cc = np.where(np.isnan(c), ts.astype(np.float64), c + 0.0)
    start = np.where(has_g & (ts >= gts), gg, np.nan)
    from_c = np.isnan(start) & (ts == cpu_ts) & ~np.isnan(c)
    start = np.where(from_c, np.fmin(cc, gg), start)
    from_b = np.isnan(start) & ~np.isnan(bb)
    start = np.where(from_b, np.fmin(np.fmax(cc, bb), gg), start)
    rest = np.isnan(start)
    # the unseen-latency rule (a fixed time before the first activity), or a shift with the host marker
    start = np.where(rest & has_g & ~np.isnan(gg), gg - (gts - ts), start)
    start = np.where(np.isnan(start) & ~np.isnan(c), c + (ts - cpu_ts), start)
    start = np.where(np.isnan(start), ts, start)
    order, last = plan["order"], plan["last"]
    s_sorted = np.maximum.accumulate(start[order])
    start[order] = s_sorted
    ends = np.empty(n, np.float64)
    ends[order[:-1]] = s_sorted[1:]
    if n:
        ce = marker(np.asarray([plan["ce"]]))[0]
        if np.isnan(ce) and plan["cpu_end"] is not None:
            t = plan["cpu_end"]
            if plan["host"] is None:
                ce = t.astype(np.float64)[0]
            else:
                j, k, was = plan["host"]
                ce = np.where(j >= 0, t + (a_e[k] - was), t).astype(np.float64)[0]
        ge = activity(plan["ge"])[0]
        cands = [v for v in (ce, ge, start[last]) if not np.isnan(v)]
        ends[last] = max(cands) if (not np.isnan(ce) or not np.isnan(ge)) else start[last] + (end[last] - ts[last])
    return start, ends


def step_periods(g: Graph, steps: pl.DataFrame, times: tuple[np.ndarray, ...]) -> np.ndarray:
    """Replayed period (ns) of each step of `steps` from the graph's replayed event times (`split`)."""
    s, e = _boundaries(g, steps, times)
    return _per_step(steps, e - s)


def replay(trace: Trace, steps: pl.DataFrame, transforms: Sequence[Transform] = ()) -> np.ndarray:
    """Replayed period (ns) of each step of `steps` (a frame of the trace's step rows), with `transforms`
    applied together (a transform's `floor_ns` holds the mean period: `floored`)."""
    if steps.height == 0:
        return np.zeros(0)
    if not transforms:  # the fidelity and every saving replay it: once per (trace, steps)
        return _unmodified(trace, steps).copy()
    key = _parametric_key(transforms)
    if key is not None:  # the profiler-cost base of every saving: once per (trace, steps, parameters)
        return floored(_parametric(trace, _steps_key(steps), key).copy(), transforms)
    return floored(_replayed(trace, steps, transforms), transforms)


def _replayed(trace: Trace, steps: pl.DataFrame, transforms: Sequence[Transform]) -> np.ndarray:
    """Replayed periods of `steps` with `transforms` applied, before any floor: once per trace, steps and set
    of transforms (a rule's fix is replayed alone for its saving, again first in the marginal savings; the
    all-fixes projection twice), a set being the same objects in the same order (`_transform_key`)."""
    skey = _steps_key(steps)
    key = (skey, tuple(_transform_key(t) for t in transforms))

    def run() -> tuple[tuple[Transform, ...], np.ndarray]:
        g = build(trace)
        plan = _plan(g, skey)
        s, e = _apply_plan(plan, simulate(g, transforms))
        periods = _per_step(steps, e - s)
        if any(t.gpu_dur or t.gpu_gap for t in transforms):  # device work made shorter: the host may hold the step
            periods = host_paced(trace, g, plan, skey, transforms, periods)
        # (the transforms are held: the ids in the key stay theirs)
        return tuple(transforms), periods

    return once_in(_replays(trace), key, run)[1].copy()  # (a concurrent caller of the same key waits for it)


def host_paced(trace: Trace, g: Graph, plan: dict, skey: tuple, transforms: Sequence[Transform],
               periods: np.ndarray) -> np.ndarray:
    """`periods` with their mean raised to the host's own pace where that is slower: the time the host takes from
    the first step's marker to the last step's end marker, replayed with `transforms` and no call waiting for the
    device (`_host_alone`; a call that waited takes only its wake-up, `_waited_own`), over the steps. In a loop the device cannot run ahead of the host that launches its
    work, but a device-bound trace opens its window with the host a queue ahead of the device: the work it
    launched before the window, which the trace does not say who launched, starts when it did (`edges`) and holds
    the device's first step there. A fix that makes the device faster than the host replays the host falling back
    through that lead within the window, the step periods, read on the device, short by the lead over the steps;
    the fixed loop never has the lead (docs/replay.md, "The host's own pace"). Each step takes an equal part of
    the rise (savings compare means). Unchanged where the steps have no host markers."""
    order = plan["order"]
    if periods.size == 0 or order.size == 0 or "ce" not in plan:
        return periods
    first, last = int(plan["c"][int(order[0])]), int(plan["ce"])
    if first < 0 or last < 0:
        return periods
    pace = _host_pace(trace, g, skey, transforms, first, last) / periods.size
    short = pace - float(periods.mean())
    return periods + short if short > 0 else periods


def _host_pace(trace: Trace, g: Graph, skey: tuple, transforms: Sequence[Transform], first: int, last: int) -> float:
    """The host's replayed time (ns) from anchor `first` to anchor `last` with `transforms` and no call waiting
    for the device: once per trace, steps and the transforms' host parts (what the device's rows do is not read:
    every fix that changes only the device shares the one replay of its pricing transform)."""
    host = tuple(t for t in transforms if not _device_only(t))
    key = ("host alone", skey, tuple(_host_key(t) for t in host))

    def run() -> tuple[tuple[Transform, ...], float]:
        a_s = simulate(g, [*host, _host_alone(g)], own_cap=_waited_own(g))[0]
        return host, float(a_s[last] - a_s[first])

    return once_in(_replays(trace), key, run)[1]


def paces(trace: Trace, steps: pl.DataFrame, transforms: Sequence[Transform]) -> tuple[float, float, bool] | None:
    """(the host's own pace, the device's own pace, whether a call in the steps still waits for the device) of the
    steps replayed with `transforms`, ns per step: the host with no call waiting for the device (`_host_pace`), and
    the device with every host interval off the path (its activities back to back, with their gaps, launch
    latencies and the other streams they wait for), each from the first step's start to the last step's end over
    the steps. None where the steps have no host markers (`fixes.led_mean` reads them)."""
    if steps.height < 2:
        return None
    g = build(trace)
    skey = _steps_key(steps)
    plan = _plan(g, skey)
    if "ce" not in plan or g.a_ts.size == 0:
        return None
    first, last = int(plan["c"][int(plan["order"][0])]), int(plan["ce"])
    if first < 0 or last < 0:
        return None
    n = steps.height
    host = _host_pace(trace, g, skey, transforms, first, last) / n
    key = ("device alone", skey, tuple(_transform_key(t) for t in transforms))

    def run() -> tuple[tuple[Transform, ...], float]:
        off = [(int(t), int(g.a_ts.min()) - 1, int(g.a_end.max()) + 1) for t in np.unique(g.a_tid)]
        s, e = _apply_plan(plan, simulate(g, [*transforms, Transform("device alone", host_spans=off)]))
        return tuple(transforms), float(e.max() - s.min())

    device = once_in(_replays(trace), key, run)[1] / n
    # a call between the first step's start and the last one's end that still waits for the device (a sync, a
    # blocking allocator call): the host cannot keep a queue ahead of the device across it
    freed = [_ids(t.no_wait) for t in transforms if len(t.no_wait)]
    waits = (g.a_wait >= 0) & ~g.a_marker & (g.a_ts >= g.a_ts[first]) & (g.a_ts < g.a_ts[last])
    if freed and waits.any():
        waits &= ~np.isin(g.a_i, _unique(np.concatenate(freed)))
    return host, device, bool(waits.any())


def _device_only(t: Transform) -> bool:
    """Whether `t` changes only the device's work (durations, gaps, added work) and which calls wait for it."""
    return not (t.host_cut or len(t.host_removed) or len(t.host_spans) or t.cost_us or t.host_share or t.long_share
                or t.long_cost_us or t.input_ready)


def _host_key(t: Transform) -> tuple:
    """`_transform_key` of what the host's own replay reads of `t` (no device row, no wait: `_host_pace`)."""
    rows = tuple((id(x), len(x)) if len(x) else None for x in (t.host_cut, t.host_removed, t.host_spans))
    return (rows, tuple(sorted(t.cost_us.items())), float(t.host_share), float(t.long_share),
            tuple(sorted(t.long_cost_us.items())), bool(t.input_ready))


@per_trace
def _waited_own(g: Graph) -> np.ndarray:
    """Each anchor's own time on the host alone, at most: a call that waited for the device, only its wake-up (from
    the end of the work it waited for to its return). Its floor (the shortest call of its name) is its own time
    where every call of the name waited: a DDP rank's one `cudaStreamSynchronize` a window, 14 ms of waiting for
    its all-reduce, would stand as 14 ms of the host's own work."""
    return np.where(g.a_wait >= 0, g.a_wake.astype(np.int64), np.iinfo(np.int64).max)


@per_trace
def _host_alone(g: Graph) -> Transform:
    """A transform under which no host call waits for the device (each keeps its floor): the host's own pace
    (`host_paced`). Once per graph, so its rows are searched once (`_part`)."""
    return Transform("host alone", no_wait=np.unique(g.a_i[g.a_wait >= 0]).astype(np.int64))


def _transform_key(t: Transform) -> tuple:
    """What the graph's replay reads of a transform, as a key: its row mappings and sequences by identity (and
    length), its parameters by value (`bound_us` and `floor_ns` act after the replay; `input_ready` also drops the
    DataLoader's batch arrivals, `Graph.a_arrive`)."""
    rows = tuple((id(x), len(x)) if len(x) else None
                 for x in (t.gpu_dur, t.gpu_gap, t.gpu_add, t.host_cut, t.host_removed, t.no_wait, t.host_spans))
    return (rows, tuple(sorted(t.cost_us.items())), float(t.host_share), float(t.long_share),
            tuple(sorted(t.long_cost_us.items())), bool(t.input_ready))


@per_trace
def _replays(trace: Trace) -> dict:
    """`_replayed`'s results of one trace."""
    return {}


def floored(periods: np.ndarray, transforms: Sequence[Transform]) -> np.ndarray:
    """`periods` with their mean raised to the transforms' pace from outside the graph (`floor_ns`, the largest),
    unless one of them keeps the input ready (then only such a transform's own floor holds: the pace of the
    workers the fix gives): the steps wait for the DataLoader's workers, which deliver a batch per floor_ns
    however fast the loop runs. Each step takes an equal part of the wait (savings compare means)."""
    ready = any(t.input_ready for t in transforms)
    # batches ready: the workers' old pace no longer holds, the pace the fix itself gives (its own floor) does
    floors = [t.floor_ns for t in transforms if t.floor_ns and (t.input_ready or not ready)]
    if not floors or periods.size == 0:
        return periods
    short = max(floors) - float(periods.mean())
    return periods + short if short > 0 else periods


def _per_step(steps: pl.DataFrame, periods: np.ndarray) -> np.ndarray:
    """One period per step; a graph with nothing to replay in some step (no host call, no activity: a step
    marker alone) keeps the traced periods, so nothing is predicted for it."""
    if periods.size == steps.height:
        return periods
    return (steps["end"] - steps["ts"]).to_numpy().astype(np.float64)


#: the step columns a replay reads (memo keys: the steps are rebuilt from them as Int64)
_STEP_COLS = ("step", "host_idx", "cpu_ts", "cpu_end", "gpu_ts", "gpu_end", "ts", "end")


def _parametric_key(transforms: Sequence[Transform]) -> tuple | None:
    """A hashable key of transforms that name no rows (the profiler's cost: shares and per-kind costs), else None
    (an `input_ready` transform, which drops the DataLoader's batch arrivals, is replayed as itself)."""
    if any(t.gpu_dur or t.gpu_gap or t.gpu_add or t.host_cut or len(t.host_removed) or len(t.no_wait) or len(t.host_spans)
           or t.input_ready for t in transforms):
        return None
    return tuple((tuple(sorted(t.cost_us.items())), float(t.host_share), float(t.long_share),
                  tuple(sorted(t.long_cost_us.items()))) for t in transforms)


@per_trace
def _parametric(trace: Trace, key: tuple[tuple, ...], tkey: tuple) -> np.ndarray:
    steps = pl.DataFrame(dict(zip(_STEP_COLS, map(list, key), strict=True)), schema={c: pl.Int64 for c in _STEP_COLS})
    ts = [Transform("parametric", cost_us=dict(c), host_share=h, long_share=lg, long_cost_us=dict(lc))
          for c, h, lg, lc in tkey]
    g = build(trace)
    s, e = _boundaries(g, steps, simulate(g, ts))
    return _per_step(steps, e - s)


@per_windows(*_STEP_COLS)
def _unmodified(trace: Trace, steps: pl.DataFrame) -> np.ndarray:
    g = build(trace)
    s, e = _boundaries(g, steps, simulate(g))
    return _per_step(steps, e - s)


def drains_every_step(trace: Trace, steps: pl.DataFrame, transforms: Sequence[Transform]) -> bool:
    """Whether `transforms` take away a device drain that the loop makes in every step of `steps`: in each step's
    host span [its start, the next step's start) at least one call they no longer let wait (`no_wait`) has a wait
    edge in the graph (the host waited there for the device's work: `torch.cuda.empty_cache()`'s cudaFree, an
    `.item()` every step). The loop then drained the device in the step before the recorded window too, and the
    window's first step starts from that drain: its replay with the fix starts from a device the fixed loop
    does not leave idle (its queue filled while the host ran ahead) and pays a start-up the fixed loop never
    pays (`fixes.steady`)."""
    ids = [t.no_wait for t in transforms if len(t.no_wait)]
    if not ids or steps.height < 2:
        return False
    g = build(trace)
    named = _part(g, "drains", tuple(ids), lambda *xs: np.isin(g.a_i, _unique(np.concatenate([_ids(x) for x in xs]))))
    got = named & (g.a_wait >= 0) & ~g.a_marker
    if not got.any():
        return False
    start = np.sort(steps["cpu_ts"].drop_nulls().to_numpy().astype(np.int64))
    if start.size != steps.height:
        return False
    end = np.append(start[1:], np.int64(steps["cpu_end"].max() or start[-1]))
    t = np.sort(g.a_ts[got])
    # a call in [start, end) of each step: the first call at or after its start is before its end
    k = np.searchsorted(t, start, side="left")
    return bool(np.all((k < t.size) & (t[np.minimum(k, t.size - 1)] < end)))


def steady_mean(trace: Trace, steps: pl.DataFrame, transforms: Sequence[Transform]) -> float:
    """Mean replayed period (ns) of the steps after the first, with `transforms` applied: the time from the second
    step's start to the window's end over their number. The second step starts no earlier than the end of the
    device work launched in the first (a host that runs ahead reaches the second step's marker while that work
    still runs: the time up to its end is the first step's). `fixes.steady` prices a fix that removes a drain
    every step on it; a pace from outside the graph (`floor_ns`) holds it as it holds the mean (`floored`)."""
    g = build(trace)
    plan = _plan(g, _steps_key(steps))
    times = simulate(g, transforms)
    start, end = _apply_plan(plan, times)
    order = plan["order"]
    if order.size < 2:
        return float(np.mean(end - start)) if order.size else 0.0
    second = int(order[1])
    s2 = float(start[second])
    cut = int(steps["cpu_ts"][second]) if steps["cpu_ts"][second] is not None else int(steps["ts"][second])
    d_e = times[3]
    launched = g.d_launch >= 0
    first = np.where(launched, g.a_ts[np.maximum(g.d_launch, 0)] < cut, g.d_ts < int(steps["ts"][second]))
    if first.any():
        s2 = max(s2, float(d_e[first].max()))
    mean = (float(end[int(order[-1])]) - s2) / (order.size - 1)
    floors = [t.floor_ns for t in transforms if t.floor_ns and (t.input_ready or not any(x.input_ready for x in transforms))]
    return max(mean, max(floors)) if floors else mean


#: the replay's fidelity bounds on the traced step periods (mean and worst relative error)
FIDELITY_MEAN, FIDELITY_MAX = 0.03, 0.08


def fidelity(trace: Trace, steps: pl.DataFrame) -> dict:
    """The JSON `replay` section: the unmodified graph's replayed step periods against the traced ones —
    {fidelity: {mean_error_pct, max_error_pct, steps: [{step, traced_us, replayed_us, error_pct}]}, graph sizes,
    confidence ("high" within FIDELITY_MEAN / FIDELITY_MAX, else "low"), note}."""
    if steps.height == 0:
        return {"fidelity": None, "confidence": None, "note": "no steps to replay"}
    g = build(trace)
    traced = (steps["end"] - steps["ts"]).to_numpy().astype(np.float64)
    rep = replay(trace, steps)
    # (an empty step replayed empty is exact)
    err = np.where(traced > 0, np.abs(rep / np.where(traced > 0, traced, 1) - 1), (rep > 0).astype(np.float64))
    mean, worst = float(err.mean()), float(err.max())
    ok = mean <= FIDELITY_MEAN and worst <= FIDELITY_MAX
    per = [{"step": int(s), "traced_us": round(float(t) / 1000, 3), "replayed_us": round(float(r) / 1000, 3),
            "error_pct": round(100 * float(e), 2)} for s, t, r, e in zip(steps["step"], traced, rep, err, strict=True)]
    note = None if ok else (f"the replay misses the traced step periods by {100 * mean:.1f} % on average, "
                            f"{100 * worst:.1f} % at worst (bounds {100 * FIDELITY_MEAN:.0f} % / {100 * FIDELITY_MAX:.0f} %): "
                            "predictions from it have low confidence")
    return {"fidelity": {"mean_error_pct": round(100 * mean, 2), "max_error_pct": round(100 * worst, 2), "steps": per},
            "confidence": "high" if ok else "low", "note": note,
            "graph": {"host_anchors": int(g.a_ts.size), "device_activities": int(g.d_ts.size),
                      "unexplained_device_starts": int((~g.d_explained).sum()),
                      "launch_latency_us": round(g.latency_ns / 1000, 3), "device_gap_us": round(g.device_gap_ns / 1000, 3)},
            "doc": "docs/replay.md"}


#: the replay's per-trace results (the graph, the unmodified and profiler-cost replays): `memo.drop` frees them
#: once every replay of a run is done (the report's layer table, its largest step, runs after them)
CACHES = (build, _parametric, _unmodified, _replays)
