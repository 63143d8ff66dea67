"""Python loops over items, read off the ops Python called: a short sequence of top-level ops that repeats back to
back many times on one thread (a loss summed sample by sample, an EMA or a manual update tensor by tensor).

Kineto records no tensor identities, so whether a loop's iterations depend on each other does not show; two
shapes of loop say they do not:
- `rows`: each iteration starts by taking a slice of the same tensor (`aten::slice`/`select`/`narrow`/`unbind` on
  inputs of one shape): a loop over the rows of a batch, which one batched call computes at once;
- `tensors`: every op is elementwise and the inputs' shapes change from one iteration to the next: a loop over a
  list of tensors (parameters, buffers), which the `torch._foreach_*` ops run as a few multi-tensor kernels.
- `recurrence`: a loop whose body calls a recurrent cell (`aten::gru_cell`, `aten::lstm_cell`, `aten::rnn_*_cell`),
  which takes the hidden state the previous iteration returned: a loop over time steps, never batched over its
  index (the sequence op, `nn.GRU` / `nn.LSTM`, runs the recurrence in one call), even where each iteration
  starts with a slice of one tensor (the input at time t).
A loop over rows whose iterations differ (a branch: `if random() < 0.5: img = img.flip(-1)`) does not repeat back
to back; it is found by its anchor, a slice of inputs of one shape taken once an iteration, as many times as the
input has rows along one dimension, when the iterations share most of their ops (`_anchored`). Other repeats (a stack of identical layers, each fed by the one before) are
not reported."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from ..frames import filled, take
from ..memo import per_trace
from ..model import Trace
from .rowid import positions

#: the fewest back-to-back iterations reported (inside one step), and the longest iteration (in top-level ops)
#: looked for
MIN_ITERATIONS = 16
MAX_PERIOD = 8
#: the longest median host time of a loop's ops: an eager op that launches a kernel costs tens of µs on the host; one
#: that takes longer does work of its own (a blocking copy, a collective) that batching the loop does not remove
MAX_OP_NS = 200_000
#: the most first-op shapes read as text at once (`_runs`: a batch of runs; a longer run alone)
GATHER_ROWS = 1 << 16
SLICING = ("aten::slice", "aten::select", "aten::narrow", "aten::unbind")
#: PyTorch's recurrent cells: each call takes the hidden state the previous one returned
RECURRENT_CELLS = frozenset({"aten::gru_cell", "aten::lstm_cell", "aten::rnn_tanh_cell", "aten::rnn_relu_cell"})
#: the kinds of loop one batched (or multi-tensor) call can replace: not a recurrence, whose steps run in turn
BATCHED_KINDS = ("rows", "tensors")
ELEMENTWISE = frozenset({
    "aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::div", "aten::div_",
    "aten::copy_", "aten::lerp", "aten::lerp_", "aten::zero_", "aten::fill_", "aten::addcmul_", "aten::addcdiv_",
    "aten::sqrt", "aten::sqrt_", "aten::mul_scalar", "aten::clamp_", "aten::neg", "aten::neg_",
})


def item_loops(trace: Trace, lo: int, hi: int, bounds: tuple[int, ...] = ()) -> pl.DataFrame:
    """[tid, kind, ops, iterations, host_ns, optional] of the `rows`/`tensors` loops whose iterations start in
    [lo, hi), one row per loop (its runs in every step together), longest host time first."""
    out = loop_runs(trace, lo, hi, bounds).filter(pl.col("kind").is_not_null())
    return (out.group_by("tid", "kind", "ops", maintain_order=True)
            .agg(pl.col("iterations").sum(), (pl.col("end") - pl.col("ts")).sum().alias("host_ns"),
                 pl.col("optional").list.explode(keep_nulls=False, empty_as_null=False).unique().sort())
            .sort("host_ns", descending=True))


def batched_spans(trace: Trace, lo: int, hi: int, bounds: tuple[int, ...] = ()) -> list[tuple[int, int, int]]:
    """(tid, ts, end) of what batching each `rows`/`tensors` loop in [lo, hi) takes off the host: every iteration
    after the first (their ops, launches and the Python between them), and for a loop over rows the backward's run
    of autograd nodes with as many iterations that follows it on another thread (the per-row backward)."""
    runs = loop_runs(trace, lo, hi, bounds)
    if runs.height == 0:
        return []
    out = []
    fwd = runs.filter(pl.col("kind").is_in(BATCHED_KINDS))
    bwd = runs.filter(pl.col("kind").is_null() & pl.col("ops").list.eval(
        pl.element().str.starts_with("autograd::engine::evaluate_function:")).list.all())
    for r in fwd.iter_rows(named=True):  # (one per run of a loop: a few a step)
        out.append((r["tid"], r["second"], r["end"]))
        if r["kind"] == "rows":
            b = bwd.filter((pl.col("tid") != r["tid"]) & (pl.col("iterations") == r["iterations"])
                           & (pl.col("ts") >= r["end"])).head(1)
            out += [(int(b["tid"][0]), int(b["second"][0]), int(b["end"][0]))] if b.height else []
    return out


@per_trace
def loop_runs(trace: Trace, lo: int, hi: int, bounds: tuple[int, ...] = ()) -> pl.DataFrame:
    """[tid, kind, ops, iterations, ts, second, end, optional] of every back-to-back repeat in [lo, hi) that no step
    boundary (`bounds`: the steps' starts) cuts (`second`: the second iteration's start), by thread and start; kind
    null for a repeat that may be a chain (a stack of layers) or whose ops do work of their own (`MAX_OP_NS`); `ops`
    the ops every iteration runs, `optional` those only some run (a loop found by its anchor, `_anchored`)."""
    h = trace.host
    ops = h.lazy().filter((pl.col("cat") == "cpu_op") & (pl.col("ts") >= lo) & (pl.col("ts") < hi)
                          & ~pl.col("name").str.starts_with("ProfilerStep"))
    # the top-level ops: a parent that is no op (or none), decided from the ops' parents alone before their other
    # columns are read (one frame of the top-level ops, not one of every op and its filtered copy: at 10 M tiny
    # events ~140 MiB at the rules' peak). The parent's row is found by position (no hash join of every op onto
    # every host row: at 10 M events the join was a phase's peak)
    parent = ops.select("parent").collect()["parent"]
    pos = positions(h, parent)
    if pos is None:  # (ids with nulls: the hash join)
        parents = h.select(pl.col("i").alias("parent"), pl.col("cat").alias("_pcat"))
        nested = parent.to_frame().join(parents, on="parent", how="left")["_pcat"] == "cpu_op"
    else:
        nested = take(h["cat"] == "cpu_op", pos)  # (a mask of the host rows, gathered: no text per op)
    del parent, pos
    keep = ~filled(nested, False)
    del nested
    top = (ops if keep.all() else ops.filter(pl.lit(keep))).select("tid", "name", "ts", "end", "input_dims").collect()
    del keep
    if not _strictly_sorted(top["tid"].to_numpy(), top["ts"].to_numpy()):  # (else the sort is the order it has:
        top = top.sort("tid", "ts", maintain_order=True)  # a single thread's ops, in time order, are; no copy of every op's columns)
    rows = []
    for (tid,), g in top.group_by("tid", maintain_order=True):  # (one per thread: a handful)
        step = np.searchsorted(np.asarray(bounds, np.int64), g["ts"].to_numpy(), side="right")
        codes = g["name"].cast(pl.Categorical).to_physical().to_numpy()  # (the names coded once for both finders)
        exact = _runs(int(tid), g, step, codes)
        rows += _merge(exact, _anchored(int(tid), g, step, exact, codes))
    return pl.DataFrame(rows, schema={"tid": pl.Int64, "kind": pl.String, "ops": pl.List(pl.String),
                                      "iterations": pl.Int64, "ts": pl.Int64, "second": pl.Int64, "end": pl.Int64,
                                      "optional": pl.List(pl.String)},
                        orient="row").sort("tid", "ts", maintain_order=True)


def _strictly_sorted(tid: np.ndarray, ts: np.ndarray) -> bool:
    """Whether the rows are in (tid, ts) order with no two equal (so that any sort by them keeps the order)."""
    if tid.size < 2:
        return True
    up = tid[1:] > tid[:-1]
    return bool((up | ((tid[1:] == tid[:-1]) & (ts[1:] > ts[:-1]))).all())


def _runs(tid: int, g: pl.DataFrame, step: np.ndarray, codes: np.ndarray) -> list[tuple]:
    """The thread's back-to-back repeats of a sequence of 1..MAX_PERIOD ops inside one step (`step`: each op's;
    `codes`: each op's name as a code), each kept once (its shortest period)."""
    ts, end = g["ts"].to_numpy(), g["end"].to_numpy()
    n, used, out = codes.size, np.zeros(codes.size, bool), []
    found: list[tuple[int, int, int, int]] = []  # (first op, iterations, period, last op) of each run
    for p in range(1, MAX_PERIOD + 1):
        if n <= p * MIN_ITERATIONS:
            break
        same = np.r_[(codes[p:] == codes[:-p]) & (step[p:] == step[:-p]), False]
        edge = np.diff(np.r_[0, same.astype(np.int8), 0])
        starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
        iters = (ends - starts) // p + 1  # iterations: the run of equal ops p apart spans k - 1 of them
        keep = iters >= MIN_ITERATIONS  # (the long runs alone reach the loop below: a few a step)
        for s, k in zip(starts[keep].tolist(), iters[keep].tolist(), strict=True):
            if used[s]:
                continue
            last = s + k * p - 1
            used[s:last + 1] = True
            found.append((s, k, p, last))
    # the runs' ops and first ops' shapes gathered a batch of runs at once (a polars call per run was most of the
    # time: ~1000 runs on a 480-step trace), a batch's shapes at most GATHER_ROWS texts (all of a 10 M-event
    # trace's runs at once held ~70 MiB more at the rules' peak)
    i = 0
    while i < len(found):
        j, rows = i, 0
        while j < len(found) and (j == i or rows + found[j][1] <= GATHER_ROWS):
            rows += found[j][1]
            j += 1
        batch = found[i:j]
        i = j
        ops_at = np.concatenate([np.arange(s, s + p) for s, _k, p, _last in batch])
        first_at = np.concatenate([np.arange(s, s + k * p, p) for s, k, p, _last in batch])
        names = g["name"].gather(ops_at).to_list()
        # (each iteration's first op's input shapes; "": not recorded)
        shapes = g["input_dims"].gather(first_at).cast(pl.String).fill_null("").to_numpy()
        a = b = 0
        for s, k, p, last in batch:
            ops, dims = names[a:a + p], shapes[b:b + k]
            a, b = a + p, b + k
            short = float(np.median(end[s:last + 1] - ts[s:last + 1])) <= MAX_OP_NS
            kind = _kind(ops, dims) if short else None
            out.append((tid, kind, ops, k, int(ts[s]), int(ts[s + p]), int(end[last]), s, last + 1))
    return out


