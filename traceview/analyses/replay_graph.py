"""The trace's dependency graph for the replay simulator: host anchors per thread, device activities per
stream, and the edges between them, as numpy arrays (docs/replay.md describes the taxonomy).

Nodes
- host anchors: every runtime/driver call (a launch, a sync, a copy, any other call) that is not nested in
  another one, plus zero-length markers where a `ProfilerStep#N` span starts and ends. The host time between
  two anchors of a thread (CPU ops' self time, Python, DataLoader, idle host gaps: "other host work") is kept
  as the offset of the program-order edge between them; the recorded host rows inside that gap are counted so
  that a transform can take time off it.
- device activities: kernels, memcpys, memsets (collectives are kernels) per (device, stream); `cuda_sync`
  records are not activities.

Edges (each `dst >= src + offset`, on the start (S) and end (E) event of each node)
- program order per thread: S(anchor) >= E(previous anchor) + host gap; E >= S + the call's own time;
- program order per stream: S(activity) >= E(previous activity) + device gap;
- launch: S(activity) >= S(launch call) + launch latency (correlation id);
- cross-stream: S(activity) >= E(activity on another stream) + gap, where neither its stream nor its launch
  explains its start (a CUDA event wait the trace does not name);
- host waits: E(call) >= E(device activity) + wake-up, for a call that returned after device work it covers
  had finished (stream/device/event synchronize, a blocking memcpy of `.item()`/`.cpu()`).

Offsets are the trace's own where the edge explains the observed time (so the unmodified replay reproduces
it) and the trace's typical ones where it does not: a start that no edge explains replays early, and the
fidelity measures it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from ..engine import CHAIN, IN_MEMORY
from ..frames import column, dropnull, filled, isnull, members, notnull, omit, pick, take
from ..ingest import heap_trim
from ..ingest.categories import GRAPH_LAUNCH_RE, RUNTIME_CATS
from ..memo import per_trace
from ..model import STEP_RE, Trace
from ..records import record
from .breakdown import DATALOADER_PREFIXES
from .names import contains as name_contains
from .rowid import positions
from .timeline import gpu_work

#: a call that blocks until the device is done with (some of) its queue, by name; device memory allocation and
#: release synchronise implicitly (CUDA C Programming Guide, "Implicit Synchronization": a device memory
#: allocation between two commands serialises them; cudaFree waits for the device): the caching allocator's
#: cudaMalloc/cudaFree on a cache miss or torch.cuda.empty_cache()
SYNC_RE = (r"^(cuda|hip)(Stream|Device|Event)Synchronize(_v\d+)?$|^cu(Ctx|Stream|Event)Synchronize(_v\d+)?$"
           r"|^(cuda|hip)Memcpy(_v\d+)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?$"
           r"|^(cuda|hip)(Malloc|Free)(_v\d+)?$|^cuMem(Alloc|Free)(_v\d+)?$")
MIN_DEVICE_GAP_CAP_NS = 2_000  # an inter-kernel gap this short is the device's own, whatever the statistics say
JOIN_GAP_NS = 100_000  # a host thread idle this long while another thread works may be waiting for it
MIN_LATENCY_CAP_NS = 20_000  # likewise for a launch latency
#: a launch latency longer than this is a wait for something else (the device busy elsewhere), not latency
MAX_LATENCY_CAP_NS = 100_000
#: host row kinds whose recording the profiler pays for (analyses.overhead's kinds; Rows.kind is the position)
KINDS = {"op": ["cpu_op", "user_annotation"], "runtime": list(RUNTIME_CATS), "python": ["python_function"]}
_OP, _RUNTIME = list(KINDS).index("op"), list(KINDS).index("runtime")  # (their codes in `_kind_code`)
#: the DataLoader iterator that runs worker processes: its `__next__` span (`enumerate(DataLoader)#<iter>.__next__`)
#: either takes a batch the workers already delivered or blocks until one arrives
LOADER_WORKERS = "_MultiProcessingDataLoaderIter"
#: a worker `__next__` at least this many times the trace's fastest one waited for a batch: a ready batch costs
#: the iterator's bookkeeping alone (the fastest call), whose spread between calls stays within 2x on the bundled
#: traces (26–36 µs, 39–67 µs, 55–57 µs); a blocked call waits for a worker (0.6–105 ms there)
LOADER_WAIT_FACTOR = 2.0


# (eq=False: it holds frames/arrays, whose field-wise == and hash raise; it is compared and keyed by identity,
# and the generated __eq__/__hash__ cost start-up time at import)
@record(frozen=True, eq=False)
class Graph:
    """The replay graph of one trace. Anchors `a_*` (n_a), activities `d_*` (n_d); indices are positions in these
    arrays (int32 while they fit), -1 for none; the offsets (ns: gaps, own times, wake-ups, latencies) are int32
    where every value of the array fits, else int64 (readers widen them in their arithmetic). Events: S(anchor j) = 2j, E(anchor j) = 2j+1, S(activity k) =
    2n_a+2k, E = 2n_a+2k+1."""

    a_i: np.ndarray  # host row id (`i`) of the anchor, or the step's host_idx for a marker (uint32 ids)
    a_tid: np.ndarray
    a_ts: np.ndarray
    a_end: np.ndarray
    a_prev: np.ndarray  # previous anchor of the thread
    a_gap: np.ndarray  # host time between the previous anchor's end and this start (ns, >= 0)
    a_own: np.ndarray  # the call's own time (ns): its duration, or its floor when it waited on the device
    a_wait: np.ndarray  # the activity whose end it waited for
    a_wake: np.ndarray  # from that activity's end to the call's return (ns)
    a_marker: np.ndarray  # bool: a step marker (zero length)
    a_overlap: np.ndarray  # bool: it started before the previous call of its thread ended (start-to-start edge)
    a_join: np.ndarray  # the anchor of another thread whose end this thread waited for (backward's autograd thread)
    a_jwake: np.ndarray  # from that end to this start (ns)
    a_name: pl.Series  # the anchor's call name (markers: the step span's name), Categorical
    d_i: np.ndarray  # gpu row id (uint32 ids)
    d_ts: np.ndarray
    d_end: np.ndarray
    d_prev: np.ndarray  # previous activity on its (device, stream)
    d_gap: np.ndarray  # device gap after it (ns)
    d_launch: np.ndarray  # the launching anchor
    d_lat: np.ndarray  # launch latency from the launch call's start (ns)
    d_x: np.ndarray  # the activity on another stream it waits for
    d_xgap: np.ndarray
    d_explained: np.ndarray  # bool: some edge explains the activity's observed start
    seg_rows: Rows  # the recorded host rows, each in an anchor's gap, joined gap or own time
    latency_ns: float  # the typical launch latency (median onto an idle stream)
    device_gap_ns: float  # the typical gap between queued activities
    #: the batch arrival each anchor follows (ns on the trace's clock, NEG_TIME: none): the end of a DataLoader
    #: `__next__` that blocked for a worker process, for the thread's first anchor after it (`_arrivals`)
    a_arrive: np.ndarray | None = None

    @property
    def n_events(self) -> int:
        return 2 * (self.a_ts.size + self.d_ts.size)


def _i64(s: pl.Series | np.ndarray) -> np.ndarray:
    return np.asarray(s.to_numpy() if isinstance(s, pl.Series) else s).astype(np.int64, copy=False)


def _prev_in_group(group: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """For positions sorted by `order` (already in group-then-time order; None: the positions' own order), the
    previous position of the same group (int32 while the positions fit)."""
    n = group.size if order is None else order.size
    prev = np.full(n, -1, np.int32 if n < 2**31 else np.int64)
    if n > 1 and order is None:
        k = np.flatnonzero(group[1:] == group[:-1])
        prev[k + 1] = k
    elif n > 1:
        same = group[order[1:]] == group[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
    return prev


def _kind_code(trace: Trace) -> np.ndarray:
    """Each host row's kind (its position in KINDS; -1 for none), int8: the graph build reads the categories once."""
    cat = trace.host["cat"]
    code = np.full(cat.len(), -1, np.int8)
    for k, cats in enumerate(KINDS.values()):  # three hash lookups (cheaper than a string replace)
        code[cat.is_in(cats).to_numpy()] = k
    return code


def _anchors(trace: Trace, code: np.ndarray) -> pl.DataFrame:
    """[i, tid, ts, end, name, marker] of the host anchors, by (tid, ts): top-level runtime calls and step markers
    (`code`: the host rows' `_kind_code`)."""
    h = trace.host
    # (the anchors in three queries: a small trace's run is mostly polars' fixed cost per query)
    rt = pick(h, "i", "tid", "ts", "end", "name").lazy().filter(pl.Series(code == _RUNTIME)).with_columns(
        marker=pl.lit(False))
    st = trace.steps.filter(pl.col("cpu_ts").is_not_null() & pl.col("host_idx").is_not_null())
    tid = (h.lazy().filter(pl.col("i").is_in(members(st["host_idx"]))).select("i", "tid").collect(**IN_MEMORY))
    st = st.lazy().join(tid.lazy(), left_on="host_idx", right_on="i", how="inner")
    marks = pl.concat([st.select(pl.col("host_idx").alias("i"), "tid", pl.col(c).alias("ts"), pl.col(c).alias("end"),
                                 "name", marker=pl.lit(True)) for c in ("cpu_ts", "cpu_end")])
    a = pl.concat([rt, marks.cast(rt.collect_schema())]).collect(**CHAIN)
    del rt, marks
    ok = notnull(a["ts"]) & notnull(a["end"])
    if not ok.all():
        a = a.filter(ok)
    del ok
    # the rows' order by (tid, ts, marker first, the longer call first) and the kept rows' positions in it, then one
    # gather of the kept rows. A call and the one nested in it can start in the same microsecond (a rounded
    # timestamp): the enclosing one first, so the nested one is dropped below whatever order the file gave them in
    # (a stable sort: polars' unstable one over several keys ordered such ties arbitrarily, and took 15x longer)
    # (not a sorted copy of every runtime call and a filtered copy of that: at 10 M tiny events ~150 MB each, which
    # polars' allocator then held under the rest of the build)
    order = a.select(pl.arg_sort_by(["tid", "ts", "marker", "end"], descending=[False, False, True, True],
                                    maintain_order=True))[:, 0]
    s = pick(a, "tid", "end", "marker")[order]
    # a call nested in an earlier one (a driver call inside a runtime call) is that call's time, not an anchor
    run_end = s.select(pl.col("end").cum_max().shift(1).over("tid"))["end"]
    keep = s["marker"] | isnull(run_end) | (s["end"] > run_end)
    del s, run_end
    return a[order.filter(keep)]


@per_trace
def build(trace: Trace) -> Graph:
    """The replay graph of `trace` (once per trace)."""
    graph = _build(trace)
    # the build's numpy temporaries are left as free space between the graph's arrays in the C heap (2 M tiny
    # events: ~80 MB, glibc's `mallinfo2`), where the replays' arrays do not all fit: given back before them
    heap_trim.release(trace.host.height + trace.gpu.height)
    return graph


def _build(trace: Trace) -> Graph:
    code = _kind_code(trace)
    a = _anchors(trace, code)
    n_a = a.height
    a_tid, a_ts, a_end = _i64(filled(a["tid"], -1)), _i64(a["ts"]), _i64(a["end"])
    a_prev = _prev_in_group(a_tid)
    # (each array that may hold one value, `_constant`, as soon as it is final: the build's peak is in the joins)
    a_tid = _constant(a_tid)
    prev_end = np.where(a_prev >= 0, a_end[np.maximum(a_prev, 0)], a_ts)
    # a call that starts before the previous one ended (asynchronous runtimes: MTIA's remote calls) follows its
    # start, not its end: the program-order edge then runs start to start (a_gap is that offset)
    a_overlap = (a_prev >= 0) & (a_ts < prev_end)
    prev_ts = np.where(a_prev >= 0, a_ts[np.maximum(a_prev, 0)], a_ts)
    a_gap = np.where(a_overlap, a_ts - prev_ts, np.maximum(a_ts - prev_end, 0))
    a_own = a_end - a_ts

    g = gpu_work(pick(trace.gpu, "i", "kind", "device", "stream", "ts", "end", "launch").lazy()).filter(
        pl.col("ts").is_not_null() & pl.col("end").is_not_null()).collect(**CHAIN)
    # the copies `_waits` reads (launches of a copy, by their end: order-free) before the sort, which then leaves
    # the kinds out (text: 16 B an activity)
    copies = g.lazy().filter(pl.col("kind") == "memcpy").select(pl.col("launch").cast(pl.Int64), "end").drop_nulls(
    ).collect(**CHAIN)
    collectives = bool((g["kind"] == "comm").any())
    g = omit(g, "kind").sort(pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1), "ts", maintain_order=True)
    n_d = g.height
    d_ts, d_end = _i64(g["ts"]), _i64(g["end"])
    d_end = np.maximum(d_end, d_ts)
    dev = _i64(filled(g["device"], -1))
    key = dev * (1 << 32) + _i64(filled(g["stream"], -1))
    d_i, launch = _ids32(_i64(g["i"])), g["launch"]
    # (the activities' columns are read: the rest of the build holds numpy arrays of them, not the sorted frame)
    del g
    d_prev = _prev_in_group(key)
    has_prev = d_prev >= 0
    pe = np.where(has_prev, d_end[np.maximum(d_prev, 0)], d_ts)
    gap = d_ts - pe

    # launch: the anchor that holds the launch call (the call itself, or the top-level call it is nested in)
    a_i = _ids32(_i64(a["i"]))  # (the graph's ids, uint32: not an int64 copy held through the build)
    launch_i = filled(launch.cast(pl.Int64), -1).to_numpy()
    d_launch = np.full(n_d, -1, np.int64)
    real = ~a["marker"].to_numpy()
    if n_a and n_d:
        # each activity's launch call among the host rows: by position (`rowid.positions`: the host frame's id
        # table), not a hash join of every activity onto the host rows (at 10 M tiny events a join and its copies
        # of ~3 M rows were the build's peak, held by polars' allocator after it)
        at = positions(trace.host, launch)
        if at is None:  # (host ids with nulls: the join)
            lh = (trace.host.lazy().filter(pl.col("i").is_in(launch.drop_nulls().implode()))
                  .select(pl.col("i").cast(pl.Int64), "tid", "ts").collect(**IN_MEMORY))
            pos = pl.DataFrame({"i": launch_i, "_k": np.arange(n_d)}).join(lh, on="i", how="inner")
            del lh
        else:
            found = notnull(at)
            at = at.filter(found)
            pos = pl.DataFrame({"_k": np.flatnonzero(found.to_numpy()), "tid": take(column(trace.host, "tid"), at),
                                "ts": take(trace.host["ts"], at)})
            del found
        del at
        # the anchor of the launch's thread that started last at or before the launch call
        ra = np.flatnonzero(real)
        q_tid, q_ts = _i64(filled(pos["tid"], -1)), _i64(pos["ts"])
        # anchors are sorted by (tid, ts): search a composite key
        # (thread codes: a handful of threads, so a hash unique then a search in the few, as `_segments` does: no
        # sort of every anchor and launch, which was the build's peak at 10 M tiny events)
        both = np.concatenate([a_tid[ra], q_tid])
        tid_codes = np.sort(pl.Series(both).unique().to_numpy())
        inv = np.searchsorted(tid_codes, both)
        del both
        ka = inv[:ra.size].astype(np.int64) * (1 << 40) + (a_ts[ra] - a_ts.min())
        kq = inv[ra.size:].astype(np.int64) * (1 << 40) + (q_ts - a_ts.min())
        j = np.searchsorted(ka, kq, side="right") - 1
        ok = (j >= 0) & (inv[ra.size:] == inv[:ra.size][np.maximum(j, 0)])
        kk = _i64(pos["_k"])
        d_launch[kk[ok]] = ra[j[ok]]
        del pos, ra, q_tid, q_ts, tid_codes, inv, ka, kq, j, ok, kk  # (the build's peak is later: free them)
    launched = d_launch >= 0
    lts = np.where(launched, a_ts[np.maximum(d_launch, 0)], d_ts) if n_a else d_ts
    lat = d_ts - lts
    # typical launch latency: activities whose launch call began after their stream went idle
    idle_at_launch = launched & (~has_prev | (lts >= pe))
    lat_med = float(np.median(lat[idle_at_launch])) if idle_at_launch.any() else 5_000.0
    lat_cap = float(np.clip(1.5 * np.percentile(lat[idle_at_launch], 95), MIN_LATENCY_CAP_NS, MAX_LATENCY_CAP_NS)) \
        if idle_at_launch.any() else float(MIN_LATENCY_CAP_NS)
    lat_med = min(lat_med, lat_cap)
    queued = has_prev & (~launched | (lts + lat_med <= pe))
    gap_med = float(np.median(gap[queued])) if queued.any() else 1_000.0
    gap_cap = max(MIN_DEVICE_GAP_CAP_NS, 1.5 * float(np.percentile(gap[queued], 95))) if queued.any() \
        else float(MIN_DEVICE_GAP_CAP_NS)

    # one call that launched several activities (a CUDA graph, a multi-kernel call): the gaps between them are the
    # launch's own (graph node dependencies), explained by program order
    same_launch = has_prev & launched & (d_launch[np.maximum(d_prev, 0)] == d_launch)
    by_stream = has_prev & ((gap <= gap_cap) | same_launch)
    # a graph launch's first node waits for the graph's own upload and setup (CUPTI instruments each node): the
    # observed latency is the graph's, whatever the kernel launches' statistics say — unless its stream stayed
    # busy for longer than any launch latency after the launch call returned (a host running steps ahead of the
    # device): the node then waited for the stream, and its observed gap after the work before it is the graph's
    # own start; the recorded latency is the queue's, which a shorter queue does not keep
    graph_call = (a.select(name_contains(a, GRAPH_LAUNCH_RE).fill_null(False)).to_series().to_numpy() if n_a
                  else np.zeros(0, bool))  # (the regex on the distinct call names, as the loader's `graph`)
    graph = launched & graph_call[np.maximum(d_launch, 0)] if n_a else np.zeros(n_d, bool)
    l_end = a_end[np.maximum(d_launch, 0)] if n_a else d_ts
    behind = graph & has_prev & ~same_launch & (l_end + lat_cap < pe)
    by_graph = graph & ~behind
    by_stream = by_stream | behind
    # an activity that started before its launch call returned is the call's own work (a pageable copy staged by
    # the call): the call explains it, unless the stream was still busy with earlier work when the call began (a
    # blocking `.cpu()` copy queued behind the step's kernels: the call waited for the queue, which a faster device
    # shortens; its recorded latency is the queue's). Where the device also ran collectives, the work before such a
    # copy may have waited on the peers, which one rank's graph does not see: there the copy keeps its recorded
    # start, and its wait puts the replay back on the trace's clock
    behind_queue = queued & (not collectives)
    in_call = (launched & (d_ts <= a_end[np.maximum(d_launch, 0)]) & ~behind_queue) if n_a else np.zeros(n_d, bool)
    by_launch = launched & (lat >= 0) & ((lat <= lat_cap) | by_graph | in_call)
    d_gap = np.where(by_stream, np.maximum(gap, 0), min(gap_med, gap_cap)).astype(np.int64)
    d_lat = np.where(by_launch, lat, np.minimum(lat, int(lat_med))).astype(np.int64)
    # a graph's later nodes follow the node before them (program order, kept above): their recorded offset from
    # the launch call is that chain's, not a latency; pinned to it, nodes made shorter by a fix could not move up
    d_lat = np.where(by_graph & same_launch, 0, d_lat)
    d_lat = np.maximum(d_lat, 0)
    d_gap, d_lat = _constant(_narrow(d_gap)), _constant(_narrow(d_lat))
    # cross-stream: the activity of the same device that ended last before an unexplained start
    d_x = np.full(n_d, -1, np.int64)
    d_xgap = np.zeros(n_d, np.int64)
    need = ~by_stream & ~by_launch
    if need.any():
        eo = np.lexsort((d_end, dev))
        ke = dev[eo] * (1 << 42) + d_end[eo]
        kq = dev[need] * (1 << 42) + d_ts[need]
        j = np.searchsorted(ke, kq, side="right") - 1
        jj = eo[np.maximum(j, 0)]
        ok = (j >= 0) & (dev[jj] == dev[need]) & (key[jj] != key[need]) & (d_ts[need] - d_end[jj] <= gap_cap)
        idx = np.flatnonzero(need)[ok]
        d_x[idx] = jj[ok]
        d_xgap[idx] = d_ts[idx] - d_end[jj[ok]]
        del eo, ke, kq, j, jj, ok, idx
    d_x, d_xgap = _constant(d_x), _constant(_narrow(d_xgap))
    explained = by_stream | by_launch | (d_x >= 0) | (~has_prev & ~launched)
    # no edge at all (first on its stream, not launched in the trace): it starts when it started
    by_end = np.argsort(d_end, kind="stable")
    a_wait, a_wake, blocking = _waits(trace, a, a_ts, a_end, real, d_end, by_end, copies)
    a_wait, a_wake, blocking = _queue_full(a, a_ts, a_end, real, d_launch, d_end, key, by_end, a_wait, a_wake,
                                           blocking)
    del by_end
    del copies
    # a call that waited keeps only its floor: the shortest call of its name that did not wait (its own work
    # alone). Where every call of the name waited (a pageable `.cpu()` copy once a step, the loop's one sync), the
    # shortest of them is a wait too, not own work: such a call keeps its wake-up (from the end of the device work
    # it waited for to its return), or a fix that shortens the device would still find the host held there
    waited = a_wait >= 0
    if waited.any():
        floor = (a.lazy().with_columns(_own=pl.Series(a_own), _waited=pl.Series(waited))
                 .filter(~pl.col("marker") & ~pl.col("_waited"))
                 .group_by("name").agg(pl.col("_own").min().alias("_floor")))
        fl = pick(a, "name").lazy().join(floor, on="name", how="left").collect(**CHAIN)["_floor"]
        fl = np.where(fl.is_null().to_numpy(), a_wake, filled(fl, 0).to_numpy())
        a_own = np.where(waited, np.minimum(a_own, fl), a_own)
    a_wait, a_wake = _latent_waits(a_ts, a_end, blocking, a_wait, a_wake, d_launch, d_end)
    a_wait, a_wake = _constant(a_wait), _constant(_narrow(a_wake))
    # (the arrays the joins below do not read in their final width now, not beside the joins' temporaries)
    a_own = _narrow(a_own)
    small = 2 * (n_a + n_d) < 2**31 - 2  # positions as int32 while every event's number fits (see below)
    if small:
        d_prev, d_launch = d_prev.astype(np.int32), d_launch.astype(np.int32)
    # the rows' search below is the build's peak: the statistics' temporaries go first (kept: the graph's arrays)
    del (prev_ts, key, has_prev, pe, gap, launch, launch_i, real, launched, lts, lat, idle_at_launch, queued, behind_queue, same_launch,
         by_stream, graph_call, by_graph, in_call, by_launch, need, dev, blocking, waited)
    seg, keys, key_of = _segments(trace, a_tid, a_ts, a_end, code)
    a_join, a_jwake, a_gap = _joins(a_tid, a_ts, a_end, a_prev, a_gap, prev_end, keys, key_of, seg,
                                    _long_rows(trace, code), _program_threads(trace, a_tid, code))
    del prev_end
    a_join, a_jwake, a_gap = _handoffs(trace, a_tid, a_ts, a_end, a["marker"].to_numpy(), a_prev, a_join, a_jwake,
                                       a_gap, code)
    del code
    if (a_join >= 0).any():  # rows of a joined gap after the other thread's last call are the join edge's time
        jt = np.where(a_join >= 0, a_end[np.maximum(a_join, 0)], np.iinfo(np.int64).max)
        seg.where[(seg.where == 0) & (seg.ts >= jt[seg.seg])] = 1
    # positions as int32 while every event's number fits (2 (n_a + n_d) < 2^31): half the bytes of the graph's six
    # index arrays, which live from the rules to the projection (`_replay.pull` reads either width)
    if small:
        a_prev, a_wait, a_join, d_x = (_astype(x, np.int32) for x in (a_prev, a_wait, a_join, d_x))
    # the offsets (ns) as int32 where every value of one fits (`_narrow`; `_replay.pull` reads either width, array by
    # array, and the replay's arithmetic widens them): 4 B an anchor or activity each, held to the projection
    a_gap, a_wake, a_jwake, d_gap, d_lat, d_xgap = (_narrow(x) for x in (a_gap, a_wake, a_jwake, d_gap, d_lat, d_xgap))
    # the arrays that often hold one value on a trace (one thread; no waits, joins or cross-stream waits; a uniform
    # gap or latency) as a view of that value (`_constant`: no buffer per row, ~130 MiB at 10 M tiny events)
    a_join, a_jwake, a_overlap = (_constant(x) for x in (a_join, a_jwake, a_overlap))
    return Graph(a_i=a_i, a_tid=a_tid, a_ts=a_ts, a_end=a_end, a_prev=a_prev, a_gap=a_gap, a_own=a_own,
                 a_wait=a_wait, a_wake=a_wake, a_marker=a["marker"].to_numpy(),
                 a_name=a["name"].cast(pl.Categorical),  # (compared and grouped only: 4 B an anchor, not 16)
                 a_join=a_join, a_jwake=a_jwake, a_overlap=a_overlap,
                 d_i=d_i, d_ts=d_ts, d_end=d_end, d_prev=d_prev, d_gap=d_gap, d_launch=d_launch,
                 d_lat=d_lat, d_x=d_x, d_xgap=d_xgap, d_explained=explained, seg_rows=seg,
                 latency_ns=lat_med, device_gap_ns=gap_med, a_arrive=_arrivals(trace, a_tid, a_ts))


