"""TV106 shape-setup: ops that pay a one-time setup for each new input shape, inside the steps.

## What it detects
An op that takes `ratio` (20) times its own time once cached, and at least `min_excess_ms` (5 ms) more, the first
time the recording shows it with a new set of input shapes (the trace's
`Input Dims`: record with `record_shapes=True`, which `traceview collect` does with `--shapes`), where the op sees
more than one shape in the recording. The cached own time is the op's median on shapes it met before; where every
call brought a new shape (a new length every step), the median own time of the trace's ops that launch kernels
(their dispatch), for an op that launches kernels itself (a CPU op's own time may grow with its data). Its own time
(not its children's) is the setup: cuDNN building an
execution plan for SDPA's cuDNN attention backend, cuDNN timing every convolution algorithm when
`torch.backends.cudnn.benchmark = True`, a library's per-shape heuristics or JIT. Compilation by `torch.compile`
is TV104 recompile (ops inside its compile spans are left to it), and a collective's own time is its wait for
the peers (TV501). Without recorded shapes (or for ops whose inputs have none: tensor lists) the rule cannot tell
a setup from a stall and says nothing.

A capture can miss them: the steps that meet a new shape are a few in ten. Where the capture holds no setup but
the collector's unprofiled steps (its manifest beside the trace) show slow steps that recur after the warm-up (two
or more above three times the fastest, after the first that was not slow) and the captured steps' input shapes
change from step to step (an op in every step with a shape one step has and another lacks), the rule says so at
`info`, with no saving (nothing in the capture to price), and asks for a longer capture.

## Why it is slow
These libraries cache their plan per shape, so a job that feeds a few fixed shapes pays once, at warm-up. A job
whose shapes keep changing — batches padded to their own longest sequence, multi-scale or variable-size images —
meets new shapes for as long as it runs: each one stops the host for tens of milliseconds to seconds while the GPU
has nothing queued. The steps that pay it are a few in ten, so a short capture and a median step time can miss
them: the collector's unprofiled steps then show rare steps many times the median.

## How to fix
Feed a few fixed shapes: pad sequences to a multiple (`DataCollatorWithPadding(pad_to_multiple_of=64)`,
`tokenizer(..., pad_to_multiple_of=64)`) or bucket them by length; resize images to a few scales. Or use a path
without a per-shape setup: for attention, keep SDPA off the cuDNN backend while lengths vary
(`torch.backends.cuda.enable_cudnn_sdp(False)`, or `with torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION,
SDPBackend.EFFICIENT_ATTENTION])`); for convolutions, `torch.backends.cudnn.benchmark = False` when input sizes
keep changing (the default algorithm choice needs no timing run).

## Evidence
Each setup (op, step, its input shapes, its own time and the op's median), the ops' shapes seen in the recording,
and where the collector timed the unprofiled steps (its manifest beside the trace), how many of them took more
than three times their median. Savings (per step, unprofiled) are replayed: `fix_transform` takes each setup's
host time off the host path (the op's median own time stays) and, where the setup timed candidate kernels
(blocking calls inside it), the kernels it launched before its last blocking call take no device time. The
saving is what the recorded steps paid; a longer job pays it as often as new shapes come, so the collector's
count of slow unprofiled steps says how representative the recording is.

## Options
- `ratio` (20.0): own time over the op's median at which an instance counts as a setup.
- `min_excess_ms` (5.0): smallest own time above the median (ms) that counts as a setup (a plan build or an
  autotuning run takes tens of ms to seconds; a millisecond stall of one op is more often a page fault or the
  garbage collector).
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, `torch.nn.functional.scaled_dot_product_attention` and `torch.nn.attention.sdpa_kernel` (backends).
- PyTorch docs, "Reproducibility" / `torch.backends.cudnn.benchmark` (cuDNN autotuning per input size).
- Hugging Face docs, `DataCollatorWithPadding(pad_to_multiple_of=...)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np
import polars as pl

from traceview.analyses.classify import sync_calls
from traceview.analyses.names import contains
from traceview.analyses.replay import Transform, spans
from traceview.analyses.windows import host_step_of
from traceview.engine import CHAIN, SMALL_ROWS
from traceview.evidence import Meta
from traceview.frames import members, pick
from traceview.ingest.manifest import rank_entry, recurring_slow
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext

from .recompile import COMPILE_RE, compile_spans

CODE = "TV106"
NAME = "shape-setup"
SEVERITY = "warning"
CLASS = "cpu_launch"  # the host stops in the setup while the GPU has nothing queued
TITLE = "Ops pay a per-shape setup (cuDNN plans, autotuning) inside the steps"
#: the verdict's words when this rule's fix leads (its class's, "the CPU launches kernels too slowly", misname it)
VERDICT = ("setup-bound: the GPU idles while the host builds per-shape plans (cuDNN attention plans, cuDNN "
           "autotuning) for input shapes it meets for the first time")
OPTIONS = {
    "ratio": Option(20.0, "own time over the op's median at which an instance counts as a setup"),
    "min_excess_ms": Option(5.0, "smallest own time above the median (ms) counted as a setup"),
    **XPROF_SEVERITY,
}
ATTN_RE = r"cudnn_attention"
#: communication ops: their own time is the wait for the peers
COMM_RE = r"^(record_param_comms|nccl:|gloo:|c10d::|c10d_functional::|_c10d_functional::)"
CONV_RE = r"(?i)conv|cudnn_convolution"
_FEED = ("Feed a few fixed shapes: pad sequences to a multiple (DataCollatorWithPadding(pad_to_multiple_of=64) or "
         "tokenizer(..., pad_to_multiple_of=64)) or bucket them by length; resize images to a few scales.")
FIX = ("These ops build and cache a plan for each input shape; the shapes change from step to step, so steps that "
       "bring a new shape stop the host in the setup while the GPU has nothing queued. " + _FEED)
FIX_ATTN = ("SDPA runs on its cuDNN backend, which builds an execution plan for every new sequence length "
            "({ms}); batches padded to their own longest sequence bring new lengths for as long as the job runs. "
            + _FEED + " Or keep SDPA off the cuDNN backend while lengths vary: "
            "torch.backends.cuda.enable_cudnn_sdp(False), or with torch.nn.attention.sdpa_kernel("
            "[SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]) (no per-shape plan).")
FIX_CONV = ("cuDNN times every convolution algorithm for each new input size ({ms}): "
            "torch.backends.cudnn.benchmark = True with sizes that keep changing. Resize or pad the inputs to a few "
            "sizes, or set torch.backends.cudnn.benchmark = False while sizes vary (the default algorithm choice "
            "needs no timing run).")


class Setup(msgspec.Struct, kw_only=True):
    """One op instance that paid a per-shape setup."""

    op: Annotated[str, Meta(description="the op")]
    step: Annotated[int, Meta(description="its step")]
    input_dims: Annotated[str, Meta(description="its input shapes, first seen in the recording here")]
    own_us: Annotated[float, Meta(description="its own time (µs: its duration less its children's)")]
    median_own_us: Annotated[float, Meta(
        description="the op's own time once cached (µs): its median on shapes seen before, else (every call a new "
                    "shape) the median dispatch of the trace's launching ops")]


class SlowSteps(msgspec.Struct, kw_only=True):
    """Slow steps that recur among the collector's unprofiled steps of this rank (its manifest)."""

    slow: Annotated[int, Meta(description="steps after the warm-up above 3x the fastest")]
    of: Annotated[int, Meta(description="steps after the warm-up")]
    fastest_ms: Annotated[float, Meta(description="the fastest (ms)")]
    median_ms: Annotated[float, Meta(description="their median (ms)")]
    mean_ms: Annotated[float, Meta(description="their mean (ms)")]
    slowest_ms: Annotated[float, Meta(description="the slowest (ms)")]
    captured_slow: Annotated[int, Meta(description="captured steps above 3x the fastest captured one")]
    captured: Annotated[int, Meta(description="captured steps")]


