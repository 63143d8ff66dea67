"""TV101 launch-bound: the GPU idles because the CPU launches kernels too late.

## What it detects
GPU idle gaps after which the next kernel's launch call (`cudaLaunchKernel`, `cuLaunchKernel`, …) started
only once the GPU was already idle: the CPU was late and the launch queue was empty (HTA's `host_wait`
idle category; queue depth 0 in torch's `BasicEvaluation`). The cost is the time the classifier labels
`cpu_launch` inside the analysed steps (gaps explained by a host sync or the DataLoader are left to
`host-sync` and `input-bound`).

## Why it is slow
Every eager op pays a fixed CPU cost — Python call, dispatcher, argument checks, output allocation and the
launch itself, a few µs each. When kernels run for less time than that, the CPU cannot keep the GPU queue
full, and the GPU waits between kernels: the job is CPU-bound (typical of small batches, e.g. decoding
a few tokens at a time). Faster GPUs make it worse: the kernels shrink, the CPU cost does not.

## How to fix
Launch fewer, larger pieces of work. Capture the step with CUDA Graphs — `torch.compile(mode="reduce-overhead")`
or `torch.cuda.graphs` — so one `cudaGraphLaunch` replays hundreds of kernels; let `torch.compile` fuse
chains of tiny ops; raise the batch size so each kernel does more work per launch; replace Python loops of
tiny ops by batched/vectorised ops (`torch._foreach_*`, fused optimizers).

The fix text is conditioned on what the steps show. A Python loop over items (`traceview/analyses/loops.py`: a
short sequence of top-level ops repeated back to back at least 16 times, either starting with a slice of one
tensor — the rows of a batch — or all elementwise on tensors whose shapes change — a list of parameters; a loop
over rows whose iterations differ by a branch, e.g. a random flip, is found by the slice each iteration takes,
with the ops only some iterations run) that takes at least 10 % of the window is named first, with its batched form (one call over the batch, `torch.vmap`;
`torch._foreach_lerp_` / `_foreach_mul_` for an EMA or a manual update). Steps that block on the GPU (`.item()`,
`torch.where(cond)`, boolean indexing) are said next: a CUDA graph cannot hold a sync, so capture covers only the
stretches between them, and a data-dependent shape has to become static (a fixed capacity, masking,
`nonzero_static`) first.

A recurrence unrolled in Python (a loop whose body calls `aten::gru_cell` / `lstm_cell` / `rnn_*_cell`: each
iteration takes the hidden state the previous one returned) is named with the sequence op (`nn.GRU` over the whole
sequence) or CUDA-graph capture instead, never batching over its steps, and priced as capture.

Where a loop over rows or tensors is named first, the finding's saving is that loop batched (the `batch` variant: every iteration
after the first leaves the host path, with the backward's matching run of autograd nodes for a loop over rows, and
each kernel it launched keeps only its time beyond the shortest of its name); `--what-if launch-bound:graphs`
prices CUDA-graph capture instead, the saving everywhere else.

## Evidence
Per step: the `cpu_launch` time (GPU idle gaps whose next activity was launched after the gap began), the
number of such gaps, kernels per ms, the median kernel time against the median CPU time of the ops that
launch them (short kernels behind long CPU ops confirm the diagnosis), the ops most often found right after
a late gap, and the longest gap (time window, stream). Fires when the `cpu_launch` share of the analysed
window reaches `moderate_pct`; `error` from `high_pct`.

## Options
- `moderate_pct` (3.0): share of step time at which a finding is a warning — XProf "kernel launch" moderate threshold.
- `high_pct` (15.0): share at which it is an error — XProf "kernel launch" high threshold.

## References
- HTA idle-time breakdown, `host_wait` (hta/analyzers/breakdown_analysis.py) — https://github.com/facebookresearch/HolisticTraceAnalysis.
- XProf overview page, kernel-launch thresholds 3 %/15 % — https://github.com/openxla/xprof (overview page recommendations).
- torch.profiler `_utils.BasicEvaluation` queue depth — https://github.com/pytorch/pytorch (torch/profiler/_utils.py).
- TraceLens short-kernel study (`--short_kernel_threshold_us` 10) — https://github.com/AMD-AGI/TraceLens.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np
import polars as pl

from traceview.analyses.classify import idle_gaps, sync_calls
from traceview.analyses.decoding import forward_only
from traceview.analyses.features import Features
from traceview.analyses.loops import BATCHED_KINDS, batched_spans, item_loops, loop_runs
from traceview.analyses.param_work import OPT_STEP_RE
from traceview.analyses.replay import Transform, span_coverage
from traceview.analyses.replay_graph import KINDS
from traceview.analyses.rowid import by_id, join_by_id
from traceview.analyses.windows import step_of
from traceview.engine import IN_MEMORY
from traceview.evidence import UNSET, Meta, OpCount, ProfilerNote, Span, UnsetType
from traceview.frames import dropnull, members, pick
from traceview.ruleapi import Finding, RuleContext, gpu_busy_per_step_ns, profiler_source_text, xprof_severity

CODE = "TV101"
NAME = "launch-bound"
CLASS = "cpu_launch"  # the classifier class whose time a fix of these findings removes
FIX_REMOVES_CLASS = True  # the GPU idles for this reason only: a fix removes every instant of CLASS
SEVERITY = "warning"
TITLE = "GPU idles between kernels because the CPU launches them late"
OPTIONS = {
    **xprof_severity("kernel-launch"),
}


class LongestGap(Span, kw_only=True):
    """The longest late gap and the activity after it."""

    gap_us: Annotated[float, Meta(description="its length (µs)")]
    stream: Annotated[int | None, Meta(description="the stream of the activity after it")]
    next_kernel: Annotated[str | None, Meta(description="that activity's name")]
    next_op: Annotated[str | None, Meta(description="the host op that launched it")]


class ItemLoop(msgspec.Struct, kw_only=True):
    """The largest loop over items (analyses/loops.py) in the analysed steps."""

    kind: Annotated[str, Meta(description="`rows`: over the rows of one tensor; `tensors`: over a list of tensors; "
                                          "`recurrence`: over time steps, through a recurrent cell")]
    ops: Annotated[list[str], Meta(description="one iteration's top-level ops")]
    iterations_per_step: Annotated[float, Meta(description="iterations per analysed step")]
    host_us_per_step: Annotated[float, Meta(description="the loop's traced host time per step (µs)")]
    optional_ops: Annotated[list[str] | UnsetType, Meta(
        description="ops only some iterations run (a branch in the body), when there are any")] = UNSET
    optimizer: Annotated[str | UnsetType, Meta(
        description="the torch.optim class whose `Optimizer.step` span holds the loop (its single-tensor update), "
                    "when one does")] = UNSET


class Evidence(msgspec.Struct, kw_only=True):
    cpu_launch_us: Annotated[float, Meta(description="the classifier's `cpu_launch` time in the analysed steps (µs)")]
    cpu_launch_pct: Annotated[float, Meta(description="that as % of the analysed window")]
    late_gaps: Annotated[int, Meta(description="GPU idle gaps whose next activity was launched after the gap began")]
    kernels: Annotated[int, Meta(description="compute kernels in the analysed steps")]
    kernels_per_ms: Annotated[float | None, Meta(description="compute kernels per ms of the analysed window")]
    median_kernel_us: Annotated[float | None, Meta(description="median compute kernel time (µs)")]
    median_launching_op_cpu_us: Annotated[float | None, Meta(
        description="median host time of the ops that launch them (µs)")]
    ops_after_late_gaps: Annotated[list[OpCount], Meta(description="the 5 ops most often found right after a late gap")]
    per_step_us: Annotated[dict[str, float], Meta(description="`cpu_launch` time per step (µs), by step number")]
    longest_gap: Annotated[LongestGap | None, Meta(description="the longest late gap")]
    profiler: Annotated[ProfilerNote | UnsetType, Meta(
        description="the profiler's share of the idle, when it lowers what a fix saves")] = UNSET
    syncs_per_step: Annotated[float | UnsetType, Meta(
        description="blocking calls per analysed step (a CUDA graph cannot hold one), when there are any")] = UNSET
    loop: Annotated[ItemLoop | UnsetType, Meta(
        description="a Python loop over items that launches much of the step, when there is one")] = UNSET
    sync_op: Annotated[str | None | UnsetType, Meta(
        description="the op most of them are made in (aten::nonzero: a data-dependent shape), when known")] = UNSET
FIX = ("The CPU is the bottleneck: each eager op costs several µs of Python, dispatcher and launch work, and "
       "these kernels finish faster than the next one is launched, so the GPU queue runs dry. Launch fewer, "
       "larger pieces of work: capture the step with CUDA Graphs (torch.compile(mode=\"reduce-overhead\") or "
       "torch.cuda.graphs) so one launch replays many kernels, let torch.compile fuse the tiny ops, raise the "
       "batch size, and replace Python loops of small ops with batched or foreach ops.")


def check(ctx: RuleContext) -> list[Finding]:
    trace, steps, window = ctx.trace, ctx.steps, ctx.window_ns
    cl = ctx.class_time("cpu_launch")
    cost = int((cl["end"] - cl["ts"]).sum()) if cl.height else 0
    pct = ctx.pct(cost)
    if cost == 0 or pct < ctx.options["moderate_pct"]:
        return []
    lo, hi = ctx.lo, ctx.hi
    # (the late gaps' times alone: what the evidence reads of them; a filter copies every column it has)
    late = idle_gaps(trace, lo, hi).lazy().filter(pl.col("late")).select("ts", "end").collect(**IN_MEMORY)
    gaps = step_of(late, steps)
    del late
    gaps = gaps.filter(pl.col("step").is_not_null())
    per_step = cl.group_by("step").agg((pl.col("end") - pl.col("ts")).sum().alias("t")).sort("step")
    fired = per_step.filter(pl.col("t") > 0)["step"].to_list()
    del cl  # (the class's segments: every late gap's, read by the lines above only)
    # (the kernels' time and op alone: the mask reads the kind and start, the filter copies the two columns read)
    k = pick(trace.gpu, "dur", "op").filter(
        trace.gpu.select((pl.col("kind") == "compute") & (pl.col("ts") >= lo) & (pl.col("ts") < hi)).to_series())
    # the launching ops' rows by id (not an is_in over every host event)
    ops = by_id(trace.host, dropnull(k["op"]).unique(), pl.col("i").alias("_hit"), "dur")
    ops = ops.filter(pl.col("_hit").is_not_null()) if ops["_hit"].null_count() else ops
    # (what the evidence reads of the kernels and their ops, before the next frame of every late kernel is built)
    n_k, k_med = k.height, float(k["dur"].median()) if k.height else None
    ops_med = float(ops["dur"].median()) if ops.height else None
    del k, ops
    # the activities right after a late gap: which ops the CPU was late to launch
    count = gaps.height
    longest = gaps.sort("end", descending=False).with_columns(g=pl.col("end") - pl.col("ts")).sort("g", descending=True).head(1)
    lg = longest.to_dicts()[0] if longest.height else {}
    after = trace.gpu.lazy().filter(
        pl.col("ts").is_in(members(gaps["end"])) & pl.col("kind").is_in(["compute", "comm", "memcpy", "memset"])
    ).select("i", "ts", "op").collect(**IN_MEMORY)  # (the next kernel's name and stream: its row alone, below)
    del gaps  # (every late gap's row: read above only)
    after = join_by_id(after, "op", trace.host, pl.col("name").alias("op_name"))
    top_after = (after.group_by("op_name").len().sort(["len", "op_name"], descending=[True, False], maintain_order=True).head(5))
    nxt = (join_by_id(after.filter(pl.col("ts") == lg.get("end")).head(1), "i", trace.gpu, "name", "stream").to_dicts()
           if lg else [])
    ms = window / 1e6
    evidence = Evidence(
        cpu_launch_us=round(cost / 1000, 3), cpu_launch_pct=round(pct, 2), late_gaps=count,
        kernels=n_k, kernels_per_ms=round(n_k / ms, 2) if ms else None,
        median_kernel_us=round(k_med / 1000, 3) if k_med is not None else None,
        median_launching_op_cpu_us=round(ops_med / 1000, 3) if ops_med is not None else None,
        ops_after_late_gaps=[OpCount(op=r["op_name"], count=r["len"]) for r in top_after.to_dicts()],
        per_step_us={str(s): round(t / 1000, 3) for s, t in per_step.rows()},
        longest_gap=(LongestGap(start_us=round(lg["ts"] / 1000, 3), end_us=round(lg["end"] / 1000, 3),
                                gap_us=round(lg["g"] / 1000, 3), stream=nxt[0]["stream"] if nxt else None,
                                next_kernel=nxt[0]["name"] if nxt else None, next_op=nxt[0]["op_name"] if nxt else None)
                     if lg else None),
    )
    # the finding reads only these: the per-kernel frames (every kernel of a host-bound step) go before the
    # pricing and the layer lookup below, which would otherwise run on top of them
    kernel_ids = after["i"]
    del per_step, after, top_after, longest, nxt
    severity, surviving, note = _profiler_check(ctx, cost)
    if note:
        evidence.profiler = note
    n_sync, sync_op = step_syncs(ctx)
    if n_sync:
        evidence.syncs_per_step, evidence.sync_op = round(n_sync / max(ctx.steps.height, 1), 2), sync_op
    loop = item_loop(ctx)
    if loop is not None:
        evidence.loop = loop
    return [ctx.finding(cost_ns=cost, savings_ns=surviving, count=count, steps=fired, evidence=evidence,
                        severity=severity, fix=loop_text(loop) + fix_for(ctx.features) + sync_text(evidence),
                        kernel_ids=kernel_ids)]


def step_starts(ctx: RuleContext) -> tuple[int, ...]:
    """The analysed steps' host starts: a loop over items runs inside one step."""
    col = "cpu_ts" if "cpu_ts" in ctx.steps.columns else "ts"
    return tuple(int(x) for x in ctx.steps[col].drop_nulls().sort().to_list())


