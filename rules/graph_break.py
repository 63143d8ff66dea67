"""TV103 graph-break: a compiled function is split into several graphs with eager code between them.

## What it detects
A `Torch-Compiled Region` span nested inside another one in the same call: when Dynamo cannot trace a
statement (a data-dependent branch such as `if x.sum() > 0`, a `.item()`, an unsupported call), it compiles
the code before it as one graph, runs the statement eagerly, and resumes in a new compiled function whose
region runs inside the original one. Each nested region is one graph break; the eager ops between the end of
the previous graph's call (`## Call CompiledFxGraph …`) and the nested region are the code that broke it.

## Why it is slow
Every break ends a graph: the fusion across the break is lost, the eager statement runs op by op, and when
it reads a GPU value on the host (`aten::is_nonzero`, `aten::item`, `aten::_local_scalar_dense`) the host
waits for every queued kernel, the GPU drains, and the next graph is launched only after the host returned
and ran the resume function's guards and wrappers. The GPU idles between the regions.

## How to fix
Keep the branch on the GPU: `torch.where(cond, a, b)` for data-dependent values, `torch.cond` for
data-dependent control flow; avoid `.item()`/`.tolist()`/`print` of tensors inside the compiled function.
Find every break with `torch.compile(..., fullgraph=True)` (errors at the first one),
`torch._dynamo.explain(fn)(*args)` or `TORCH_LOGS=graph_breaks`.

## Evidence
Per compiled function: regions per call, breaks in the analysed steps, the eager ops between the graphs
(the first one is the break), whether one of them synchronises with the GPU, the Python source line when the
trace has stacks (`with_stack=True`), the eager host time and the GPU idle time between the graphs.
Savings, on the timeline: (1) one graph lets the compiler fuse the pointwise/reduction kernels on both sides
of the break (the first graph's trailing ones and the resumed graph's leading ones) — estimated as one
chain with the elementwise-chain rule's byte model (fused ≈ first input + distinct extra inputs + last
output), counted where the GPU was the critical path; (2) the GPU idle time between the end of the first
graph's GPU work and the start of the resumed graph's first kernel, less the gap one graph would still leave: it launches the resumed kernels one launch
interval (the median time between consecutive launches inside a graph's call) after its last launch, so
the GPU idles max(0, last launch + interval − end of the first graph's work). Eager GPU work between the
graphs stays. The findings' savings are replayed (`fix_transform`): the host time between the graphs leaves the
host path, a sync there no longer waits, and the chain's kernels run in its fused time.

## Options
- `min_savings_pct` (1.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, "torch.compile: graph breaks" (`fullgraph=True`, `torch._dynamo.explain`, `TORCH_LOGS`).
- PyTorch docs, `torch.cond` and the torch.compile troubleshooting guide.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.classify import sync_calls
from traceview.analyses.fusible import OTHER, kernel_class
from traceview.analyses.intervals import merge
from traceview.analyses.replay import Transform, spans
from traceview.analyses.timeline import gpu_work
from traceview.analyses.tree import ancestor_where
from traceview.analyses.whatif import EMPTY, gpu_idle_within, removed_per_step, shrink_kernels
from traceview.analyses.windows import host_step_of
from traceview.evidence import Meta
from traceview.ruleapi import XPROF_SEVERITY, Finding, RuleContext, min_savings

from .elementwise_chain import per_chain

CODE = "TV103"
NAME = "graph-break"
SEVERITY = "warning"
CLASS = "host_sync"  # the classifier class whose time a fix of these findings removes
TITLE = "Graph break: a compiled function runs as several graphs with eager code between"
OPTIONS = {
    **min_savings(1.0),
    **XPROF_SEVERITY,
}
FIX = ("Dynamo could not trace a statement of this function: it compiled the code before it, ran the statement "
       "eagerly and resumed in a second graph, so the fusion across it is lost and, when the statement reads a "
       "GPU value on the host, the GPU drains while the host waits. Keep the branch on the GPU with "
       "torch.where / torch.cond, drop .item()/.tolist()/print inside the compiled code, and find every break "
       "with torch.compile(fullgraph=True), torch._dynamo.explain or TORCH_LOGS=graph_breaks.")
REGION = "Torch-Compiled Region"
GRAPH_CALL_RE = r"^## Call CompiledFxGraph"
#: Dynamo/AOT bookkeeping around a region: not the user's eager code
MACHINERY_RE = r"^(TorchDynamo Cache Lookup|Pregraph bytecode|AOTDispatcher|## |Torch-Compiled Region|CompiledFunction)"
SYNC_OP_RE = r"^aten::(is_nonzero|item|_local_scalar_dense|nonzero|equal|allclose|tolist)$"


def breaks(ctx: RuleContext) -> pl.DataFrame:
    """One row per nested (resumed) region in the analysed steps: [i, step, name, outer, gap_ts, ts,
    first_launch, eager_ops, eager_ns, sync, source]."""
    h = ctx.trace.host
    regions = h[["i", "cat", "name", "tid", "ts", "end", "depth", "parent"]].filter(
        (pl.col("cat") == "cpu_op") & pl.col("name").str.starts_with(REGION))
    if regions.height < 2:
        return pl.DataFrame()
    reg = regions.select("i", "name", "tid", "ts", "end", "depth", "parent")
    outer = reg.select(pl.col("i").alias("outer_i"), pl.col("name").alias("outer"),
                       pl.col("ts").alias("_ots"), pl.col("end").alias("_oend"), pl.col("depth").alias("_od"))
    # the nearest enclosing region (by the call tree): a frame Dynamo resumed, or a callee it could not inline
    # because of a break inside it, runs as its own region inside the frame that broke. (The latest region that
    # started before is not it: after the first nested region closes, its siblings would each find that one.)
    anc = ancestor_where(h, reg.select("i"), (pl.col("cat") == "cpu_op") & pl.col("name").str.starts_with(REGION),
                         "outer_i")
    nested = reg.join(anc, on="i").join(outer, on="outer_i")
    if nested.height == 0:
        return pl.DataFrame()
    nested = host_step_of(nested, ctx.steps, "ts").filter(pl.col("step").is_not_null())
    if nested.height == 0:
        return pl.DataFrame()
    calls = h.filter(pl.col("name").str.contains(GRAPH_CALL_RE)).select("tid", pl.col("end").alias("gap_ts"))
    nested = nested.sort("ts").join_asof(calls.sort("gap_ts"), left_on="ts", right_on="gap_ts", by="tid",
                                         strategy="backward", check_sortedness=False)
    nested = nested.with_columns(gap_ts=pl.max_horizontal(pl.col("gap_ts").fill_null(pl.col("_ots")), pl.col("_ots")))
    # first kernel launched inside the resumed region
    launches = ctx.trace.gpu.select("launch_ts").filter(pl.col("launch_ts").is_not_null()).sort("launch_ts")
    nested = nested.sort("ts").join_asof(launches.rename({"launch_ts": "first_launch"}), left_on="ts",
                                         right_on="first_launch", strategy="forward", check_sortedness=False)
    nested = nested.with_columns(first_launch=pl.when(pl.col("first_launch") < pl.col("end"))
                                 .then(pl.col("first_launch")).otherwise(pl.col("end")))
    # the GPU side of the break: the last work the first graph launched (its launch and its end) and the start of
    # the resumed graph's first kernel
    work = gpu_work(ctx.trace.gpu.select("kind", "launch_ts", "ts", "end")).filter(pl.col("launch_ts").is_not_null()).drop("kind")
    before = (nested.select("i", "_ots", "gap_ts").join(work, how="cross")
              .filter((pl.col("launch_ts") >= pl.col("_ots")) & (pl.col("launch_ts") < pl.col("gap_ts")))
              .group_by("i").agg(pl.col("launch_ts").max().alias("a_launch"), pl.col("end").max().alias("a_end")))
    starts = work.group_by("launch_ts").agg(pl.col("ts").min().alias("b_start"))
    nested = (nested.join(before, on="i", how="left")
              .join(starts.rename({"launch_ts": "first_launch"}), on="first_launch", how="left"))
    # the eager ops between the graphs: inside [gap_ts, ts), run by a region's own bytecode (their parent is a
    # region: the nested one's siblings, or the statement that broke the previous frame after its graph call,
    # e.g. a hook's `.item()`), not by a graph call or Dynamo's guards
    ops = h.filter((pl.col("cat") == "cpu_op") & ~pl.col("name").str.contains(MACHINERY_RE)
                   & pl.col("parent").is_in(regions["i"].implode())).select(
        pl.col("i").alias("op_i"), pl.col("name").alias("op"), "tid", pl.col("ts").alias("op_ts"),
        pl.col("end").alias("op_end"))
    gap = (nested.select("i", "tid", "gap_ts", "ts").join(ops, on="tid")
           .filter((pl.col("op_ts") >= pl.col("gap_ts")) & (pl.col("op_ts") < pl.col("ts")))
           .sort("op_ts").group_by("i").agg(pl.col("op").alias("eager_ops"), pl.col("op_i").first().alias("break_i"),
                                            (pl.col("op_end") - pl.col("op_ts")).sum().alias("eager_ns"),
                                            pl.col("op_ts").first().alias("break_ts")))
    nested = nested.join(gap, on="i", how="left").with_columns(
        sync=pl.col("eager_ops").list.eval(pl.element().str.contains(SYNC_OP_RE)).list.any().fill_null(False))
    return nested.with_columns(source=_source(ctx, nested)).select(
        "i", "step", "name", "outer", "_ots", "gap_ts", "ts", "end", "first_launch", "a_launch", "a_end", "b_start",
        "eager_ops", "eager_ns", "sync", "source")


def _source(ctx: RuleContext, nested: pl.DataFrame) -> pl.Series:
    """The innermost Python frame (with_stack) around each break op, else null."""
    py = ctx.trace.host.filter(pl.col("cat") == "python_function")
    if py.height == 0 or "break_ts" not in nested.columns:
        return pl.Series("source", [None] * nested.height, pl.String)
    q = nested.select("tid", "break_ts").with_row_index("_r").filter(pl.col("break_ts").is_not_null())
    hit = (q.join(py.select("tid", "name", pl.col("ts").alias("_pts"), pl.col("end").alias("_pend"), "depth"), on="tid")
           .filter((pl.col("_pts") <= pl.col("break_ts")) & (pl.col("_pend") > pl.col("break_ts"))
                   & ~pl.col("name").str.contains(r"torch/|site-packages|<built-in"))
           .sort("depth", descending=True).group_by("_r").agg(pl.col("name").first()))
    out = nested.with_row_index("_r").join(hit, on="_r", how="left").sort("_r")
    return out["name"].alias("source")


def launch_interval(ctx: RuleContext) -> int:
    """Median ns between consecutive kernel launches inside one compiled graph's call: the pace at which one
    graph launches its kernels (0 when no call launches two)."""
    h = ctx.trace.host
    calls = h.filter(pl.col("name").str.contains(GRAPH_CALL_RE)).select("tid", pl.col("i").alias("call"),
                                                                         pl.col("ts").alias("_cts"), pl.col("end").alias("_cend"))
    ln = ctx.trace.gpu.select("launch_ts", pl.col("launch_tid").alias("tid")).filter(pl.col("launch_ts").is_not_null())
    if calls.height == 0 or ln.height == 0:
        return 0
    ln = (ln.sort("launch_ts").join_asof(calls.sort("_cts"), left_on="launch_ts", right_on="_cts", by="tid",
                                         strategy="backward", check_sortedness=False)
          .filter(pl.col("launch_ts") < pl.col("_cend")).unique("launch_ts").sort("launch_ts"))
    d = ln.with_columns(_d=pl.col("launch_ts").diff().over("call"))["_d"].drop_nulls()
    return int(d.median()) if d.len() else 0


def boundary_chains(ctx: RuleContext, b: pl.DataFrame) -> pl.DataFrame:
    """Per break, the pointwise/reduction kernels on both sides of it — the first graph's kernels after its
    last other kernel and the resumed graph's kernels before its first other one — as one chain in the
    columns of the elementwise-chain rule: [chain, i, ts, end, dur, k, pos, bytes, in0_bytes, extra_bytes,
    out_bytes, ...]."""
    if b.height == 0:
        return pl.DataFrame()
    k = (ctx.trace.gpu.select("i", "kind", "name", "ts", "end", "dur", "launch_ts")
         .filter((pl.col("kind") == "compute") & pl.col("launch_ts").is_not_null())
         .select("i", "kind", "name", "ts", "end", "dur", "launch_ts")
         .join(ctx.kb.select("i", "op_name", "category", "bytes", "in0_bytes", "extra_bytes", "out_bytes"), on="i", how="left"))
    # only kernels a fuser can merge (the elementwise-chain rule's classes, analyses/fusible.py)
    k = k.with_columns(_elem=kernel_class(k) != OTHER)
    side = b.select(pl.col("i").alias("chain"), "_ots", "gap_ts", "ts", "end")
    x = side.join(k.rename({"ts": "kts", "end": "kend"}), how="cross")
    a = x.filter((pl.col("launch_ts") >= pl.col("_ots")) & (pl.col("launch_ts") < pl.col("gap_ts"))).with_columns(_side=pl.lit(0))
    r = x.filter((pl.col("launch_ts") >= pl.col("ts")) & (pl.col("launch_ts") < pl.col("end"))).with_columns(_side=pl.lit(1))
    # keep the run touching the break: after A's last non-elementwise kernel, before B's first one
    a = a.filter(pl.col("_elem") & (pl.col("launch_ts") > pl.col("launch_ts").filter(~pl.col("_elem")).max()
                                    .over("chain").fill_null(-1)))
    r = r.sort("chain", "launch_ts", maintain_order=True).filter(pl.col("_elem").cum_min().over("chain").cast(pl.Boolean))
    ch = pl.concat([a, r]).sort("chain", "_side", "launch_ts", maintain_order=True).with_columns(
        pos=pl.int_range(pl.len()).over("chain"), k=pl.len().over("chain"),
        _sides=pl.col("_side").n_unique().over("chain"))
    ch = ch.filter((pl.col("_sides") == 2) & (pl.col("k") >= 2))
    return ch.select("chain", "i", pl.col("kts").alias("ts"), pl.col("kend").alias("end"), "dur", "name", "op_name",
                     "k", "pos", "bytes", "in0_bytes", "extra_bytes", "out_bytes",
                     pl.lit(None, pl.Int64).alias("step"), pl.lit(None, pl.Int64).alias("device"),
                     pl.lit(None, pl.Int64).alias("stream"))


def _fusion(ctx: RuleContext, b: pl.DataFrame) -> pl.DataFrame:
    """The kernel time one graph saves by fusing the kernels around each break (the elementwise-chain rule's
    byte model), as kernel tails where the GPU was the critical path."""
    ch = boundary_chains(ctx, b)
    if ch.height == 0:
        return EMPTY
    per = per_chain(ch).select("chain", (pl.col("fused_time") / pl.col("time")).alias("_r"))
    k = ch.join(per, on="chain").select("i", (pl.col("dur") * pl.col("_r")).cast(pl.Int64).alias("new_dur"))
    return shrink_kernels(ctx.trace, k, sync_calls(ctx.trace))


def _removed(ctx: RuleContext, b: pl.DataFrame) -> pl.DataFrame:
    if b.height == 0:
        return EMPTY
    fused = _fusion(ctx, b)
    pace = launch_interval(ctx)
    # one graph launches the resumed kernels one launch interval after its last one: the GPU then idles only
    # max(0, a_launch + pace - a_end) after the first graph's work instead of until b_start
    b = b.filter(pl.col("a_end").is_not_null() & pl.col("b_start").is_not_null())
    new_gap = (pl.col("a_launch") + pace - pl.col("a_end")).clip(lower_bound=0)
    spans = b.select(ts=pl.col("a_end") + new_gap, end=pl.col("b_start")).filter(pl.col("end") > pl.col("ts"))
    gaps = gpu_idle_within(ctx.trace, spans, ctx.lo, ctx.hi)
    return merge(pl.concat([gaps, fused])) if fused.height else gaps


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The GPU idle time between each graph's call and the first launch of the graph resumed after it."""
    return ctx.once("removes", lambda: _removed(ctx, _breaks(ctx)))