class Evidence(msgspec.Struct, kw_only=True):
    setups: Annotated[int, Meta(description="op instances that paid a setup in the analysed steps")]
    setup_us: Annotated[float, Meta(description="their own time above the ops' medians (µs, traced)")]
    steps_with_setups: Annotated[list[int], Meta(description="the steps they ran in")]
    ops: Annotated[dict[str, int], Meta(description="setups by op")]
    shapes_seen: Annotated[dict[str, int], Meta(description="distinct input shapes of each such op in the recording")]
    longest: Annotated[list[Setup], Meta(description="the 6 longest setups")]
    kind: Annotated[str, Meta(description="`cudnn_attention`, `cudnn_autotune` (convolutions), `other`, or "
                                          "`not_captured` (slow steps recur, none in the capture)")]
    unprofiled: Annotated[SlowSteps | None, Meta(
        description="slow steps recurring among the collector's unprofiled steps (null: none, or no manifest)")] = None
    changing_shapes: Annotated[list[str], Meta(
        description="an op whose input shapes differ between the analysed steps, with its shapes in each")] = \
        msgspec.field(default_factory=list)


def _setups(ctx: RuleContext) -> pl.DataFrame:
    """The op instances that paid a setup: [i, name, tid, ts, end, step, input_dims, own, med, shapes (the op's
    distinct input shapes in the analysed steps)]; computed once."""
    return ctx.once("setups", lambda: _find(ctx))