def item_loop(ctx: RuleContext) -> ItemLoop | None:
    """The largest loop over items whose host time is at least LOOP_SHARE of the analysed window, else None."""
    loops = item_loops(ctx.trace, ctx.lo, ctx.hi, step_starts(ctx))
    if loops.height == 0 or loops["host_ns"][0] < LOOP_SHARE * ctx.window_ns:
        return None
    top, n = loops.row(0, named=True), max(ctx.steps.height, 1)
    return ItemLoop(kind=top["kind"], ops=top["ops"], iterations_per_step=round(top["iterations"] / n, 2),
                    host_us_per_step=round(top["host_ns"] / n / 1000, 3), optional_ops=top["optional"] or UNSET,
                    optimizer=_optimizer_of(ctx, top) or UNSET)


def _optimizer_of(ctx: RuleContext, top: dict) -> str | None:
    """The optimizer class whose `Optimizer.step#<Class>.step` spans hold most of this loop's runs, else None: a
    loop over tensors inside torch.optim's step is its single-tensor update (`foreach=False`), fixed by the
    optimizer's own flag (unfused-optimizer prices it), not by rewriting a loop the user did not write."""
    if top["kind"] != "tensors":
        return None
    runs = (loop_runs(ctx.trace, ctx.lo, ctx.hi, step_starts(ctx))
            .filter((pl.col("tid") == top["tid"]) & (pl.col("kind") == "tensors")).select("ops", "ts"))
    ts = np.array([t for o, t in runs.iter_rows() if o == top["ops"]], dtype=np.int64)  # (a few runs a step)
    h = ctx.trace.host
    spans = (h.lazy().filter((pl.col("cat") == "user_annotation") & (pl.col("tid") == top["tid"])
                             & (pl.col("ts") < ctx.hi) & (pl.col("end") > ctx.lo))
             .select("name", "ts", "end").filter(pl.col("name").str.contains(OPT_STEP_RE))
             .sort("ts").collect(**IN_MEMORY))
    if ts.size == 0 or spans.height == 0:
        return None
    k = np.searchsorted(spans["ts"].to_numpy(), ts, side="right") - 1
    inside = (k >= 0) & (ts < spans["end"].to_numpy()[np.maximum(k, 0)])
    if 2 * int(inside.sum()) <= ts.size:
        return None
    names = spans["name"].gather(pl.Series(k[inside])).str.extract(OPT_STEP_RE)
    return str(names.mode().sort()[0])