def _kind(ops: list[str], first_dims: np.ndarray) -> str | None:
    """`recurrence`, `rows`, `tensors` or None (a repeat whose iterations may depend on each other), from the
    iteration's ops and the input shapes of its first op in each iteration."""
    if RECURRENT_CELLS.intersection(ops):
        return "recurrence"
    if ops[0] in SLICING and np.unique(first_dims).size == 1 and first_dims[0]:
        return "rows"
    if all(o in ELEMENTWISE for o in ops) and np.unique(first_dims).size > 1:
        return "tensors"
    return None


#: a loop whose iterations differ (a branch in its body: `if random() < p: img = img.flip(-1)`) is matched by its
#: anchor, a slice of inputs of one shape taken once an iteration: consecutive anchors at most MAX_BODY top-level
#: ops apart (an item's preprocessing or loss: a few dozen ops), whose iterations share a core of ops (each op
#: counted as often as the iteration holding it least) that is at least CORE_SHARE of every iteration: the optional
#: ops are a branch of one body, not another computation
MAX_BODY = 32
CORE_SHARE = 0.75


def _anchored(tid: int, g: pl.DataFrame, step: np.ndarray, exact: list[tuple], name_codes: np.ndarray) -> list[tuple]:
    """The thread's `rows` loops whose iterations differ by optional ops, found from their anchors: the same slicing
    op on inputs of one shape at least MIN_ITERATIONS times in one step, each at most MAX_BODY ops after the last,
    outside the loops `exact` found. The loop visits every row: its iterations are as many as the sliced input
    has along one of its dimensions (`for i in range(x.shape[0]): x[i]`), where a stack of layers that each slice
    their own input (timm's attention: `q, k, v = qkv.unbind(0)`) runs once a layer. An iteration starts at the
    ops before the anchor common to every iteration (`t = randint(...); img = x[i, t:]` slices after its
    randint)."""
    names = g["name"]
    anchor = np.flatnonzero(names.is_in(SLICING).to_numpy())
    if anchor.size < MIN_ITERATIONS:
        return []
    codes = name_codes.astype(np.int64)
    dims = g["input_dims"].to_physical().fill_null(-1).to_numpy().astype(np.int64)
    taken = np.zeros(codes.size, bool)
    for r in exact:
        if r[1] is not None:
            taken[r[7]:r[8]] = True
    # anchors by (name, input shape, step), in order: a run of them close together is a candidate loop
    a = anchor[np.lexsort((anchor, step[anchor], dims[anchor], codes[anchor]))]
    key = np.stack([codes[a], dims[a], step[a]], 1)
    link = np.r_[(key[1:] == key[:-1]).all(1) & (np.diff(a) <= MAX_BODY), False]
    edge = np.diff(np.r_[0, link.astype(np.int8), 0])
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    keep = ends - starts + 1 >= MIN_ITERATIONS  # (the long runs alone reach the loop below: a few a step)
    starts, ends = starts[keep], ends[keep]
    first_op = np.argsort(a[starts], kind="stable")  # (in the thread's order: where several anchors mark one loop,
    out: list[tuple] = []                            # the first one's run is kept)
    ts, end = g["ts"].to_numpy(), g["end"].to_numpy()
    starts, ends = starts[first_op], ends[first_op]
    # the first anchor's shapes of each candidate alone ("": not recorded; not a text per op)
    shape = g["input_dims"].gather(a[starts]).cast(pl.String).fill_null("").to_list()
    for s, e, first_shape in zip(starts.tolist(), ends.tolist(), shape, strict=True):
        at = a[s:e + 1]  # the anchors, one an iteration
        if taken[at[0]:at[-1] + 1].any() or at.size not in _sizes(first_shape):
            continue
        r = _iterations(codes, at, step)
        if r is None:
            continue
        first, second, last, core, optional = r
        taken[first:last + 1] = True
        short = float(np.median(end[first:last + 1] - ts[first:last + 1])) <= MAX_OP_NS
        body = names.gather(core).to_list()
        kind = ("recurrence" if RECURRENT_CELLS.intersection(body) else "rows") if short else None
        out.append((tid, kind, body, at.size, int(ts[first]),
                    int(ts[second]), int(end[last]), sorted(set(names.gather(optional).to_list()))))
    return out