def _find(ctx: RuleContext) -> pl.DataFrame:
    h = ctx.trace.host
    empty = pl.DataFrame(schema={"i": pl.Int64, "name": pl.String, "tid": pl.Int64, "ts": pl.Int64,
                                 "end": pl.Int64, "step": pl.Int64, "input_dims": pl.String, "own": pl.Int64,
                                 "med": pl.Float64, "shapes": pl.Int64})
    if "input_dims" not in h.columns or h.height == 0:
        return empty
    # (a few queries, each a lazy chain: a small trace's run is mostly polars' fixed cost per query)
    # the compile and collective names matched on the host's distinct names (`names.contains`), not once a call (the
    # regexes on every op's name were most of this rule's time on a large trace)
    plain = pl.col("name").is_not_null() & ~contains(h, COMPILE_RE) & ~contains(h, COMM_RE)

    def ops_of(*cols: str, named: bool = True) -> pl.LazyFrame:
        ops = pick(h, *cols).lazy().filter((pl.col("cat") == "cpu_op") & (pl.col("ts") >= ctx.lo)
                                           & (pl.col("ts") < ctx.hi))
        return ops.filter(plain) if named else ops

    # a setup is sought only among ops called 3 times or more with 2 input shapes or more: those names first, from
    # the name and shape columns alone (a reduction over the few names), so the per-call frames below are built only
    # when some op qualifies and hold only its calls (at 10 M tiny events, one shape per op, the windowed frame of
    # every op was the run's peak: +330 MiB); on a small trace first without the name regexes (fewer rows never make
    # a name qualify: where none does, the regexes are not compiled)
    def qualifying(named: bool) -> pl.Series:
        return (ops_of("cat", "name", "ts", "input_dims", named=named).group_by("name")
                .agg(n=pl.len(), shapes=pl.col("input_dims").n_unique())  # (a categorical's codes: one per text)
                .filter((pl.col("shapes") >= 2) & (pl.col("n") >= 3)).select("name").collect(**CHAIN)["name"])

    if h.height < SMALL_ROWS and qualifying(named=False).len() == 0:  # (a large trace: one group_by, not two)
        return empty
    names = qualifying(named=True)
    if names.len() == 0:
        return empty
    h = pick(h, "i", "cat", "name", "tid", "ts", "end", "parent", "input_dims")
    ops = ops_of(*h.columns).collect(**CHAIN)
    child = _child_time(h, ops["i"])
    launchers = h.lazy().filter(pl.col("cat").is_in(["cuda_runtime", "cuda_driver"])
                                & pl.col("name").str.contains("Launch")).select(pl.col("parent").unique())
    launchers = launchers.collect(**CHAIN)["parent"]
    o = (ops.lazy().with_columns(_c=child)
         .with_columns(own=(pl.col("end") - pl.col("ts") - pl.col("_c").fill_null(0)).cast(pl.Int64),
                       launches=pl.col("i").is_in(members(launchers)))).collect(**CHAIN)
    # the op's own time once its plan is cached: the median over its calls on a shape seen before; where every
    # call brought a new shape (a new length every step), an op that launches kernels is held to the dispatch of
    # the trace's launching ops (a CPU op's own time may grow with its data; a GPU op's dispatch does not)
    dispatch = o.filter(pl.col("launches"))["own"].median()
    # (each window below is within one name; the shapes stay categorical codes, one per text, in the windows: their
    # text is read for the hits alone)
    o = o.lazy().filter(pl.col("name").is_in(members(names)))
    o = o.with_columns(n=pl.len().over("name"), shapes=pl.col("input_dims").n_unique().over("name"),
                       first=pl.col("ts").rank("ordinal").over("name", "input_dims") == 1)
    o = o.with_columns(med=pl.col("own").filter(~pl.col("first")).median().over("name"))
    o = o.with_columns(med=pl.when(pl.col("med").is_not_null()).then(pl.col("med"))
                       .when(pl.col("launches").any().over("name")).then(pl.lit(dispatch, pl.Float64))
                       .otherwise(None))
    opt = ctx.options
    hit = o.filter(pl.col("first") & pl.col("med").is_not_null()
                   & (pl.col("shapes") >= 2) & (pl.col("n") >= 3)
                   & (pl.col("own") >= opt["ratio"] * pl.col("med"))
                   & (pl.col("own") - pl.col("med") >= opt["min_excess_ms"] * 1e6))
    hit = (hit.with_columns(pl.col("input_dims").cast(pl.String)).filter(pl.col("input_dims").str.contains(r"\d"))
           .collect(**CHAIN))
    if hit.height == 0:
        return empty
    comp = compile_spans(ctx)
    if comp.height:  # work inside a compilation (its tracing, its autotuning) is TV104's
        w = comp.select(pl.col("tid").alias("_t"), pl.col("ts").alias("_s"), pl.col("end").alias("_e")).sort("_s")
        inside = (hit.select("i", "tid", "ts").sort("ts").join_asof(w, left_on="ts", right_on="_s", by_left="tid",
                                                                  by_right="_t", strategy="backward",
                                                                  check_sortedness=False)  # (sorted by time)
                  .filter(pl.col("ts") < pl.col("_e"))["i"])
        hit = hit.filter(~pl.col("i").is_in(inside.implode()))
    hit = host_step_of(hit.select("i", "name", "tid", "ts", "end", "input_dims", "own", "med", "shapes"), ctx.steps,
                       "ts")
    return hit.filter(pl.col("step").is_not_null()).select(
        pl.col("i").cast(pl.Int64), "name", pl.col("tid").cast(pl.Int64), "ts", "end", pl.col("step").cast(pl.Int64),
        "input_dims", "own", pl.col("med").cast(pl.Float64), pl.col("shapes").cast(pl.Int64)).sort("ts")