#: a loop over items is named when its host time is at least this share of the analysed window
LOOP_SHARE = 0.1


def loop_text(loop: ItemLoop | None) -> str:
    """The loop the launches come from and its batched form, before the general advice."""
    if loop is None:
        return ""
    ops, k, ms = " → ".join(loop.ops), f"{loop.iterations_per_step:g}", loop.host_us_per_step / 1000
    if loop.kind == "recurrence":
        return (f"Many of the launches come from a recurrence unrolled in Python: {ops} runs {k} times a step "
                f"({ms:.1f} ms of host time a step, traced), each iteration on the hidden state the previous one "
                "returned, so it cannot be batched over its steps. Run the sequence in one call where the cell is "
                "PyTorch's (nn.GRU / nn.LSTM / nn.RNN over the whole sequence: cuDNN runs the recurrence on the GPU), "
                "else capture the step in a CUDA graph (torch.cuda.graphs, or torch.compile(mode=\"reduce-overhead\")): "
                "one launch then replays every iteration's kernels. Otherwise: ")
    if loop.kind == "rows":
        branch = "" if not loop.optional_ops else (
            f" {', '.join(loop.optional_ops)} runs in some iterations only: a branch, which the batched form runs on "
            "every row and keeps where the row's condition holds (torch.where(mask[:, None, None, None], "
            "x.flip(-1), x) for a random flip).")
        return (f"Many of the launches come from a Python loop over the rows of one tensor: {ops} runs {k} times a "
                f"step ({ms:.1f} ms of host time a step, traced), each iteration on its own slice. One batched call "
                "over the whole tensor (the loss with its reduction over the batch, torch.vmap for a per-sample "
                f"function) launches once where the loop launches {k} times, forward and backward.{branch} "
                "Otherwise: ")
    if isinstance(loop.optimizer, str):
        opt = loop.optimizer
        return (f"Many of the launches come from {opt}.step's own loop over the parameters, its single-tensor update "
                f"(foreach=False): {ops} runs {k} times a step ({ms:.1f} ms of host time a step, traced), one "
                f"parameter at a time. Construct it with {opt}(..., fused=True) where torch.optim has a fused "
                f"kernel for it (Adam, AdamW, SGD), else foreach=True: a few multi-tensor kernels for the whole "
                "update (unfused-optimizer prices each). Otherwise: ")
    return (f"Many of the launches come from a Python loop over a list of tensors: {ops} runs {k} times a step on "
            f"tensors of changing shapes ({ms:.1f} ms of host time a step, traced), e.g. an EMA or a manual update "
            "written tensor by tensor. The torch._foreach_* ops run it as a few multi-tensor kernels (an EMA: "
            "torch._foreach_lerp_(ema_tensors, model_tensors, 1 - decay); _foreach_mul_ / _foreach_add_ otherwise). "
            "Otherwise: ")


