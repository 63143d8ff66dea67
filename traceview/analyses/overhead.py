"""The profiler's own cost, as a transformation of the replay graph: what a step would take without the profiler.

Under the profiler the whole dispatching host thread runs slower (RecordFunction with shapes on every op, CUPTI
callbacks on every runtime/driver call, Python under them), not only by the rows it keeps: host-bound steps run
~1.9x slower traced whether they record 45 rows (a compiled step) or 2 000 (eager TinyGPT). The transform takes
HOST_SHARE off every host interval of the graph (up to replay.HOST_SHARE_MAX_NS of it: longer ones hold work of
their own) and COST_US off each recorded row of a kind (Python events with stacks: time the unprofiled host never
spends, taken off before the share scales what is left), and the graph is replayed
(analyses.replay): on a host-bound step the step shortens, on a GPU-bound step the device's own chain holds it.
One cost is read from the trace itself rather than fitted: the collector's `module::` ranges (`traceview collect
--modules`) are opened by Python hooks only while the profiler records, so the host time around each range, up
to the floor of that time over the trace's ranges (`module_hook_cuts`), is the profiler's.
The estimate is the traced step less the replayed saving, bounded by construction: never above the traced step
(a transform only takes time off), never below the GPU's busy time per step.

How much of the dispatch time is the profiler's differs between processes (one training step needs 0.45-0.52 in
the processes of one recording session, 0.51-0.57 in another's); the trace says which through its kernel-launch
calls: each recorded launch (`cudaLaunchKernel`, or the driver's `cuLaunchKernel`/`cuLaunchKernelEx` of Triton and
cuBLAS) holds the driver's launch and the profiler's CUPTI callbacks around it, and the floor of their durations
(`launch_floor_us`) runs from ~4 µs to ~8.5 µs over the bundled H200 runs. The
share is HOST_SHARE at LAUNCH_REF_US and rises by LAUNCH_SLOPE per µs above it (`host_share`); a trace without
enough such calls keeps HOST_SHARE.

Host time the share does not scale still pays for the ops recorded in it: a CPU-only trace has no runtime call to
anchor its host, so each step is one host interval of its ops' own work, and a long stretch of CPU work in a GPU
step (a DataLoader without workers, a compilation) is one too. There each recorded op that starts more than
replay.HOST_SHARE_MAX_NS into its interval costs LONG_OP_FLOORS times the trace's row floor (`row_floor_us`: the
floor of the host gaps the profiler's callbacks leave around each recorded op). The floor follows the host and the
ops (0.4-0.5 µs on a fast host, ~1 µs on a slower one recording the same kind of training step), as the cost per
op does (0.5-1.1 µs on the fast host, 1.4-1.6 µs on the slower): a constant cost per op cannot serve both. Without
it a CPU-only step kept all but the share of its first millisecond (11.5 ms traced, 11.0 estimated, 7.0 measured
for an optimizer step of 2 800 recorded ops: docs/replay.md).

HOST_SHARE, LAUNCH_SLOPE, LONG_OP_FLOORS and COST_US are fitted by tools/fit_overhead.py on the calibration runs
named in tools/overhead_split.json (the collector's CUDA-event unprofiled step as ground truth; a later set of runs held out);
ERROR_BAND is about the 90th-percentile relative error on the runs not fitted on (docs/replay.md has the tables).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ..engine import CHAIN
from ..frames import filled, omit, pick
from ..memo import per_trace
from ..model import RUNTIME_CATS, Trace
from .classify import kernel_bound
from .layers import ATTR_PREFIX
from .replay import Transform, replay
from .replay_graph import KINDS
from .rowid import by_id
from .timeline import busy_per_window, step_busy
from .tree import ancestor_ids

#: host cost of one recorded event (µs), fitted by tools/fit_overhead.py (calibration runs of tools/overhead_split.json)
COST_US = {"op": 0.0, "runtime": 0.0, "python": 1.5}
#: share of the host thread's dispatch time that is the profiler's (its callbacks on every op, call and Python
#: frame slow the whole thread, not only the recorded rows) in a trace whose launch floor (`launch_floor_us`) is
#: LAUNCH_REF_US, fitted with COST_US; intervals over replay.HOST_SHARE_MAX_NS are scaled only up to it
HOST_SHARE = 0.48
#: how much the share rises per µs of the trace's launch floor above LAUNCH_REF_US, fitted with HOST_SHARE: a
#: process whose profiled launch calls cost more (the profiler's CUPTI callbacks around each call) pays more of its
#: dispatch time to the profiler (`host_share`)
LAUNCH_SLOPE = 0.02
#: the profiler's cost of a recorded op that starts beyond the first replay.HOST_SHARE_MAX_NS of its host interval
#: (host time the share does not scale: a CPU-only step, whose ops are its work; a long stretch of CPU work), in
#: units of the trace's row floor (`row_floor_us`), fitted with HOST_SHARE: each op's enter and exit callbacks
#: (RecordFunction, its input shapes) cost about this many times the gaps they leave around the recorded rows
LONG_OP_FLOORS = 1.0
#: quantile of the host gaps before and after the recorded ops taken as the floor (`row_floor_us`), and the fewest
#: ops that make one
ROW_FLOOR_Q, ROW_MIN_OPS = 0.1, 20
#: the launch floor (µs) at which the share is HOST_SHARE: about the calibration runs' median floor (a reference
#: point, not fitted: moving it moves the fitted HOST_SHARE with it)
LAUNCH_REF_US = 5.5
#: the calls whose recorded duration is the launch floor: the CUDA runtime's kernel launch (an eager op's) and the
#: driver's (Inductor's Triton kernels, cuBLAS), pooled: each holds one launch and the profiler's CUPTI callbacks
#: around it. A compiled step launches mostly through the driver, and its few runtime launches (eager code between
#: graph breaks, each after a stretch of Python) cost more than the floor: a compiled GPT-2 with an `.item()` hook
#: on each block read 12.0 µs from its 21, 8.1 µs with its 156 driver launches (docs/replay.md; a CUDA graph's
#: launch, `cudaGraphLaunch`, is no kernel's)
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx")
#: quantile of those calls' recorded durations taken as the floor (the calls with no queueing or work beside them),
#: and the fewest calls that make one
LAUNCH_FLOOR_Q, LAUNCH_MIN_CALLS = 0.1, 20
#: quantile of the host gaps around the trace's `module::` ranges taken as one range's hook cost: the floor (the
#: hooks with no model code beside them); a range is never charged more than its own gaps
MODULE_FLOOR_Q = 0.1
#: relative error band of the estimate: about the 90th percentile of |estimate / measured - 1| over every run not
#: fitted on (held-out 14 %, the other evaluation runs 26 %: docs/replay.md)
ERROR_BAND = 0.3
#: |traced / profiled CUDA-event step - 1| above which a run's trace is not the steps the collector timed: the
#: host-speed noise between processes of the same workload (collected2/MANIFEST.md: up to ~25 %)
TRACE_TOL = 0.25


def profiler_transform(trace: Trace | None = None, cost_us: dict[str, float] | None = None) -> Transform:
    """The profiler's recording cost as a Transform: a share of the host's dispatch time (`host_share`), a share of
    the host intervals' part beyond replay.HOST_SHARE_MAX_NS (`long_share`, else 0: only a measurement sets it,
    `measured_transform`), a cost per recorded host row of each kind, and the module hooks' host time measured in
    the trace (`module_hook_cuts`). `cost_us` holds the costs per kind and `host_share` (a fixed share) or
    `host_share` and `launch_slope` (the share at LAUNCH_REF_US and its slope: `host_share` of the trace); without
    it, the fitted model."""
    c = dict(cost_us or {**COST_US, "host_share": HOST_SHARE, "launch_slope": LAUNCH_SLOPE})
    share = float(c.pop("host_share", HOST_SHARE))
    long = float(c.pop("long_share", 0.0))
    floors = float(c.pop("long_op", LONG_OP_FLOORS))
    row = row_floor_us(trace) if trace is not None and floors else None
    long_cost = {"op": round(floors * row, 3)} if row else {}  # (whole ns per row: the replay's sums are exact)
    if "launch_slope" in c:
        slope = float(c.pop("launch_slope"))
        share = host_share(trace, share, slope) if trace is not None else share
    cuts = module_hook_cuts(trace) if trace is not None else {}
    return Transform("profiler cost", cost_us=c, host_share=share, long_share=long, long_cost_us=long_cost,
                     host_cut=cuts)


def share_transform(trace: Trace, share: float, long_share: float = 0.0) -> Transform:
    """The profiler-cost transform with a fixed host share (and long share) in place of the fitted one, the per-row
    costs as fitted: what the solve searches over (`_solve`), and at SHARE_MAX the host as fast as the model allows
    (the device's own chain: `fixes.if_host_keeps_up_us`)."""
    return profiler_transform(trace, {**COST_US, "host_share": share, "long_share": long_share})


@per_trace
def launch_floor_us(trace: Trace) -> float | None:
    """The floor of the trace's recorded kernel-launch calls (µs): the LAUNCH_FLOOR_Q quantile of the durations of
    its LAUNCH_CALLS, None with fewer than LAUNCH_MIN_CALLS. Under the profiler each call holds the driver's launch
    and the profiler's CUPTI callbacks around it; the floor (no queueing, no work beside it) is that cost alone."""
    # (the two columns read, then the filter: a filter copies every column of the frame it is given)
    d = pick(trace.host, "name", "dur").filter(pl.col("name").is_in(LAUNCH_CALLS) & pl.col("dur").is_not_null())["dur"]
    return float(d.quantile(LAUNCH_FLOOR_Q)) / 1000 if d.len() >= LAUNCH_MIN_CALLS else None


@per_trace
def row_floor_us(trace: Trace) -> float | None:
    """The floor of the host gaps the profiler leaves around each recorded op (µs): the ROW_FLOOR_Q quantile of
    the gap from the last recorded boundary (a row's start or end on its thread) before an op's start, plus that
    of the gap from its end to the next boundary; None with fewer than ROW_MIN_OPS ops. The profiler's callbacks
    run around each op's timestamps (entering it: the RecordFunction and its input shapes; leaving it), so on a
    thread that records op after op the shortest gaps are those callbacks alone, which scale with the host's
    speed: ~0.4 µs on a fast host, ~0.9 µs on a slower one, recording the same ops."""
    h = pick(trace.host, "cat", "tid", "ts", "end").filter(
        pl.col("ts").is_not_null() & pl.col("end").is_not_null() & pl.col("tid").is_not_null())
    op = h.select(pl.col("cat").is_in(KINDS["op"])).to_series().to_numpy()
    h = omit(h, "cat")
    if int(op.sum()) < ROW_MIN_OPS:
        return None
    pre, has_pre, post, has_post = _gaps_around(h, op)
    pre, post = pre[has_pre], post[has_post]
    if pre.size < ROW_MIN_OPS or post.size < ROW_MIN_OPS:
        return None
    return (float(np.quantile(pre, ROW_FLOOR_Q)) + float(np.quantile(post, ROW_FLOOR_Q))) / 1000


def host_share(trace: Trace, share: float = HOST_SHARE, slope: float = LAUNCH_SLOPE) -> float:
    """The share of the host's dispatch time that is the profiler's in this trace: `share` where the launch floor
    (`launch_floor_us`) is LAUNCH_REF_US, `slope` more per µs above it (less below), within [0, SHARE_MAX]; `share`
    where the trace has no floor (no kernel launches: a CPU-only or a compiled/graph-only trace)."""
    floor = launch_floor_us(trace)
    if floor is None:
        return share
    return min(max(share + slope * (floor - LAUNCH_REF_US), 0.0), SHARE_MAX)


@per_trace
def backward_node_host_ns(trace: Trace) -> float:
    """Unprofiled host time of one autograd node that launches one elementwise kernel (a `ToCopyBackward0`, a
    `MulBackward0`): the trace's median `autograd::engine::evaluate_function` span of such nodes, less the
    profiler's share (`host_share`); `eager_op_host_ns` where the trace has none (no backward). A node is more than
    the op it runs: the engine's evaluation around it (its inputs' validation, the gradient's accumulation into the
    next node's buffer). The unit a fix's added backward work is priced in (autocast's gradient casts): in the BF16
    twins' traces a `ToCopyBackward0` node took 38-46 µs traced, as their own one-kernel elementwise nodes did
    (37-43 µs), about twice a forward cast (18-20 µs); the FP32 traces' such nodes 1.8-2.3x their eager op."""
    h = trace.host
    node = h["name"].str.starts_with("autograd::engine::evaluate_function").fill_null(False).to_numpy()
    if not node.any():
        return eager_op_host_ns(trace)
    k = kernel_bound(trace).filter(pl.col("op").is_not_null())
    top = ancestor_ids(h, k["op"].cast(pl.UInt32), node, include_self=True)
    got = _one_kernel_host_ns(trace, k.select("category", op=pl.Series(top)).filter(pl.col("op") >= 0))
    return eager_op_host_ns(trace) if got is None else got


@per_trace
def eager_op_host_ns(trace: Trace) -> float:
    """Unprofiled host time of one eager op that launches one elementwise kernel (a cast, a `mul`): the trace's
    median host time of such ops (`classify.kernel_bound`'s kernels), less the profiler's share of it
    (`host_share`: the fitted share at the trace's launch floor). The unit a fix's added host work is priced in;
    once per trace (the rules that price with it share it)."""
    got = _one_kernel_host_ns(trace, kernel_bound(trace).filter(pl.col("op").is_not_null()))
    return got or 0.0


def _one_kernel_host_ns(trace: Trace, k: pl.DataFrame) -> float | None:
    """The median unprofiled host time of the host rows that launch exactly one kernel, an elementwise one: `k` is
    the kernels' [op, category], `op` the host row each is charged to (the launching op, or the autograd node above
    it); the rows' recorded durations less the profiler's share (`host_share`). None: no such row."""
    one = k.group_by("op").agg(pl.len().alias("n"), pl.col("category").first())
    one = one.filter((pl.col("n") == 1) & (pl.col("category") == "elementwise"))["op"]
    if one.len() == 0:
        return None
    dur = by_id(trace.host, one.cast(pl.UInt32), "dur")["dur"]
    return float(dur.median() or 0.0) * (1.0 - host_share(trace))


def _gaps_around(h: pl.DataFrame, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(gap before, whether there is one, gap after, whether there is one), ns, of the host rows of `h` (rows with
    ts, end and tid) that `m` selects: from the last row boundary (a row's start or end) strictly before the row's
    start, and to the first strictly after its end, on the row's own thread."""
    tid = h["tid"].to_numpy().astype(np.int64, copy=False)
    lo_tid, hi_tid = int(tid.min()), int(tid.max())
    # thread codes: the thread ids themselves, offset, when they span fewer than 2**20 values (OS thread ids: the
    # keys stay under 2**62 and sort as the dense ranks would); else their dense ranks (a sort of every row)
    code = tid - lo_tid if hi_tid - lo_tid < 1 << 20 else h["tid"].rank("dense").cast(pl.Int64).to_numpy()
    code = code << 42  # (a new array: a frame's numpy view is read-only)
    base = int(h["ts"].min())

    # (thread, time) as one sortable integer, each key built in place (a whole-trace int64 array is 8 B a row)
    def key(col: str, code: np.ndarray) -> np.ndarray:
        k = h[col].to_numpy().astype(np.int64)  # (a copy: written below)
        k -= base
        k += code
        return k

    kts = key("ts", code)
    bounds = np.empty(2 * kts.size, np.int64)
    bounds[:kts.size] = kts
    ks = kts[m]
    del kts
    kend = key("end", code)
    del code
    bounds[bounds.size - kend.size:] = kend
    ke = kend[m]
    del kend
    # in place, stable: long sorted runs (each thread's rows in time order) sort ~2x faster by timsort than by
    # quicksort, and its buffer (half the array) is no larger than the keys freed above
    bounds.sort(kind="stable")
    j = np.searchsorted(bounds, ks, side="left") - 1
    prev = bounds[np.maximum(j, 0)]
    k = np.searchsorted(bounds, ke, side="right")
    nxt = bounds[np.minimum(k, bounds.size - 1)]
    return (ks - prev, (j >= 0) & ((prev >> 42) == (ks >> 42)),
            nxt - ke, (k < bounds.size) & ((nxt >> 42) == (ke >> 42)))


@per_trace
def module_hook_cuts(trace: Trace) -> dict[int, int]:
    """{host row `i` of each `module::` range: ns of host time its hooks cost under the profiler}.

    The collector's module annotator (`traceview collect --modules`) opens a `record_function` range from a
    forward pre-hook and closes it from a forward hook, only while the profiler records: each range costs two
    Python hook calls and two dispatched ops that the unprofiled run does not pay. That time is the host gap
    between the range's start and the recorded row before it, plus the gap between its end and the row after it
    (on its thread), less whatever model code runs there; the floor of those gaps over the trace's ranges
    (MODULE_FLOOR_Q) is the hooks alone, so each range is charged min(its gaps, the floor)."""
    # the annotations first (a string test on every host row of a large trace costs more than the rest)
    tids = (pick(trace.host, "cat", "name", "tid").lazy().filter(pl.col("cat") == "user_annotation")  # (one query:
            .filter(pl.col("name").str.starts_with(ATTR_PREFIX))  # CHAIN keeps the two filters, in this order)
            .select(pl.col("tid").drop_nulls().unique()).collect(**CHAIN)["tid"])
    if tids.len() == 0:
        return {}
    h = trace.host.select("i", "cat", "name", "tid", "ts", "end").filter(  # (the columns read, not every one)
        pl.col("tid").is_in(tids.implode()) & pl.col("ts").is_not_null() & pl.col("end").is_not_null()
    )
    mod = pl.col("cat").eq("user_annotation") & pl.col("name").str.starts_with(ATTR_PREFIX)
    m = h.select(mod).to_series().to_numpy()
    pre, has_pre, post, has_post = _gaps_around(h, m)
    pre, post = np.where(has_pre, pre, 0), np.where(has_post, post, 0)
    gaps = pre + post
    floor = float(np.quantile(gaps, MODULE_FLOOR_Q))
    cost = np.minimum(gaps, floor).astype(np.int64)
    ids = h["i"].to_numpy()[m].astype(np.int64)
    return dict(zip(ids[cost > 0].tolist(), cost[cost > 0].tolist(), strict=True))


def saving(
    trace: Trace, steps: pl.DataFrame, transform: Transform, base: Sequence[Transform] | None = None
) -> np.ndarray:
    """Per-step saving (ns) of `transform` in unprofiled terms: replay(profiler cost removed) − replay(that and
    the transform). `base` replaces the profiler-cost transform (e.g. other fixes already applied)."""
    b = list(base) if base is not None else [profiler_transform(trace)]
    return replay(trace, steps, b) - replay(trace, steps, [*b, transform])


def events_per_step(trace: Trace, steps: pl.DataFrame) -> dict[str, float]:
    """Recorded host events per step by kind (op: cpu_op and user annotations; runtime; python), counted in the
    steps' host span."""
    n = steps.height
    if n == 0:
        return {k: 0.0 for k in COST_US}
    lo, hi = int(steps["cpu_ts"].min()), int(steps["cpu_end"].max())
    cats = {"op": ["cpu_op", "user_annotation"], "runtime": list(RUNTIME_CATS), "python": ["python_function"]}
    # one pass of boolean sums (a group-by of every host row's category string costs ~1.6x)
    inside = (pl.col("ts") >= lo) & (pl.col("ts") < hi)
    got = trace.host.select(**{k: (inside & pl.col("cat").is_in(c)).sum() for k, c in cats.items()}).row(
        0, named=True
    )
    return {k: round(got[k] / n, 1) for k in COST_US}


def gpu_busy_per_step(trace: Trace, steps: pl.DataFrame, gpu: pl.DataFrame | None = None) -> np.ndarray:
    """GPU busy ns of each step (the busiest device), in the order of `steps`; of `gpu` (the trace's activity with
    some durations changed: `job_replay.unprofiled_estimates`) when given."""
    busy = step_busy(trace, steps) if gpu is None else busy_per_window(gpu, steps)
    if busy.height == 0:
        return np.zeros(steps.height)
    b = busy.lazy().group_by("step").agg(pl.col("busy").max())
    got = pick(steps, "step").lazy().join(b, on="step", how="left").collect(**CHAIN)["busy"]  # (one query)
    return filled(got, 0).to_numpy().astype(np.float64)


def unprofiled_steps(
    trace: Trace, steps: pl.DataFrame, cost_us: dict[str, float] | None = None
) -> np.ndarray:
    """Estimated unprofiled duration (ns) of each step: traced period − replayed saving of the profiler-cost
    transform, within [GPU busy time, traced period]. The saving is the means' difference, shared over the steps
    in proportion to their traced periods: a faster host shortens the first steps and lengthens the last (its
    device work still drains), so per-step differences clipped at zero would bias the mean low."""
    r0 = replay(trace, steps)
    r1 = replay(trace, steps, [profiler_transform(trace, cost_us)])
    return from_replays(trace, steps, r0, r1)


def from_replays(trace: Trace, steps: pl.DataFrame, r0: np.ndarray, r1: np.ndarray,
                 busy: np.ndarray | None = None) -> np.ndarray:
    """Estimated unprofiled duration (ns) of each step from its replayed periods as recorded (`r0`) and with the
    profiler's cost taken off (`r1`): a single trace's own replay (`unprofiled_steps`) or its rank's in the job
    replay (`job_replay.unprofiled_estimates`), the same arithmetic for both; at least the steps' GPU busy time
    (`busy`, else `gpu_busy_per_step`)."""
    traced = (steps["end"] - steps["ts"]).to_numpy().astype(np.float64)
    total = float(traced.sum())
    saved = min(max(float(np.mean(r0) - np.mean(r1)), 0.0), float(traced.mean())) if traced.size else 0.0
    est = traced - (saved * traced.size * traced / total if total > 0 else 0.0)
    floor = gpu_busy_per_step(trace, steps) if busy is None else busy
    return np.clip(est, np.minimum(floor, traced), traced)


#: bisection steps of `measured_transform` (each one replay; the share is found to ~0.1 % of [0, SHARE_MAX])
CALIBRATION_ITERS = 10
SHARE_MAX = 0.95
#: a replayed step within this share of the device-bound floor (the replay at SHARE_MAX) is at the floor
FLOOR_TOL = 0.01


def measured_transform(
    trace: Trace, steps: pl.DataFrame, unprofiled_ns: float | None, profiled_ns: float | None = None
) -> Transform:
    """The profiler-cost transform for pricing fixes: where the collector measured the unprofiled step
    (`unprofiled_ns`, the CUDA-event median of a `traceview collect` run), the host share whose replay reproduces
    it (COST_US kept; the measurement is the ground truth the fitted share only approximates), else the fitted
    transform. `profiled_ns` (the collector's profiled CUDA-event step) says whether the trace is the steps it
    timed (within TRACE_TOL): only then may the measurement deflate the host intervals beyond
    replay.HOST_SHARE_MAX_NS (`_solve`). The estimate of the `profiling` section never uses it: that is what the
    measurement tests."""
    if not unprofiled_ns or steps.height == 0:
        return profiler_transform(trace)
    key = (
        tuple(int(v) for v in steps["ts"].to_list()),
        tuple(int(v) for v in steps["end"].to_list()),
        float(unprofiled_ns),
        float(profiled_ns or 0.0),
    )
    solved = _solved(trace)
    if key not in solved:
        traced = float((steps["end"] - steps["ts"]).mean())
        timed = bool(profiled_ns) and abs(traced / float(profiled_ns) - 1) <= TRACE_TOL
        solved[key] = _solve(trace, steps, float(unprofiled_ns), timed)
    return solved[key]


@per_trace
def _solved(trace: Trace) -> dict:
    """(steps' ts, ends, measured ns) -> the solved transform, per trace."""
    return {}


def _solve(trace: Trace, steps: pl.DataFrame, target_ns: float, timed: bool = False) -> Transform:
    def at(share: float, long: float = 0.0) -> Transform:
        return share_transform(trace, share, long)

    fitted = host_share(trace)

    def mean(share: float, long: float = 0.0) -> float:
        return float(replay(trace, steps, [at(share, long)]).mean())

    def bisect(f, lo: float, hi: float) -> float:  # f falls as its argument grows: the argument where f = target
        for _ in range(CALIBRATION_ITERS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > target_ns else (lo, mid)
        return (lo + hi) / 2

    lo, hi = 0.0, SHARE_MAX  # the replayed step shrinks as the share grows
    none = mean(lo)
    if none <= target_ns:
        # the measurement is at or above the replay with no share at all. Where that replay is already the
        # device's own chain (no share moves it), every share reproduces the measurement and it says nothing of the
        # host: the fitted share, as at the floor below (a device-bound step's host is what a fix of device time
        # bares: kept as traced, a fused 128 MiB elementwise chain was priced host-bound at 0.23 ms a step where the
        # fixed twin ran 0.16); else no share (the measured step has the most host the replay can give it)
        return at(fitted) if none <= mean(hi) * (1 + FLOOR_TOL) else at(lo)
    floor = mean(hi)
    if floor >= target_ns:
        # even SHARE_MAX of every host interval up to HOST_SHARE_MAX_NS leaves the replay above the measurement.
        # Where the longer intervals' own work is on the path and their share reaches it (a host-bound step whose
        # host time sits in intervals of more than 1 ms: a recompiling step's Dynamo and Inductor, which run under
        # the profiler's callbacks too), the profiler slowed that work as well: the dispatch keeps the fitted
        # share (the measurement does not say how the slowdown splits; the calibration's share is the host it
        # expects) and the long intervals take the share that reproduces the measurement. Only where the trace is
        # the steps the collector timed (`timed`: its profiled CUDA-event step within TRACE_TOL of the traced one):
        # a capture whose steps stalled for input the timed ones did not (a DataLoader run: 134 ms traced,
        # 68 ms profiled) holds long waits for other processes that no profiler cost explains
        if timed and target_ns < floor * (1 - FLOOR_TOL) and mean(hi, hi) <= target_ns:
            if mean(fitted, hi) <= target_ns:
                return at(fitted, bisect(lambda x: mean(fitted, x), 0.0, hi))
            return at(bisect(lambda x: mean(x, hi), fitted, hi), hi)
        # the measured step is at the device's own chain: every share whose replay reaches that floor reproduces
        # it, and the measurement says nothing of the host below it. The fitted share where it is among them (the
        # host the calibration expects, not a host stripped to nothing, which would let any fix of device time
        # save all of it); else the smallest that reaches the floor (the most host the measurement allows)
        if mean(fitted) <= floor * (1 + FLOOR_TOL):
            return at(fitted)
        target_ns = floor * (1 + FLOOR_TOL)
    return at(bisect(mean, lo, hi))


def estimate(trace: Trace, steps: pl.DataFrame, unprofiled: np.ndarray | None = None,
             method: str = "replay", busy: np.ndarray | None = None) -> dict:
    """{events_per_step, overhead_per_step_us, gpu_busy_per_step_us, traced_step_us,
    estimated_unprofiled_step_us, error_band_us, method} for the given steps (periods). `unprofiled`: the
    steps' estimated unprofiled durations (ns) when another replay gave them (`method`, `job_replay`: the rank's
    in its job's replay, `busy` the GPU busy time per step it was bounded by), else its own
    (`unprofiled_steps`)."""
    n = steps.height
    ev = events_per_step(trace, steps)
    traced = float((steps["end"] - steps["ts"]).sum()) / n / 1000 if n else 0.0
    if busy is None:
        busy = gpu_busy_per_step(trace, steps) if n and trace.has_gpu else None
    gpu = float(np.mean(busy)) / 1000 if n and trace.has_gpu and busy is not None else 0.0
    if unprofiled is None:
        unprofiled = unprofiled_steps(trace, steps) if n else np.zeros(0)
    est = float(np.mean(unprofiled)) / 1000 if n else 0.0
    return {
        "events_per_step": ev,
        "overhead_per_step_us": round(traced - est, 3),
        "gpu_busy_per_step_us": round(gpu, 3),
        "traced_step_us": round(traced, 3),
        "estimated_unprofiled_step_us": round(est, 3),
        "error_band_us": [
            round(max(gpu, est * (1 - ERROR_BAND)), 3),
            round(min(traced, est * (1 + ERROR_BAND)), 3),
        ],
        "method": method,
    }