def _breaks(ctx: RuleContext) -> pl.DataFrame:
    return ctx.once("breaks", lambda: breaks(ctx))


class Evidence(msgspec.Struct, kw_only=True):
    compiled_function: Annotated[str, Meta(description="the compiled function the breaks split")]
    calls: Annotated[int, Meta(description="its calls in the analysed steps")]
    breaks: Annotated[int, Meta(description="graph breaks in those calls")]
    regions_per_call: Annotated[float | None, Meta(description="compiled graphs run per call (1 + breaks per call)")]
    resumed_regions: Annotated[list[str], Meta(description="the frames dynamo resumed after a break")]
    break_op: Annotated[str | None, Meta(description="the first eager op run at the first break")]
    eager_ops: Annotated[list[str], Meta(description="the eager ops run there (first 10)")]
    syncs_with_gpu: Annotated[bool, Meta(description="a break waits for the GPU (e.g. `.item()`)")]
    source: Annotated[str | None, Meta(description="the Python source line of the break, when the trace has stacks")]
    eager_host_time_per_break_us: Annotated[float, Meta(description="mean host time of the eager code per break (µs)")]
    graph_launch_interval_us: Annotated[float, Meta(description="median interval between kernel launches inside one graph call (µs)")]
    kernels_fusable_across_break: Annotated[int, Meta(
        description="the longest chain of kernels one graph would fuse across a break")]
    fusion_savings_us: Annotated[float, Meta(description="the device time that fusion would save (µs)")]
    savings_per_step_us: Annotated[dict[str, float], Meta(description="the fix's saving per step (µs), by step number")]