def step_syncs(ctx: RuleContext) -> tuple[int, str | None]:
    """(blocking calls inside the analysed steps, the innermost op most of them are made in)."""
    s = sync_calls(ctx.trace).filter((pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
    if s.height == 0:
        return 0, None
    ops = join_by_id(s.select("op").filter(pl.col("op").is_not_null()), "op", ctx.trace.host, "name")
    top = ops.group_by("name").len().sort(["len", "name"], descending=[True, False], maintain_order=True).head(1)
    return s.height, (top["name"][0] if top.height else None)


#: ops whose sync reads a data-dependent output size (torch.where(cond), boolean-mask indexing, nonzero, unique)
DATA_DEPENDENT = ("aten::nonzero", "aten::argwhere", "aten::masked_select", "aten::unique", "aten::_unique",
                  "aten::repeat_interleave")


def sync_text(ev: Evidence) -> str:
    """What the fix must do first when the steps block on the GPU: a CUDA graph cannot hold a sync, so capture
    (what the fix text names) covers only the stretches between them; a data-dependent shape is why most are made."""
    if not isinstance(ev.syncs_per_step, float) or ev.syncs_per_step < 1:
        return ""
    op = ev.sync_op if isinstance(ev.sync_op, str) else None
    where = f" in {op}" if op else ""
    if op is not None and op.startswith(DATA_DEPENDENT):
        return (f" The steps also sync {ev.syncs_per_step:g} times each{where} (an output size that depends on the "
                "data: torch.where(cond), boolean masks, nonzero), and a CUDA graph cannot hold a sync: make those "
                "shapes static first (a fixed capacity, masking by multiplication, nonzero_static), then capture.")
    return (f" The steps also sync {ev.syncs_per_step:g} times each{where}, and a CUDA graph cannot hold a sync: "
            "capture covers only the stretches between them unless values are read on the host (.item(), .cpu(), "
            "a tensor used as a bool) every few steps instead.")


def _profiler_check(ctx: RuleContext, cost: int) -> tuple[str | None, float, ProfilerNote | None]:
    """(severity override: always None, savings, note). The profiler adds host time to every recorded event, and
    on a host-bound step that time is GPU idle the unprofiled run does not have. The rule's own estimate of what a
    fix would save without the profiler is the launch-bound time minus the profiler's cost, and at most the
    unprofiled step's idle (unprofiled step − GPU busy time). The finding's saving and severity are the replay's
    (sections/fixrunner.py, which also says when the profiler's cost explains the idle), so nothing is lowered here."""
    n = ctx.steps.height
    prof = ctx.profiler
    over = float(prof.get("overhead_ns") or 0.0) * n
    unprof = float(prof.get("unprofiled_step_ns") or 0.0) * n
    if not n or not unprof:
        return None, float(cost), None
    gpu = gpu_busy_per_step_ns(prof) * n
    left = max(0.0, min(cost - over, unprof - gpu))
    left_pct = 100.0 * left / unprof
    how = profiler_source_text(prof)
    note = ProfilerNote(source=prof.get("source"), overhead_per_step_us=round(over / n / 1000, 3),
                        unprofiled_step_us=round(unprof / n / 1000, 3), unprofiled_savings_pct=round(left_pct, 2))
    if left >= cost:
        return None, float(cost), None
    note.note = (f"part of this idle is the profiler's own cost ({how}: {over / n / 1000:,.1f} µs per step); "
                    f"a fix would save about {left_pct:.0f} % of the unprofiled step")
    return None, left, note


def fix_for(f: Features) -> str:
    """The fix, conditioned on what the trace already does: never recommend what is in use."""
    if f.cuda_graphs:
        return ("The step already replays CUDA graphs, so the launches left are outside them: the GPU idles between "
                "graph replays while Python runs the rest of the step. Capture more of the step into the graph "
                "(the optimizer step, the loss, the data copy into static buffers), remove graph breaks that split "
                "it, move host work off the critical path, or raise the batch size so each replay does more work.")
    if f.compiled or f.triton_kernels:
        return ("The step is already compiled (torch.compile regions / Triton kernels) but still launched one kernel "
                "at a time: the next step is CUDA graphs — torch.compile(mode=\"reduce-overhead\") (or "
                "\"max-autotune\") captures the compiled region so one launch replays it; fix graph breaks so "
                "larger regions compile, and raise the batch size so each kernel does more work.")
    opt = "" if (f.fused_optimizer or f.foreach_optimizer) else (
        " and replace Python loops of small ops with batched or foreach ops (AdamW(fused=True) / foreach=True)")
    return ("The CPU is the bottleneck: each eager op costs several µs of Python, dispatcher and launch work, and "
            "these kernels finish faster than the next one is launched, so the GPU queue runs dry. Launch fewer, "
            "larger pieces of work: capture the step with CUDA Graphs (torch.compile(mode=\"reduce-overhead\") or "
            "torch.cuda.graphs) so one launch replays many kernels, let torch.compile fuse the tiny ops, raise the "
            f"batch size{opt}.")


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as the finding advises it: the loop over items batched where the fix text names one first
    (`batched`), else CUDA-graph capture of the steps (`captured`)."""
    if _batchable(item_loop(ctx)):
        t = batched(ctx)
        if t is not None:
            return t
    return captured(ctx)


def fix_variants(ctx: RuleContext) -> dict[str, Transform]:
    """{variant: the fix made that way}: `graphs` (CUDA-graph capture of the steps) and, where the steps hold a loop
    over items, `batch` (that loop batched)."""
    return {k: t for k, t in (("batch", batched(ctx) if _batchable(item_loop(ctx)) else None),
                              ("graphs", captured(ctx))) if t is not None}


def _batchable(loop: ItemLoop | None) -> bool:
    """Whether the steps hold a loop one batched call can replace (`loops.BATCHED_KINDS`; a recurrence is not)."""
    return loop is not None and loop.kind in BATCHED_KINDS


def batched(ctx: RuleContext) -> Transform | None:
    """The loop over items batched, as a replay transformation: every iteration after the first leaves the host
    path with its launches and the Python between them (`loops.batched_spans`), and each kernel those iterations
    launched keeps only its time beyond the shortest of its name in the trace: the data it moves or computes
    stays (in the batched call's kernels), the fixed cost of one more small kernel goes."""
    spans = batched_spans(ctx.trace, ctx.lo, ctx.hi, step_starts(ctx))
    if not spans:
        return None
    g = ctx.trace.gpu.select("i", "name", "dur", "launch", "kind").filter(
        pl.col("launch").is_not_null() & (pl.col("kind") == "compute"))
    g = join_by_id(g, "launch", ctx.trace.host, pl.col("tid").alias("_tid"), pl.col("ts").alias("_lts"))
    # (the kernels launched inside the spans: the replay's own test of a row inside a removed span)
    covered = span_coverage(np.asarray(spans, np.int64), g["_tid"].to_numpy())
    tid, lts = g["_tid"].to_numpy(), g["_lts"].to_numpy()
    floor = ctx.trace.gpu.group_by("name").agg(pl.col("dur").min().alias("_floor"))
    k = g.filter(pl.Series(covered(tid, lts + 1) > covered(tid, lts))).join(floor, on="name", how="left")
    dur = dict(zip(k["i"].to_list(), (k["dur"] - k["_floor"]).clip(lower_bound=0).to_list(), strict=True))
    return Transform(NAME, host_spans=tuple(spans), gpu_dur=dur)


def captured(ctx: RuleContext) -> Transform | None:
    """CUDA-graph replay of the steps — the per-launch host cost (the
    launching ops, their launches and their Python) leaves the host path inside the analysed steps; blocking
    calls, the DataLoader and the device work stay. The whole step is taken as the captured region, so this
    bounds what capture can save; on a decode loop, each token's model forward (analyses/decoding.py)."""
    launched = pick(ctx.trace.gpu, "op").filter(pl.col("op").is_not_null())["op"].unique()
    sync = sync_calls(ctx.trace)["i"]
    cats = [c for k in ("runtime", "op") for c in KINDS[k]]
    keep = ((pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi) & pl.col("cat").is_in(cats)
            & (pl.col("i").is_in(members(launched)) | pl.col("op").is_in(members(launched)))
            & ~pl.col("i").is_in(members(sync)) & ~pl.col("name").str.starts_with("ProfilerStep"))
    # only the ids leave the filter (a frame's filter copies every column it holds: on a host-bound trace nearly
    # every host row, five columns of them)
    rows = ctx.trace.host.select(pl.col("i").filter(keep).cast(pl.Int64))["i"]
    if rows.len() == 0:
        return None

    # a decode loop's graph holds each token's model forward, not the loop's own work between forwards
    # (ids as an array: on 10 M tiny events millions of rows, ~40 bytes each as a list of Python ints)
    return Transform(NAME, host_removed=forward_only(ctx, rows.to_numpy()))