#: "no arrival" in `Graph.a_arrive`
NEG_TIME = np.iinfo(np.int64).min


def _arrivals(trace: Trace, a_tid: np.ndarray, a_ts: np.ndarray) -> np.ndarray | None:
    """Per anchor (sorted by thread, then time): the batch arrival it follows, NEG_TIME for none; None when the
    trace has no blocked DataLoader `__next__` of a worker iterator.

    A DataLoader with workers builds its batches in other processes, which the profiler does not slow. Where the
    training thread blocked in `__next__` (the call lasted LOADER_WAIT_FACTOR times the trace's fastest one or
    more), the batch arrived when the call returned: a time on the trace's clock that no change to the training
    process moves (a faster loop only waits longer for it). The thread's first anchor after that end follows
    it. A call that took a ready batch says only that the batch was there before it: nothing is pinned, and a
    faster loop runs ahead as far as its own work allows."""
    sp = (trace.host.lazy().select("tid", "ts", "end", "name", "cat")
          .filter(pl.col("cat").is_in(KINDS["op"]) & pl.col("ts").is_not_null() & pl.col("end").is_not_null()
                  & pl.any_horizontal([pl.col("name").str.starts_with(p) for p in DATALOADER_PREFIXES])
                  & pl.col("name").str.contains(LOADER_WORKERS, literal=True))
          .select(pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64), pl.col("end").cast(pl.Int64))
          .drop_nulls().collect(**IN_MEMORY))
    if sp.height == 0 or a_ts.size == 0:
        return None
    dur = _i64(sp["end"]) - _i64(sp["ts"])
    fastest = int(dur.min())
    blocked = dur >= max(LOADER_WAIT_FACTOR * fastest, 1)
    if not blocked.any():
        return None
    tid, end = _i64(sp["tid"])[blocked], _i64(sp["end"])[blocked]
    # the first anchor of the span's thread that starts at or after its end (anchors sorted by (tid, ts))
    codes, inv = np.unique(np.concatenate([a_tid, tid]), return_inverse=True)
    lo = min(int(a_ts.min()), int(end.min()))
    ka = inv[:a_tid.size].astype(np.int64) * (1 << 42) + (a_ts - lo)
    kq = inv[a_tid.size:].astype(np.int64) * (1 << 42) + (end - lo)
    j = np.searchsorted(ka, kq, side="left")
    ok = (j < ka.size) & (inv[:a_tid.size][np.minimum(j, ka.size - 1)] == inv[a_tid.size:])
    if not ok.any():
        return None
    out = np.full(a_ts.size, NEG_TIME, np.int64)
    np.maximum.at(out, j[ok], end[ok])
    return out