def check(ctx: RuleContext) -> list[Finding]:
    b = _breaks(ctx)
    if b.height == 0:
        return []
    out = []
    for outer in sorted(b["outer"].unique().to_list()):  # one finding per compiled function: a handful
        x = b.filter(pl.col("outer") == outer)
        rem = removed_per_step(_removed(ctx, x), ctx.steps)
        savings = int(rem["removed"].sum())
        if ctx.pct(savings) < ctx.options["min_savings_pct"]:
            continue
        calls = ctx.trace.host.filter((pl.col("name") == outer) & (pl.col("cat") == "cpu_op"))
        calls = host_step_of(calls, ctx.steps, "ts").filter(pl.col("step").is_not_null()).height
        # the break to show: the first that reads a GPU value on the host, else the first with eager code (a
        # nested region with none is a callee Dynamo could not inline because of a break inside it)
        first = x.sort(pl.col("sync").not_(), pl.col("eager_ops").list.len().fill_null(0) == 0, "ts", maintain_order=True).row(0, named=True)
        bc = boundary_chains(ctx, x)
        eager = first["eager_ops"] or []
        evidence = Evidence(
            compiled_function=outer, calls=calls, breaks=x.height,
            regions_per_call=round(1 + x.height / calls, 2) if calls else None,
            resumed_regions=sorted(x["name"].unique().to_list()),
            break_op=eager[0] if eager else None, eager_ops=eager[:10],
            syncs_with_gpu=bool(x["sync"].any()), source=first["source"],
            eager_host_time_per_break_us=round(float(x["eager_ns"].fill_null(0).mean()) / 1000, 3),
            graph_launch_interval_us=round(launch_interval(ctx) / 1000, 3),
            kernels_fusable_across_break=int(bc.group_by("chain").len()["len"].max()) if bc.height else 0,
            fusion_savings_us=round(float(removed_per_step(_fusion(ctx, x), ctx.steps)["removed"].sum()) / 1000, 3),
            savings_per_step_us={str(s): round(r / 1000, 3) for s, r in rem.rows()},
        )
        steps = sorted(x["step"].unique().to_list())
        title = (f"Graph break in {outer}: {evidence.regions_per_call:g} graphs per call"
                 + (f", broken at {evidence.break_op}" if evidence.break_op else ""))
        # cost: the span from the first graph's end (host or GPU, whichever first) to the resumed graph's first
        # launch or kernel (whichever last), plus the kernels one graph would fuse across the break
        span = (pl.max_horizontal("first_launch", pl.col("b_start").fill_null(0))
                - pl.min_horizontal("gap_ts", pl.col("a_end").fill_null(pl.col("gap_ts")))).clip(lower_bound=0)
        cost = int(x.select(span.sum()).item()) + (int(bc["dur"].sum()) if bc.height else 0)
        out.append(ctx.finding(cost_ns=cost,
                               savings_ns=savings, count=x.height, steps=steps, evidence=evidence, title=title))
    return out


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the break's host time is removed — every host row between the first
    graph's call and the first launch of the graph resumed after it (the eager statement, the resumed frame's
    guards and cache lookup) leaves the host path, and a sync made there no longer waits. One graph fuses the
    pointwise/reduction kernels on both sides of each break (`boundary_chains`): they run in the elementwise-chain
    rule's fused time, shared in proportion to their time; the rest of both graphs' device work still runs."""
    b = _breaks(ctx)
    if b.height == 0:
        return None
    h = ctx.trace.host.select("i", "tid")
    sp = b.join(h, on="i", how="left").select("tid", ts=pl.col("gap_ts"), end=pl.col("first_launch")).filter(
        pl.col("end") > pl.col("ts"))
    sy = sync_calls(ctx.trace).select("i", "tid", "ts").sort("ts")
    sy = sy.join_asof(sp.sort("ts").rename({"ts": "_s", "end": "_e"}), left_on="ts", right_on="_s", by="tid",
                      strategy="backward", check_sortedness=False).filter(pl.col("ts") < pl.col("_e"))
    ch = boundary_chains(ctx, b)
    fused: dict[int, int] = {}
    if ch.height:
        per = per_chain(ch).select("chain", (pl.col("fused_time") / pl.col("time")).alias("_r"))
        k = ch.join(per, on="chain").select("i", (pl.col("dur") * pl.col("_r").clip(0, 1)).cast(pl.Int64).alias("d"))
        fused = dict(zip(k["i"].cast(pl.Int64).to_list(), k["d"].to_list(), strict=True))
    return Transform(NAME, host_spans=spans(sp), no_wait=sy["i"].cast(pl.Int64).to_list(), gpu_dur=fused)