def _sizes(input_dims: str) -> list[int]:
    """The sizes of the first input's dimensions, from the recorded shapes ("": not recorded)."""
    try:
        first = json.loads(input_dims)[0] if input_dims else []
    except (ValueError, IndexError, TypeError):
        return []
    return [d for d in first if isinstance(d, int)] if isinstance(first, list) else []


def _iterations(codes: np.ndarray, at: np.ndarray,
                step: np.ndarray) -> tuple[int, int, int, np.ndarray, np.ndarray] | None:
    """(first op, the second iteration's first op, last op, the first iteration's core ops, one position of each
    optional op) of the loop anchored at `at`, or None when its iterations share less than CORE_SHARE of their
    ops."""
    gaps = np.diff(at)
    pos = np.arange(at[0], at[-1])  # (the iterations whose extent shows: anchor to next anchor)
    it = np.searchsorted(at, pos, side="right") - 1
    k = int(codes.max()) + 1
    pair, cnt = np.unique(it * k + codes[pos], return_counts=True)
    code = pair % k
    # each op's count in the iteration holding it least (0 where one lacks it)
    least = np.full(k, np.iinfo(np.int64).max)
    np.minimum.at(least, code, cnt)
    least = np.where(np.bincount(code, minlength=k) == at.size - 1, least, 0)
    if least.sum() < CORE_SHARE * gaps.max():
        return None
    # (an op some iteration holds more often than the core does)
    extra = np.flatnonzero(np.bincount(code, weights=cnt, minlength=k) > least * (at.size - 1))
    optional = pos[np.unique(codes[pos], return_index=True)[1]]
    optional = optional[np.isin(codes[optional], extra)]
    # the ops before each anchor that every iteration ends with and the first one starts with
    lead = 0
    while lead < gaps.min() - 1 and at[0] > lead and step[at[0] - lead - 1] == step[at[0]]:
        c = codes[at - lead - 1]
        if not (c == c[0]).all():
            break
        lead += 1
    first, second = int(at[0]) - lead, int(at[1]) - lead
    # the last iteration's end does not show: it holds as many ops as the shortest, inside the step
    last = min(int(at[-1]) - lead + int(gaps.min()) - 1, codes.size - 1)
    last = int(at[-1]) + int(np.flatnonzero(step[at[-1]:last + 1] == step[at[-1]]).max())
    return first, second, last, _core_at(codes, first, second, least), optional


def _core_at(codes: np.ndarray, lo: int, hi: int, least: np.ndarray) -> np.ndarray:
    """The positions in [lo, hi) of the core's ops (`least`: each op's count in it), first occurrences first."""
    pos = np.arange(lo, hi)
    c = codes[pos]
    # (each op's occurrence number among the same op's in [lo, hi): kept while it is within the core's count)
    order = np.argsort(c, kind="stable")
    rank = np.empty(c.size, np.int64)
    sc = c[order]
    starts = np.r_[0, np.flatnonzero(sc[1:] != sc[:-1]) + 1]
    rank[order] = np.arange(c.size) - np.repeat(starts, np.diff(np.r_[starts, c.size]))
    return pos[rank < least[c]]


def _merge(exact: list[tuple], anchored: list[tuple]) -> list[tuple]:
    """Both finders' runs (exact: with their op positions, left out), less the exact repeats inside an anchored
    loop; `optional` ops: those some iterations of an anchored loop lack (none for an exact repeat)."""
    spans = [(r[4], r[6]) for r in anchored]
    keep = [(*r[:7], []) for r in exact if r[1] is not None or not any(lo <= r[4] <= hi for lo, hi in spans)]
    return keep + anchored
