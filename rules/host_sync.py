"""TV102 host-sync: calls that block the host until the GPU has drained its queue.

## What it detects
Host calls that wait for the GPU — `cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`,
synchronous `cudaMemcpy`/`cudaMemset`, Kineto `cuda_sync` events (Stream/Event/Context Sync) and their HIP
twins — each attributed to the op that caused it (the outermost ATen op around the call:
`aten::item`/`_local_scalar_dense` = `.item()`, `aten::nonzero`, boolean-mask indexing (`aten::index`,
`masked_select`), `aten::to`/`copy_` device→host = `.cpu()`/`.tolist()`/`.numpy()`, `aten::is_nonzero` = a GPU
tensor used as a Python bool, and the `.item()` between a `GradScaler`'s unscale (`_amp_foreach_non_finite_check_
and_unscale_`) and its scale update = `GradScaler.step()` reading `found_inf`) and to the Python source
line when the trace has stacks (`with_stack=True`: the nearest Python frame outside `torch/`). Findings are
grouped by (cause, source line). An `.item()` on a CPU tensor makes no sync call, so it is not a finding.

## Why it is slow
GPU work is asynchronous: Python normally returns as soon as a kernel is queued, so the CPU runs ahead and
keeps the queue full. A sync makes the CPU wait until every queued kernel has finished; the queue is then
empty, and the GPU idles while the CPU wakes up, runs the Python that follows and launches the next kernel.
Data-dependent shapes (`nonzero`, masks) and reading values on the host (`.item()`,
`.cpu()`, `print(t)`) force this on every step.

## How to fix
Keep values on the GPU: accumulate metrics as tensors and call `.item()`/`.cpu()` once every N steps or
at the end; replace `nonzero`/boolean masks by fixed-shape ops (`torch.where`, masking by multiplication,
`nonzero_static`); pass tensors rather than Python numbers to the next op; drop debugging `print`s and
explicit `torch.cuda.synchronize()` calls from the training loop; use `non_blocking=True` copies into pinned
memory plus a CUDA event when a host value is truly needed. A GPU tensor in an `if`/`or` is a sync too (Hugging
Face's `Trainer` checks `isnan(loss) or isinf(loss)` every step unless `logging_nan_inf_filter=False`).
`GradScaler.step()`'s sync is fp16 loss scaling's own: bf16 autocast needs no scaler.

## Evidence
Per (cause, source line): the number of blocking calls, their call names, the ATen op and the Python API
(`<built-in method item …>`), the source line, syncs per step, and the cost: the GPU idle time from the
sync's start until the next GPU activity begins (the classifier's `host_sync` time attributed to that sync).
An idle gap over 1 ms that ends with work queued before it began is left out: the GPU was waiting for work the
trace does not hold (e.g. a collective enqueued before recording started, still waiting for another rank), not
for the host. The costliest occurrence gives the time window and stream. Severity from the group's share of the window.

## Options
- `moderate_pct` (3.0): share of step time at which a group is a warning — XProf's moderate threshold for avoidable host time.
- `high_pct` (15.0): share at which it is an error — XProf's high threshold.

## References
- Nsight Systems expert rules `cuda_api_sync`, `cuda_memcpy_sync` — Nsight Systems User Guide, Expert Systems Analysis: https://docs.nvidia.com/nsight-systems/UserGuide/.
- torch.profiler `_pattern_matcher.py` source-location rule (nearest frame outside `torch/`) — https://github.com/pytorch/pytorch (torch/profiler/_pattern_matcher.py).
- Kineto `cuda_sync` events (kineto PR #866); pytorch#12461 (which ops sync) — https://github.com/pytorch/kineto/pull/866, https://github.com/pytorch/pytorch/issues/12461.
- HTA critical path sync edges — https://github.com/facebookresearch/HolisticTraceAnalysis.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.classify import idle_gaps, sync_calls, sync_ramps, sync_windows
from traceview.analyses.replay import Transform
from traceview.analyses.replay_graph import build
from traceview.analyses.tree import ancestor_where
from traceview.analyses.windows import host_step_of
from traceview.evidence import UNSET, Meta, UnsetType
from traceview.frames import pick
from traceview.ingest.categories import RUNTIME_CATS
from traceview.model import STEP_RE
from traceview.ruleapi import XPROF_SEVERITY, Finding, RuleContext

CODE = "TV102"
NAME = "host-sync"
CLASS = "host_sync"  # the classifier class whose time a fix of these findings removes
FIX_REMOVES_CLASS = True  # the GPU idles for this reason only: a fix removes every instant of CLASS
SEVERITY = "warning"
TITLE = "Host blocks on the GPU; the GPU idles until the next launch"
OPTIONS = {
    **XPROF_SEVERITY,
}
ITEM = ["aten::item", "aten::_local_scalar_dense"]
# (`torch.where(cond)`, the one-argument form, is `nonzero(as_tuple=True)`: the three-argument select never syncs)
NONZERO = ["aten::nonzero", "aten::nonzero_static", "aten::argwhere", "aten::nonzero_numpy", "aten::where"]
MASK = ["aten::index", "aten::masked_select", "aten::index_put_", "aten::_index_put_impl_", "aten::masked_scatter_"]
COPY = ["aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::contiguous", "aten::clone"]
SRC_RE = r"\.py\(\d+\)"
TORCH_RE = r"(^|/)torch/"
FIXES = {
    ".item()": ("`.item()` copies one value to the host and waits for every queued kernel to finish first; the GPU "
                "then idles until Python launches the next op. Keep the value on the GPU (accumulate loss/metrics "
                "as tensors, log every N steps) or pass the tensor itself to the next op."),
    "torch.nonzero": ("`nonzero` has a data-dependent output size, so the host must read the count from the GPU "
                      "(a sync) before it can allocate the result. Use fixed-shape ops instead: torch.where, "
                      "multiplying by the mask, or nonzero_static(size=...)."),
    "boolean-mask indexing": ("`x[mask]` runs nonzero under the hood: the output size depends on the data, so the "
                              "host waits for the GPU. Use torch.where(mask, x, 0) or masked arithmetic with a fixed "
                              "shape, or gather with precomputed indices."),
    ".cpu() / .tolist() / .numpy()": ("A device-to-host copy into pageable memory blocks the host until the copy, "
                                      "and every kernel queued before it, has finished. Move results to the host "
                                      "rarely (every N steps), or copy with non_blocking=True into a pinned buffer "
                                      "and wait on a CUDA event only when the value is needed."),
    ".to(device) from pageable memory": ("A host-to-device copy from pageable memory is staged and followed by a "
                                         "stream sync. Pin the source (DataLoader(pin_memory=True)) and copy with "
                                         "non_blocking=True so the copy overlaps compute."),
}
SCALER = "GradScaler.step() (found_inf.item())"
FIXES[SCALER] = (
    "GradScaler.step() reads found_inf with .item() to decide whether to skip the optimizer step (fp16 loss "
    "scaling): one sync per step, inherent while the model trains in fp16 with a GradScaler; it costs little when "
    "the host is already behind the GPU. To remove it, train in bf16 (torch.autocast(\"cuda\", "
    "dtype=torch.bfloat16)): FP32's exponent range, so no loss scaling and no GradScaler (Ampere GPUs and later).")
BOOL = "a GPU tensor used as a Python bool"
FIXES[BOOL] = (
    "`if t:`, `t or u`, `while t` or `assert t` on a GPU tensor (aten::is_nonzero) reads its value on the host: the "
    "host waits for every queued kernel first. Hugging Face's Trainer does this every step with its default "
    "logging_nan_inf_filter=True (torch.isnan(loss) or torch.isinf(loss)): TrainingArguments("
    "logging_nan_inf_filter=False) removes it. In your own loop keep such checks on the GPU (torch.where, a flag "
    "tensor read every N steps).")
#: GradScaler's ops: the unscale (found_inf computed) before its step's `.item()`, the scale update after it
AMP_UNSCALE, AMP_UPDATE = "aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"
GENERIC_FIX = ("This call makes the CPU wait until the GPU has drained its queue, after which the GPU idles while "
               "the CPU launches new work. Remove the synchronisation from the hot loop (explicit "
               "torch.cuda.synchronize(), host reads of GPU values) or move it off the critical path.")


def _cause(root: pl.Expr, sync_name: pl.Expr, direction: pl.Expr) -> pl.Expr:
    return (pl.when(root.is_in(ITEM)).then(pl.lit(".item()"))
            .when(root.is_in(NONZERO)).then(pl.lit("torch.nonzero"))
            .when(root.is_in(MASK)).then(pl.lit("boolean-mask indexing"))
            .when(root.is_in(COPY) & (direction == "DtoH")).then(pl.lit(".cpu() / .tolist() / .numpy()"))
            .when(root.is_in(COPY) & (direction == "HtoD")).then(pl.lit(".to(device) from pageable memory"))
            .when(root.is_in(COPY)).then(pl.lit("tensor copy"))
            .when(root == "aten::is_nonzero").then(pl.lit(BOOL))
            .when(root.is_not_null()).then(pl.lit("sync inside ") + root)
            .when(sync_name.str.contains("DeviceSynchronize|CtxSynchronize|Context Sync"))
            .then(pl.lit("torch.cuda.synchronize()"))
            .otherwise(pl.lit("explicit ") + sync_name))


def attributed_syncs(trace, steps: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """One row per blocking sync in the steps: [i, name, ts, end, step, root, cause, api, source, cost]."""
    syncs = sync_calls(trace)
    if syncs.height == 0:
        return pl.DataFrame()
    syncs = host_step_of(syncs, steps, "ts").filter(pl.col("step").is_not_null())
    if syncs.height == 0:
        return pl.DataFrame()
    h = trace.host
    # the cause is the outermost ATen op (the one Python called); ProfilerStep#N spans are not ops (2021 format)
    step_re = STEP_RE
    hp = h.join(h.select(pl.col("i").alias("parent"), pl.col("cat").alias("_pcat"), pl.col("name").alias("_pname")),
                on="parent", how="left")
    outer = pl.col("_pcat").is_null() | (pl.col("_pcat") != "cpu_op") | pl.col("_pname").str.contains(step_re)
    root_cond = (pl.col("cat") == "cpu_op") & ~pl.col("name").str.contains(step_re) & outer
    root = ancestor_where(hp, syncs, root_cond, "root")
    src = ancestor_where(h, syncs, (pl.col("cat") == "python_function") & pl.col("name").str.contains(SRC_RE)
                         & ~pl.col("name").str.contains(TORCH_RE), "src")
    api = ancestor_where(h, syncs, (pl.col("cat") == "python_function")
                         & pl.col("name").str.starts_with("<built-in method"), "api")
    names = pick(h, "i", "name")
    # direction of the copy made by the same op (memcpy launched by the sync's innermost op)
    mc = (pick(trace.gpu, "op", "name", "kind").filter(pl.col("kind") == "memcpy").drop("kind")
          .with_columns(direction=pl.col("name").str.extract(r"(HtoD|DtoH|DtoD|HtoH)"))
          .group_by("op").agg(pl.col("direction").first()))
    s = (syncs.join(root, on="i", how="left").join(src, on="i", how="left").join(api, on="i", how="left")
         .join(names.rename({"i": "root", "name": "root_name"}), on="root", how="left")
         .join(names.rename({"i": "src", "name": "source"}), on="src", how="left")
         .join(names.rename({"i": "api", "name": "api_name"}), on="api", how="left")
         .join(mc, on="op", how="left"))
    s = s.with_columns(cause=_cause(pl.col("root_name"), pl.col("name"), pl.col("direction")))
    s = _scaler(h, steps, s)
    # cost: host_sync segments of the partition, each given to the sync window (or the ramp after it until the
    # queue is refilled) it starts in
    win = sync_windows(trace, pick(syncs, "i", "name", "ts", "end", "op", "tid")).sort("ts")
    claims = pl.concat([pick(win, "i", "ts", "end"), sync_ramps(trace, idle_gaps(trace, int(part["ts"].min()),
                                                                             int(part["end"].max())))])
    claims = claims.filter(pl.col("i").is_in(syncs["i"].implode())).sort("ts")
    hs = part.filter(pl.col("cls") == "host_sync").select("ts", (pl.col("end") - pl.col("ts")).alias("d")).sort("ts")
    got = (hs.join_asof(claims.select(pl.col("i").alias("_sync"), pl.col("ts").alias("_wts"), pl.col("end").alias("_wend")),
                        left_on="ts", right_on="_wts", strategy="backward")
           .filter(pl.col("ts") < pl.col("_wend")).group_by("_sync").agg(pl.col("d").sum().alias("cost")))
    s = s.join(got.rename({"_sync": "i"}), on="i", how="left").with_columns(pl.col("cost").fill_null(0))
    return s.join(pick(win, "i", "next_ts"), on="i", how="left")


def _scaler(h: pl.DataFrame, steps: pl.DataFrame, s: pl.DataFrame) -> pl.DataFrame:
    """`s` with the `.item()` syncs GradScaler.step() makes named so: those after the unscale op of their step and
    before the scale update that follows it (the step reads found_inf between the two; the update may fall in the
    next step, where the step boundary is the optimizer's step)."""
    amp = pick(h, "name", "ts").filter(pl.col("name").is_in([AMP_UNSCALE, AMP_UPDATE]))
    if amp.height == 0 or not s["cause"].eq(".item()").any():
        return s
    amp = host_step_of(amp, steps, "ts").filter(pl.col("step").is_not_null())
    un = amp.filter(pl.col("name") == AMP_UNSCALE).select(pl.col("ts").alias("_u"), pl.col("step").alias("_us"))
    up = h.select("name", "ts").filter(pl.col("name") == AMP_UPDATE).select(pl.col("ts").alias("_p"))
    nxt = un.select(pl.col("_u").alias("_n"))
    x = (s.select("i", "ts", "step").sort("ts")
         .join_asof(un.sort("_u"), left_on="ts", right_on="_u", strategy="backward")
         .join_asof(up.sort("_p"), left_on="ts", right_on="_p", strategy="forward")
         .join_asof(nxt.sort("_n"), left_on="ts", right_on="_n", strategy="forward")
         .filter((pl.col("_us") == pl.col("step"))  # (the recording may end before the last update)
                 & (pl.col("_n").is_null() | (pl.col("_p").is_not_null() & (pl.col("_n") > pl.col("_p"))))))
    return s.with_columns(cause=pl.when(pl.col("i").is_in(x["i"].implode()) & (pl.col("cause") == ".item()"))
                          .then(pl.lit(SCALER)).otherwise(pl.col("cause")))


COMPILE_FIX = ("These syncs are made by torch.compile itself — Dynamo/Inductor compiling a new graph and Triton "
               "benchmarking kernel configs (autotuning) inside the step — not by the training loop, so there is "
               "no sync to remove from your code. The cost is compilation: keep shapes stable (or mark dynamic "
               "dimensions with torch._dynamo.mark_dynamic / dynamic=True) so graphs are not recompiled every "
               "step, warm up before profiling, and cache compiled artifacts across runs.")


def _compile_finding(ctx: RuleContext) -> list[Finding]:
    """One info finding for the syncs made inside compilation/autotuning: attributed to the compiler."""
    cs = sync_calls(ctx.trace, compilation=True)
    if cs.height == 0:
        return []
    cs = host_step_of(cs, ctx.steps, "ts").filter(pl.col("step").is_not_null())
    if cs.height == 0:
        return []
    ev = Evidence(cause="torch.compile compilation / autotuning", sync_calls=dict(sorted(
        zip(*cs["name"].value_counts().select("name", "count").to_dict(as_series=False).values(), strict=True))),
        syncs_per_step=round(cs.height / ctx.steps.height, 2))
    return [ctx.finding(title="Syncs inside torch.compile compilation/autotuning (not the loop's)", severity="info",
                        steps=sorted(set(cs["step"].to_list())), count=cs.height, cost_ns=0, evidence=ev,
                        fix=COMPILE_FIX)]


class WorstSync(msgspec.Struct, kw_only=True):
    """The sync that idled the GPU longest."""

    start_us: Annotated[float, Meta(description="the sync call's start (µs, trace clock)")]
    sync_end_us: Annotated[float, Meta(description="its end (µs)")]
    next_gpu_us: Annotated[float | None, Meta(description="the start of the next GPU activity after it (µs)")]
    idle_us: Annotated[float, Meta(description="the GPU idle it caused (µs)")]
    step: Annotated[int, Meta(description="its step")]


class Evidence(msgspec.Struct, kw_only=True):
    cause: Annotated[str, Meta(description="what synced: the Python API or op (e.g. `.item()`), or the compiler")]
    op: Annotated[str | None | UnsetType, Meta(description="the outermost op around the syncs")] = UNSET
    python_api: Annotated[str | None | UnsetType, Meta(description="the Python API that made them")] = UNSET
    source: Annotated[str | None | UnsetType, Meta(
        description="the Python source line, when the trace has stacks")] = UNSET
    sync_calls: Annotated[dict[str, int], Meta(description="sync calls by runtime API name, most first")]
    syncs_per_step: Annotated[float | None, Meta(description="syncs per step")]
    worst: Annotated[WorstSync | UnsetType, Meta(description="the sync that idled the GPU longest")] = UNSET


def check(ctx: RuleContext) -> list[Finding]:
    s = attributed_syncs(ctx.trace, ctx.steps, ctx.part)
    if s.height == 0:
        return _compile_finding(ctx)
    nsteps = ctx.steps.height
    groups = (s.with_columns(source=pl.col("source").fill_null(""))
              .group_by("cause", "source")
              .agg(pl.len().alias("count"), pl.col("cost").sum(), pl.col("step").unique().sort().alias("steps"),
                   pl.col("name").value_counts(sort=True).alias("calls"), pl.col("root_name").drop_nulls().mode().sort().first(),
                   pl.col("api_name").drop_nulls().mode().sort().first(),
                   pl.col("i").sort_by(["cost", "ts"], descending=[True, False]).first().alias("worst"), pl.col("op").alias("ops"))
              .sort(["cost", "cause"], descending=[True, False], maintain_order=True))
    out = []
    for g in groups.to_dicts():  # one per (cause, source line): a handful
        w = s.filter(pl.col("i") == g["worst"]).to_dicts()[0]
        ev = Evidence(
            cause=g["cause"], op=g["root_name"], python_api=g["api_name"], source=g["source"] or None,
            sync_calls=dict(sorted(((c["name"], c["count"]) for c in g["calls"]), key=lambda c: (-c[1], c[0]))),
            syncs_per_step=round(g["count"] / nsteps, 2) if nsteps else None,
            worst=WorstSync(start_us=round(w["ts"] / 1000, 3), sync_end_us=round(w["end"] / 1000, 3),
                            next_gpu_us=round(w["next_ts"] / 1000, 3) if w["next_ts"] is not None else None,
                            idle_us=round(w["cost"] / 1000, 3), step=w["step"]),
        )
        out.append(ctx.finding(
            title=f"{g['cause']} syncs the host" + (f" at {g['source']}" if g["source"] else ""),
            steps=g["steps"], count=g["count"], cost_ns=g["cost"], evidence=ev, fix=FIXES.get(g["cause"], GENERIC_FIX),
            op_ids=[o for o in g["ops"] if o is not None]))
    return out + _compile_finding(ctx)


def fix_bound_us(ctx: RuleContext) -> float:
    """The most removing the loop's syncs saves per step (µs): the GPU idle they create — the classifier's
    `host_sync` time, the device drained while the host waited — plus one launch latency after each sync (the
    queue refills only once the host launches again). Once the waits are gone the replay lets the host run ahead
    of everything else too, which on a host-bound step or a rank waiting for another rank prices far more than
    the syncs ever cost the device."""
    n = max(ctx.steps.height, 1)
    seg = ctx.class_time(CLASS)
    idle = float((seg["end"] - seg["ts"]).sum()) if seg.height else 0.0
    calls = host_step_of(sync_calls(ctx.trace), ctx.steps, "ts").filter(pl.col("step").is_not_null())
    return (idle + calls.height * build(ctx.trace).latency_ns) / n / 1000


def fix_transform(ctx) -> Transform:
    """The fix as a replay transformation: the loop's blocking calls (not the compiler's) no longer wait for the
    device — every host call made by an op that synchronised (the `.item()`'s copy and its stream sync alike)
    keeps only its own time; the device work still runs. `ctx`: a RuleContext or the trace itself."""
    trace = getattr(ctx, "trace", ctx)
    syncs = sync_calls(trace)
    ops = syncs["op"].drop_nulls()
    ids = trace.host.filter(pl.col("op").is_in(ops.implode()) & pl.col("cat").is_in(RUNTIME_CATS))["i"]
    return Transform(NAME, no_wait=pl.concat([syncs["i"], ids]).cast(pl.Int64).unique().to_list())