def _child_time(h: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """The summed time (end - ts) of the children (rows of `h` by `parent`) of each row id of `ids`; null for one
    without children. Summed by parent id in numpy (a hash group-by of every host row by its parent and a join
    back cost this rule more than the rest of its search); float sums of integer ns are exact below 2**53 ns."""
    if ids.len() == 0 or h.height == 0 or h["parent"].null_count() == h.height:
        return pl.Series("_c", [None] * ids.len(), pl.Int64)
    par = h["parent"]
    d = (h["end"] - h["ts"]).fill_null(0).to_numpy()
    has = par.is_not_null().to_numpy()
    size = int(max(ids.max() or 0, par.max())) + 1
    p = par.fill_null(0).to_numpy()[has]
    tot = np.bincount(p, weights=d[has], minlength=size)
    got = np.bincount(p, minlength=size) > 0
    q = ids.fill_null(0).to_numpy()
    return pl.Series("_c", tot[q].astype(np.int64)).set(pl.Series(~got[q]) | ids.is_null(), None)


def _kind(s: pl.DataFrame) -> str:
    if s["name"].str.contains(ATTN_RE).any():
        return "cudnn_attention"
    if s["name"].str.contains(CONV_RE).any():
        return "cudnn_autotune"
    return "other"


def _slow_steps(ctx: RuleContext) -> SlowSteps | None:
    doc = ctx.trace.meta.manifest
    got = recurring_slow(rank_entry(doc, Path(ctx.trace.meta.path or "").name, ctx.trace.meta.rank)) if doc else None
    return SlowSteps(**got) if got else None


def _changing_shapes(ctx: RuleContext) -> list[str]:
    """An op in every analysed step whose input shapes differ between them (a shape one step has and another
    lacks), with its shapes per step: ["name", "step: dims", ...]; empty when the shapes repeat or are not
    recorded."""
    h = ctx.trace.host
    if "input_dims" not in h.columns or ctx.steps.height < 2:
        return []
    ops = h.select("cat", "name", "ts", "input_dims").filter(
        (pl.col("cat") == "cpu_op") & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
    ops = ops.with_columns(pl.col("input_dims").cast(pl.String)).filter(pl.col("input_dims").str.contains(r"\d"))
    ops = host_step_of(ops.select("name", "ts", "input_dims"), ctx.steps, "ts").filter(pl.col("step").is_not_null())
    per = ops.group_by("name", "step").agg(pl.col("input_dims").n_unique().alias("k"))
    per = per.group_by("name").agg(pl.col("k").max(), pl.len().alias("steps"))
    tot = ops.group_by("name").agg(pl.col("input_dims").n_unique().alias("total"), pl.col("ts").min())
    ch = (per.join(tot, on="name").filter((pl.col("steps") == ctx.steps.height) & (pl.col("total") > pl.col("k")))
          .sort("ts"))
    if ch.height == 0:
        return []
    name = ch["name"][0]
    first = (ops.filter(pl.col("name") == name).sort("ts").group_by("step", maintain_order=True)
             .agg(pl.col("input_dims").first()).head(4))
    return [name, *(f"{st}: {d}" for st, d in first.rows())]


def _not_captured(ctx: RuleContext) -> list[Finding]:
    """No setup in the capture, but the collector saw slow steps recur and the captured steps change shapes: say
    so (info: the capture holds nothing to price)."""
    slow = _slow_steps(ctx)
    if slow is None or slow.captured_slow:
        return []
    changing = _changing_shapes(ctx)
    if not changing:
        return []
    ev = Evidence(setups=0, setup_us=0.0, steps_with_setups=[], ops={}, shapes_seen={}, longest=[],
                  kind="not_captured", unprofiled=slow, changing_shapes=changing)
    attn = ctx.trace.host["name"].str.contains(ATTN_RE).any()
    fix = ("Record more steps (traceview collect --active 10) so that a slow step is captured and this rule can "
           "name what it runs. If the slow steps are the ones that bring a new shape: " + (
               FIX_ATTN.format(ms="tens of ms to seconds each") if attn else FIX))
    title = (f"Slow steps recur ({slow.slow} of {slow.of} unprofiled steps above 3x the fastest, up to "
             f"{slow.slowest_ms:.0f} ms) and the input shapes change between steps: a per-shape setup may run in "
             "steps this capture does not hold")
    excess_ns = max(slow.mean_ms - slow.median_ms, 0.0) * 1e6 * ctx.steps.height
    return [ctx.finding(cost_ns=excess_ns, savings_ns=0, count=slow.slow, steps=[], evidence=ev, title=title,
                        fix=fix, severity="info")]


def check(ctx: RuleContext) -> list[Finding]:
    s = _setups(ctx)
    if s.height == 0:
        return _not_captured(ctx)
    excess = (s["own"] - s["med"]).clip(0)
    kind = _kind(s)
    ms = f"{float(excess.max()) / 1e6:.0f} ms for the longest here"
    fix = {"cudnn_attention": FIX_ATTN, "cudnn_autotune": FIX_CONV}.get(kind, FIX).format(ms=ms)
    top = s.with_columns(x=pl.col("own") - pl.col("med")).sort("x", descending=True).head(6)
    ev = Evidence(
        setups=s.height, setup_us=round(float(excess.sum()) / 1000, 3),
        steps_with_setups=sorted(s["step"].unique().to_list()),
        ops=dict(sorted(s.group_by("name").len().rows())),
        shapes_seen=dict(sorted(s.group_by("name").agg(pl.col("shapes").first()).rows())),
        longest=[Setup(op=r["name"], step=r["step"], input_dims=r["input_dims"], own_us=round(r["own"] / 1000, 3),
                       median_own_us=round(r["med"] / 1000, 3)) for r in top.to_dicts()],
        kind=kind, unprofiled=_slow_steps(ctx), changing_shapes=_changing_shapes(ctx))
    steps = ev.steps_with_setups
    title = (f"{s.height} op call(s) paid a per-shape setup ({float(excess.sum()) / 1e6:.1f} ms) in "
             f"{len(steps)} of {ctx.steps.height} step(s): new input shapes")
    return [ctx.finding(cost_ns=float(excess.sum()), count=s.height, steps=steps, evidence=ev, title=title, fix=fix,
                        op_ids=s["i"])]


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: each setup's own time above the op's median leaves the host path (a
    span from the op's start, so its last, real launches stay at its end), and the kernels it launched before its
    last blocking call (candidates timed by an autotuning setup) take no device time."""
    s = _setups(ctx)
    if s.height == 0:
        return None
    cut = s.select("tid", "ts", end=pl.col("ts") + (pl.col("own") - pl.col("med")).clip(0).cast(pl.Int64))
    blocking = sync_calls(ctx.trace).select("ts", "tid")
    win = s.select(pl.col("i").alias("_op"), pl.col("tid").alias("_tid"), pl.col("ts").alias("_s"),
                   pl.col("end").alias("_e")).sort("_s")
    last_sync = (blocking.sort("ts").join_asof(win, left_on="ts", right_on="_s", strategy="backward")
                 .filter((pl.col("ts") < pl.col("_e")) & (pl.col("tid") == pl.col("_tid")))
                 .group_by("_op").agg(pl.col("ts").max().alias("_last")))
    gpu: dict[int, int] = {}
    if last_sync.height:
        g = ctx.trace.gpu.select("i", "launch_ts").filter(pl.col("launch_ts").is_not_null()).sort("launch_ts")
        w = win.join(last_sync, on="_op").sort("_s")
        trial = (g.join_asof(w, left_on="launch_ts", right_on="_s", strategy="backward")
                 .filter(pl.col("launch_ts") < pl.col("_last")))
        gpu = dict.fromkeys(trial["i"].cast(pl.Int64).to_list(), 0)
    return Transform(NAME, host_spans=spans(cut), gpu_dur=gpu)