def _long_rows(trace: Trace, code: np.ndarray) -> pl.DataFrame:
    """[tid, ts, end] of the recorded ops and annotations that last at least JOIN_GAP_NS, step spans left out (a
    thread inside one is busy in it: a gloo collective on its worker thread, a CPU kernel); `code`: the host rows'
    `_kind_code`."""
    long = pick(trace.host, "tid", "ts", "end", "name").lazy().filter(
        ((pl.col("end") - pl.col("ts")) >= JOIN_GAP_NS) & pl.Series(code == _OP))
    # (the name is matched on the few long rows only: a regex over every host row costs)
    return (long.filter(~pl.col("name").str.contains(STEP_RE))
            .select(pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64), pl.col("end").cast(pl.Int64))
            .drop_nulls().collect(**CHAIN))


#: the host-side collectives a worker thread runs for the program (ProcessGroupGloo's `gloo:<op>` ranges) and the
#: ops that enqueue them on the program's thread (`c10d::allreduce_`, ...)
HANDOFF_RANGE, HANDOFF_ENQUEUE = "gloo:", "c10d::"


def _handoffs(trace: Trace, a_tid: np.ndarray, a_ts: np.ndarray, a_end: np.ndarray, marker: np.ndarray,
              a_prev: np.ndarray, a_join: np.ndarray, a_jwake: np.ndarray, a_gap: np.ndarray,
              code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hand-off of each host-side collective to its worker thread (`HANDOFF_RANGE` ranges): the worker's first
    call inside the range (F) is joined to H, the last call ending by the range's start of the thread that
    enqueued it (its latest `HANDOFF_ENQUEUE` op before the range began), and F's program-order gap keeps only the
    worker's time since the range began (before it, the worker waited for work: idle). The worker picks the work up
    when that thread hands it over, not when it was recorded to: without the join the worker's first call of a
    trace has no edge at all and replays where it was recorded, and a later one follows its previous collective by
    its recorded idle time, so a host made faster (the profiler's cost taken off) would still reach each exchange
    when it did (`_joins` does not read it: the range's own row starts inside the idle span it would join).
    Returns (a_join, a_jwake, a_gap)."""
    # (the ops' mask and the name test in one filter: a filter copies every column it keeps, and the ops are half
    # the host rows; the ranges and the enqueueing ops are a few)
    ann, op = pick(trace.host, "name", "tid", "ts", "end"), pl.Series(code == _OP)
    rng = (ann.lazy().filter(op, pl.col("name").str.starts_with(HANDOFF_RANGE))
           .select(pl.col("tid").cast(pl.Int64), pl.col("ts").cast(pl.Int64), pl.col("end").cast(pl.Int64))
           .drop_nulls().collect(**CHAIN))
    real = ~marker
    if rng.height == 0 or not real.any():
        return a_join, a_jwake, a_gap
    enq = (ann.filter(op, pl.col("name").str.starts_with(HANDOFF_ENQUEUE)
                      & ~pl.col("tid").is_in(rng["tid"].unique().implode()))
           .select(pl.col("tid").cast(pl.Int64).alias("_etid"), pl.col("ts").cast(pl.Int64).alias("_ets"))
           .drop_nulls().sort("_ets"))
    if enq.height == 0:
        return a_join, a_jwake, a_gap
    a = pl.DataFrame({"_a": np.arange(a_ts.size), "tid": a_tid, "ts": a_ts, "end": a_end}).filter(pl.Series(real))
    # F: the worker's first call at or after the range's start (inside it); the enqueue: the latest enqueueing op of
    # another thread started before the range; H: that thread's last call ending by the range's start
    got = (rng.sort("ts")
           .join_asof(a.select("tid", "ts", pl.col("_a").alias("_f")).sort("ts"), on="ts", by="tid",
                      strategy="forward", check_sortedness=False)
           .join_asof(enq, left_on="ts", right_on="_ets", strategy="backward", check_sortedness=False)
           .drop_nulls(["_f", "_etid"]))
    if got.height == 0:
        return a_join, a_jwake, a_gap
    got = got.join_asof(a.select(pl.col("tid").alias("_etid"), pl.col("end").alias("_hend"), pl.col("_a").alias("_h"))
                        .sort("_hend"), left_on="ts", right_on="_hend", by="_etid", strategy="backward",
                        check_sortedness=False).drop_nulls(["_h"])
    f, h, rts = _i64(got["_f"]), _i64(got["_h"]), _i64(got["ts"])
    ok = a_ts[f] < _i64(got["end"])
    f, h, rts = f[ok], h[ok], rts[ok]
    join, jwake, gap = a_join.copy(), a_jwake.copy(), a_gap.copy()
    join[f], jwake[f] = h, np.maximum(a_ts[f] - a_end[h], 0)
    gap[f] = np.where(a_prev[f] >= 0, np.minimum(gap[f], np.maximum(a_ts[f] - rts, 0)), gap[f])
    return join, jwake, gap


def _busy_at(long_rows: pl.DataFrame, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether thread `tid` is inside one of `long_rows` at time `t` (started at or before it, ending after)."""
    out = np.zeros(t.size, bool)
    for th in np.unique(tid).tolist():  # the joined threads: a handful
        r = long_rows.filter(pl.col("tid") == th).sort("ts")
        if r.height == 0:
            continue
        m = tid == th
        rts, rend = _i64(r["ts"]), np.maximum.accumulate(_i64(r["end"]))
        j = np.searchsorted(rts, t[m], side="right") - 1
        out[m] = (j >= 0) & (rend[np.maximum(j, 0)] > t[m])
    return out


def _own_tail(rows: Rows, a_ts: np.ndarray, cands: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per candidate anchor: the latest end of the recorded rows in its gap (`Rows.where` 0) that started before
    `before` (its own work after its previous call), NEG_TIME for none. Only the candidates' rows are read."""
    out = np.full(a_ts.size, NEG_TIME, np.int64)
    m = np.isin(rows.seg, cands) & (rows.where == 0)
    if m.any():
        s = rows.seg[m].astype(np.int64)
        st = a_ts[s] + rows.rel[m].astype(np.int64)
        lim = np.full(a_ts.size, NEG_TIME, np.int64)
        lim[cands] = before
        keep = st < lim[s]
        np.maximum.at(out, s[keep], st[keep] + rows.dur[m][keep].astype(np.int64))
    return out[cands]


#: calls that only look at the device (a completion poll, the capture-mode switch around it, device queries): a
#: thread making nothing else hands no work to the program (ProcessGroupNCCL's watchdog; RCCL's with `hip`)
POLL_RE = (r"^(cuda|hip)(Event|Stream)Query(_v\d+)?$|^cu(Event|Stream)Query(_v\d+)?$|ThreadExchangeStreamCaptureMode"
           r"|^(cuda|hip)(Get|Set)Device$|^(cuda|hip)(GetLastError|PeekAtLastError|DeviceGetAttribute)$"
           r"|^(cuda|hip)Stream(IsCapturing|GetCaptureInfo)(_v\d+)?$")


def _program_threads(trace: Trace, a_tid: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Per anchor: whether its thread can hand the program work, i.e. is not a polling thread (one that records no
    op or annotation and makes only `POLL_RE` calls: ProcessGroupNCCL's watchdog, a round of `cudaEventQuery` on
    its collectives' events, then ~100 ms of sleep). A polling thread neither waits for the program nor is waited
    for: its polls say when it woke, not when anything could go on."""
    h = pick(trace.host, "tid", "cat", "name")
    ops = members(h["tid"].filter(pl.Series(code == _OP)).unique())  # (the threads alone: not a copy of every op's row)
    rest = h.filter(~pl.col("tid").is_in(ops))  # (the regex on the threads without ops only: a few rows)
    if rest.height == 0:  # every thread records ops: no polling thread (no query more)
        return np.ones(a_tid.size, bool)
    busy = members(rest.filter(~pl.col("name").str.contains(POLL_RE))["tid"].unique())
    poll = dropnull(rest.filter(~pl.col("tid").is_in(busy))["tid"].unique())
    return ~np.isin(a_tid, _i64(poll)) if poll.len() else np.ones(a_tid.size, bool)


def _joins(a_tid: np.ndarray, a_ts: np.ndarray, a_end: np.ndarray, a_prev: np.ndarray, a_gap: np.ndarray,
           prev_end: np.ndarray, keys: Callable[[], np.ndarray], key_of,
           rows: Rows, long_rows: pl.DataFrame | None = None,
           program: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host-thread joins: a thread idle through a long gap (>= JOIN_GAP_NS) while another thread works, from
    that thread's first call after the gap opened to its last call before the gap closed, waited for it
    (`loss.backward()` on the main thread while the autograd thread launches the backward). Idle: none of its
    own recorded rows starts in that span. The program-order gap then keeps the time before the other thread
    took over; the join edge the time after that thread's last call. The other thread took over when its first
    call after the gap opened started, or when the gap opened if it was then inside a long recorded op of its own
    (`long_rows`: DDP's reducer waiting for a gloo all-reduce that its worker thread had started before). Only
    the program's threads (`program`, per anchor: `_program_threads`) join or are joined; `rows` (`_segments`)
    says what the waiting thread itself did in its gap before such a hand-off (`_own_tail`). Returns (a_join,
    a_jwake, a_gap)."""
    n = a_ts.size
    join, jwake = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    if n == 0 or np.unique(a_tid).size < 2:
        return join, jwake, a_gap
    # a thread's first call (the autograd thread's first backward launch) was idle since the trace began: it
    # waits for the thread that handed it the work too, else it would stay pinned to its recorded start
    first = a_prev < 0
    prev_end = np.where(first, a_ts.min(), prev_end)
    prog = np.ones(n, bool) if program is None else program
    cand = np.flatnonzero((((a_prev >= 0) & (a_gap >= JOIN_GAP_NS) & (a_ts >= prev_end))
                           | (first & (a_ts - prev_end >= JOIN_GAP_NS))) & prog)
    if cand.size == 0:
        return join, jwake, a_gap
    eo = np.flatnonzero(prog)
    eo = eo[np.argsort(a_end[eo], kind="stable")]
    se = a_end[eo]
    j = np.searchsorted(se, a_ts[cand], side="right") - 1
    # the latest call of another thread ending before this start (skipping this thread's own ends)
    x = eo[np.maximum(j, 0)]
    ok = (j >= 0) & (a_tid[x] != a_tid[cand]) & (a_end[x] > prev_end[cand])
    c, x = cand[ok], x[ok]
    handoff = np.full(c.size, -1, np.int64)
    for t in np.unique(a_tid[x]).tolist():  # one per joined thread: a handful
        m = a_tid[x] == t
        ts_t = np.sort(a_ts[a_tid == t], kind="stable")  # (sorted already: the anchors are in (tid, ts) order)
        k = np.searchsorted(ts_t, prev_end[c[m]], side="left")
        handoff[m] = ts_t[np.minimum(k, ts_t.size - 1)]
    if long_rows is not None and long_rows.height:
        busy = _busy_at(long_rows, a_tid[x], prev_end[c])
        if busy.any():
            # the other thread took over when the gap opened; this thread's own rows in its gap that began before
            # the other thread's last call (the autograd thread's trailing AccumulateGrad ops after its last launch)
            # were its own work until they ended: it waited from then on (else those rows, started after the
            # hand-off, would say the thread was not idle, and no join: Lightning's autograd thread kept its 16 ms
            # idle gap between steps as work — its main thread, inside Lightning's long `record_function` ranges,
            # reads as busy in a long op, the rule written for DDP's reducer waiting on gloo's all-reduce span)
            own = _own_tail(rows, a_ts, c[busy], a_end[x[busy]])
            handoff[busy] = np.maximum(prev_end[c[busy]], own)
    ok = (handoff >= prev_end[c]) & (handoff < a_end[x])
    # idle: no recorded row of this thread starts between the handoff and the other thread's last end
    if ok.any() and (keys := keys()).size:
        # (only here: most traces have no candidate join.) Stable: the keys come in runs already sorted (each thread's
        # rows in time order), which the merge sort finds: 1 ms vs quicksort's 34 on the 132 MB trace's 290k rows
        keys = np.sort(keys, kind="stable")
        lo = np.searchsorted(keys, key_of(a_tid[c], handoff), side="left")
        hi = np.searchsorted(keys, key_of(a_tid[c], a_end[x]), side="left")
        ok &= hi == lo
    c, x, handoff = c[ok], x[ok], handoff[ok]
    join[c], jwake[c] = x, a_ts[c] - a_end[x]
    gap = a_gap.copy()
    gap[c] = np.clip(handoff - prev_end[c], 0, a_gap[c])
    return join, jwake, gap


def _waits(trace: Trace, a: pl.DataFrame, a_ts: np.ndarray, a_end: np.ndarray, real: np.ndarray,
           d_end: np.ndarray, by_end: np.ndarray, copies: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a_wait, a_wake, blocking): for each blocking call that returned after device work had finished while it
    ran, the activity that finished last before it returned and the time from that end to the return; which
    calls block (`copies`: [launch, end] of the memcpy activities; `by_end`: the activities in order of end)."""
    n_a = a_ts.size
    wait, wake = np.full(n_a, -1, np.int64), np.zeros(n_a, np.int64)
    if n_a == 0 or d_end.size == 0:
        return wait, wake, np.zeros(n_a, bool)
    blocking = real & filled(a["name"].str.contains(SYNC_RE), False).to_numpy()
    # `cuda_sync` records (Kineto >= 2.3) name the blocking call by correlation even where the call's name is
    # not a sync (a cudaMemcpyAsync of a pageable DtoH copy)
    ev = pick(trace.gpu, "kind", "launch").filter((pl.col("kind") == "sync") & pl.col("launch").is_not_null())
    if ev.height:
        blocking |= np.isin(_i64(a["i"]), _i64(ev["launch"].cast(pl.Int64)))
    # a call that launched a copy and returned after that copy ended was a blocking copy
    lc = copies
    if lc.height:
        ai = pl.DataFrame({"i": _i64(a["i"]), "_end": a_end, "_j": np.arange(n_a)})
        hit = ai.join(lc, left_on="i", right_on="launch", how="inner").filter(pl.col("end") <= pl.col("_end"))
        blocking[_i64(hit["_j"])] = True
    blocking &= real
    idx, act = _ended_during(by_end, d_end, a_ts, a_end, blocking)
    wait[idx] = act
    wake[idx] = a_end[idx] - d_end[act]
    return wait, wake, blocking


def _ended_during(eo: np.ndarray, d_end: np.ndarray, a_ts: np.ndarray, a_end: np.ndarray,
                  calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the calls of `calls`, a mask, during which some activity ended; for each, the activity that ended last
    before it returned: what a call that waited on the device waited for). `eo`: the activities by end."""
    se = d_end[eo]
    j = np.searchsorted(se, a_end[calls], side="right") - 1
    ok = (j >= 0) & (se[np.maximum(j, 0)] > a_ts[calls])  # it finished while the call ran
    return np.flatnonzero(calls)[ok], eo[np.maximum(j, 0)][ok]


#: kernel launches: their median duration is the trace's normal launch (`_queue_full`)
LAUNCH_CALL_RE = r"^(cuda|hip)(LaunchKernel(ExC)?|ModuleLaunchKernel|ExtModuleLaunchKernel|MemsetAsync)(_v\d+)?$|^cuLaunchKernel(Ex)?$"
#: calls that enqueue device work (a full queue blocks them until a slot frees): the launches, and the
#: asynchronous copies, which take a slot as a kernel does
QUEUE_CALL_RE = (LAUNCH_CALL_RE + r"|^(cuda|hip)Memcpy(2D|3D)?(Peer)?Async(_v\d+)?$"
                 r"|^cuMemcpy(HtoD|DtoH|DtoD)?Async(_v\d+)?$")
#: a call that took longer than this many times the trace's median launch (and at least QUEUE_WAIT_MIN_NS)
QUEUE_WAIT_FACTOR = 4.0
QUEUE_WAIT_MIN_NS = 20_000
#: ... while the device's queue was at least this share of the deepest it got in the trace, a depth of at least
#: QUEUE_MIN_DEPTH activities launched and not finished, waited for a slot
QUEUE_FULL_SHARE = 0.9
QUEUE_MIN_DEPTH = 64


def _queue_full(a: pl.DataFrame, a_ts: np.ndarray, a_end: np.ndarray, real: np.ndarray, d_launch: np.ndarray,
                d_end: np.ndarray, stream: np.ndarray, by_end: np.ndarray, wait: np.ndarray, wake: np.ndarray,
                blocking: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Calls that waited for a slot in the device's launch queue: on a device-bound step the host runs ahead
    until the queue is full (a plateau of launched-and-unfinished activities: 267-1020 on the bundled traces), and
    each call that enqueues work (a launch, an asynchronous copy: QUEUE_CALL_RE) then returns only when an activity
    finishes. Such a call (longer than QUEUE_WAIT_FACTOR times the trace's median launch, at QUEUE_FULL_SHARE of
    the deepest queue, during which an activity ended) waits for the activity that ended last before it returned,
    as a synchronizing call does (`_waits`), keeping its floor: the unmodified replay is unchanged, and once a fix
    makes the device faster the host no longer pays the wait (before, it stayed host work: a ViT-B/16 FP32 step
    carried 70 ms a step of blocked launches into the replay of its BF16 fix). Never a latent wait: a call that
    did not wait never waits. `stream`: the activities' (device, stream) key, in their order (by stream, then
    start)."""
    n_a = a_ts.size
    launched = d_launch >= 0
    if n_a == 0 or not launched.any():
        return wait, wake, blocking
    # (the regexes on the distinct call names, as the graph's other name tests)
    is_q, is_l = (a.select(name_contains(a, r).fill_null(False)).to_series().to_numpy()
                  for r in (QUEUE_CALL_RE, LAUNCH_CALL_RE))
    q = real & is_q & (wait < 0)
    if not q.any():
        return wait, wake, blocking
    dur = a_end - a_ts
    kl = q & is_l
    thr = max(QUEUE_WAIT_MIN_NS, QUEUE_WAIT_FACTOR * float(np.median(dur[kl if kl.any() else q])))
    # the queue's depth when each call began: activities launched before it less those ended by then, and the
    # work launched before the window not ended by then — the activities with no launch in the trace that come
    # before any launched one on their stream (a stream runs in order: its work launched in the window follows
    # them). A device-bound loop opens its window so, the host a queue ahead (ViT-B/16 FP32 at batch 64: 752
    # activities, the first 135 ms of device work); left out, the launches that blocked on that full queue read as
    # made into a shallow one, and their waits as the host's own time
    qi = np.flatnonzero(q)
    # (stable sorts: both come in sorted runs, one per stream, which the merge sort finds)
    depth = (np.searchsorted(np.sort(a_ts[d_launch[launched]], kind="stable"), a_ts[qi], side="left")
             - np.searchsorted(np.sort(d_end[launched], kind="stable"), a_ts[qi], side="right"))
    if not launched.all():
        seen = np.cumsum(launched)  # launched activities up to each one, by stream then start
        first = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1]])  # each stream's first activity
        at = np.repeat(first, np.diff(np.r_[first, stream.size]))
        pre = ~launched & (seen - seen[at] + launched[at] == 0)
        before = np.sort(d_end[pre])
        depth += before.size - np.searchsorted(before, a_ts[qi], side="right")
    full = (dur[qi] > thr) & (depth >= max(QUEUE_MIN_DEPTH, QUEUE_FULL_SHARE * int(depth.max())))
    if not full.any():
        return wait, wake, blocking
    cand = np.zeros(n_a, bool)
    cand[qi[full]] = True
    # the activity that ended while it ran, last before it returned: the slot it waited for
    idx, act = _ended_during(by_end, d_end, a_ts, a_end, cand)
    wait, wake, blocking = wait.copy(), wake.copy(), blocking.copy()
    wait[idx] = act
    wake[idx] = a_end[idx] - d_end[act]
    blocking[idx] = True
    return wait, wake, blocking


def _latent_waits(a_ts: np.ndarray, a_end: np.ndarray, blocking: np.ndarray, wait: np.ndarray, wake: np.ndarray,
                  d_launch: np.ndarray, d_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A blocking call that did not wait in the trace (the device had drained while the profiled host was slow)
    still waits for the work queued before it once the host is faster: an edge to the activity launched by then
    that ends last, with the typical wake-up of the calls that did wait. In the unmodified replay that work ended
    before the call, so the edge does not bind (fidelity is unchanged); it binds under a transform that speeds
    the host up (the profiler's cost removed)."""
    latent = blocking & (wait < 0)
    launched = np.flatnonzero(d_launch >= 0)
    if not latent.any() or launched.size == 0:
        return wait, wake
    lts = a_ts[d_launch[launched]]
    o = np.argsort(lts, kind="stable")
    acts, lts = launched[o], lts[o]
    # running argmax of the end over the activities in launch order
    ends = d_end[acts]
    arg = acts[_running_argmax(ends)]
    idx = np.flatnonzero(latent)
    j = np.searchsorted(lts, a_ts[idx], side="right") - 1
    ok = (j >= 0)
    k = arg[np.maximum(j, 0)]
    ok &= d_end[k] <= a_end[idx]  # (it ended before the call returned: the edge does not bind unmodified)
    real = wake[wait >= 0]
    typ = int(np.median(real)) if real.size else 0
    w, wk = wait.copy(), wake.copy()
    w[idx[ok]] = k[ok]
    wk[idx[ok]] = np.minimum(typ, a_end[idx[ok]] - d_end[k[ok]])
    return w, wk


def _running_argmax(x: np.ndarray) -> np.ndarray:
    """Position of the running maximum of `x` at each position (the first where it was reached)."""
    best = np.maximum.accumulate(x)
    new = np.ones(x.size, bool)
    new[1:] = best[1:] > best[:-1]
    pos = np.where(new, np.arange(x.size), 0)
    return np.maximum.accumulate(pos)


# (eq=False: it holds frames/arrays, whose field-wise == and hash raise; it is compared and keyed by identity,
# and the generated __eq__/__hash__ cost start-up time at import)
@record(frozen=True, eq=False)
class Rows:
    """The recorded host rows that sit in the graph's host time, as arrays: row id, kind (KIND_CODES), the anchor
    whose time holds it (`seg`), where in that anchor's time (0: the gap before it; 1: the part of a joined gap
    after the other thread's last call; 2: the call's own time), duration and start (ns). Ids and anchor positions
    are 32-bit (the host frame's `i` is UInt32; a graph holds fewer than 2**31 anchors), durations too while every
    one fits (`_narrow`: rows under 2.1 s), and the start is held as its offset from its anchor's start (`rel`,
    int32 likewise; `ts` rebuilds it, exactly, from the anchors' starts `base`): a host row costs 18 bytes here,
    not 34."""

    i: np.ndarray
    kind: np.ndarray
    seg: np.ndarray
    where: np.ndarray
    dur: np.ndarray
    rel: np.ndarray
    base: np.ndarray  # the anchors' starts (the graph's `a_ts` itself: no copy)

    @property
    def ts(self) -> np.ndarray:
        """Each row's start (ns, int64; computed on each call: its few readers read it once)."""
        return self.base[self.seg] + self.rel

    @cached_property
    def _by_id(self) -> tuple[np.ndarray | None, np.ndarray]:
        """(order by id, the ids in that order): sorted once, searched by every transform; (None, the ids) when
        they are in order already (the host frame's usual order: no copy)."""
        if self.i.size < 2 or bool((self.i[1:] > self.i[:-1]).all()):
            return None, self.i
        o = np.argsort(self.i, kind="stable").astype(np.int32 if self.i.size < 2**31 else np.int64)
        return o, self.i[o]

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions of the rows with these ids (ids not held here are left out)."""
        o, si = self._by_id
        if not si.size:
            return np.zeros(0, np.int64)
        ids = np.asarray(ids)
        if si.dtype != ids.dtype:  # (searched as the rows' own dtype: a cast of the few ids, not of every row's)
            info = np.iinfo(si.dtype)
            ids = ids[(ids >= info.min) & (ids <= info.max)].astype(si.dtype)
        p = np.searchsorted(si, ids)
        ok = (p < si.size) & (si[np.minimum(p, si.size - 1)] == ids)
        return p[ok] if o is None else o[p[ok]].astype(np.int64)


def _ids32(x: np.ndarray) -> np.ndarray:
    """Row ids as uint32 where every one fits (the frames' `i` is UInt32; readers compare and search them as int64
    ids, which numpy widens), else as they are."""
    if x.size == 0 or (int(x.min()) >= 0 and int(x.max()) <= np.iinfo(np.uint32).max):
        return x.astype(np.uint32)
    return x


def _constant(x: np.ndarray) -> np.ndarray:
    """`x` as a read-only stride-0 view of its one value when every row holds it (numpy reads it as the array;
    `_replay.pull` reads the value once, `replay.edges`), else `x` itself."""
    if x.size < 2 or _one(x) or x[0] != x[-1] or not (x == x[0]).all():
        return x
    return np.broadcast_to(x[:1].copy(), x.shape)


def _one(x: np.ndarray) -> bool:
    """`x` is a view of one value (`_constant`)."""
    return x.ndim == 1 and x.size > 1 and x.strides[0] == 0


def _astype(x: np.ndarray, dtype) -> np.ndarray:
    """`x.astype(dtype)`, a view of one value kept one (`_constant`)."""
    return np.broadcast_to(x[:1].astype(dtype), x.shape) if _one(x) else x.astype(dtype)


def _narrow(x: np.ndarray) -> np.ndarray:
    """Whole ns as int32 where every value fits (exact; readers widen them in their arithmetic), else int64."""
    i32 = np.iinfo(np.int32)
    if _one(x):  # (a view of one value stays one)
        return np.broadcast_to(_narrow(x[:1]), x.shape)
    if x.size == 0 or (int(x.min()) >= i32.min and int(x.max()) <= i32.max):
        return x.astype(np.int32)
    return x.astype(np.int64, copy=False)


#: host rows per block of `_segments`' search: its temporaries are a few arrays of a block, not of every host row
SEGMENT_BLOCK = 1 << 18


def _segments(trace: Trace, a_tid: np.ndarray, a_ts: np.ndarray, a_end: np.ndarray,
              code: np.ndarray) -> tuple[Rows, Callable[[], np.ndarray], Any]:
    """(the recorded host rows in an anchor's gap or own time, a function that returns the (thread, start) keys of
    every recorded row, unsorted, the key function (thread ids, times) -> keys: `_joins` searches them, and asks
    for the keys only when a thread may join another: most traces never)."""
    h = trace.host
    n_a = a_ts.size
    keep = (code >= 0) & notnull(h["ts"]).to_numpy()
    if n_a == 0 or not keep.any():
        z = np.zeros(0, np.int64)
        return (Rows(z.astype(np.uint32), z.astype(np.int8), z.astype(np.int32), z.astype(np.int8), z, z, a_ts),
                lambda: z, None)
    pos = np.flatnonzero(keep).astype(np.uint32 if keep.size < 2**32 else np.int64)
    del keep
    ts = filled(h["ts"], -1).to_numpy().astype(np.int64, copy=False)
    tid = filled(column(h, "tid"), -1).to_numpy().astype(np.int64, copy=False)
    blocks = [pos[b:b + SEGMENT_BLOCK] for b in range(0, pos.size, SEGMENT_BLOCK)]
    # thread codes: a handful of threads, so a hash unique then a search in the few (no sort of every row)
    tids = np.sort(pl.concat([pl.Series(np.unique(a_tid))] + [pl.Series(tid[p]).unique() for p in blocks])
                   .unique().to_numpy())
    base = min(int(a_ts.min()), *(int(ts[p].min()) for p in blocks))
    ta = np.searchsorted(tids, a_tid).astype(np.int64)
    ka = ta * (1 << 42) + (a_ts - base)

    def key_of(t_id: np.ndarray, t: np.ndarray) -> np.ndarray:  # (thread code << 42) + (t - base)
        return np.searchsorted(tids, t_id).astype(np.int64) * (1 << 42) + (t - base)

    # the first anchor of the thread starting after the row (its gap), or the anchor whose span holds it; block by
    # block (this search over every host row was the graph build's peak: ten arrays of every host row at once)
    # (each block's part of the rows' arrays in its final width: int32 where the block's values fit, and numpy's
    # concatenation of int32 and int64 blocks is what `_narrow` of the whole gives; no int64 array of every row)
    dur_all = filled(h["dur"], 0).to_numpy()
    got_sel, got_seg, got_in, got_rel, got_dur = [], [], [], [], []
    for p in blocks:
        r_ts = ts[p]
        th = np.searchsorted(tids, tid[p]).astype(np.int64)
        nxt = np.searchsorted(ka, th * (1 << 42) + (r_ts - base), side="right")
        cur = nxt - 1
        cc = np.maximum(cur, 0)
        inside = (cur >= 0) & (ta[cc] == th) & (r_ts < a_end[cc])
        nn = np.minimum(nxt, n_a - 1)
        same_nxt = (nxt < n_a) & (ta[nn] == th)
        seg = np.where(inside, cur, np.where(same_nxt, nxt, -1))
        ok = seg >= 0
        seg = seg[ok]
        got_sel.append(p[ok])
        got_seg.append(seg.astype(np.int32))
        got_in.append(np.where(inside[ok], 2, 0).astype(np.int8))
        got_rel.append(_narrow(r_ts[ok] - a_ts[seg]))
        got_dur.append(_narrow(dur_all[p[ok]]))
        del r_ts, th, nxt, cur, cc, inside, nn, same_nxt, seg, ok
    del ka, dur_all
    sel, seg = np.concatenate(got_sel), np.concatenate(got_seg)
    del got_sel, got_seg
    where = np.concatenate(got_in)
    del got_in
    rel = np.concatenate(got_rel)
    del got_rel
    dur = np.concatenate(got_dur)
    del got_dur
    rows = Rows(i=h["i"].to_numpy()[sel].astype(np.uint32, copy=False), kind=code[sel], seg=seg, where=where,
                dur=dur, rel=rel, base=a_ts)
    del sel, where, rel, dur

    def keys() -> np.ndarray:  # every recorded row's key (`pos`'s rows, in their order), as `key_of` gives
        return np.concatenate([key_of(tid[p], ts[p]) for p in blocks])

    return rows, keys, key_of
