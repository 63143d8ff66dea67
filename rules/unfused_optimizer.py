"""TV203 unfused-optimizer: the optimizer step is not fused: tiny kernels per parameter, or a pass per arithmetic step.

## What it detects
`Optimizer.step#…` spans (recorded by torch.optim for every optimizer) whose kernels come from single-tensor
ops (`aten::mul_`, `aten::addcdiv_`, `aten::lerp_`, … once per parameter) rather than multi-tensor ops
(`aten::_foreach_*`, `aten::_fused_*`): at least `min_kernels` such kernels per optimizer step. And the steps of
Adam, AdamW and SGD that run the multi-tensor (foreach) path, PyTorch's default on CUDA, where the replay prices
their fused kernel at `min_savings_pct` of the step or more: the parameters' sizes come from the tensor lists the
`_foreach_` ops record (`record_shapes=True`; a trace whose lists carry no shapes is not judged on this path).
Traces without these spans (optimizers that bypass torch.optim's step hooks) cannot be judged.

## Why it is slow
The single-tensor path (`foreach=False`, or parameters that are not all on the GPU) runs the update rule as
a Python loop over the parameters, one op per parameter and arithmetic step: AdamW is about 8 ops per
parameter, so a model with P parameters costs 8·P launches of a few µs of host time each, while each kernel
touches one small tensor and finishes in a few µs. The GPU mostly waits for the host. The multi-tensor
(`foreach=True`) path launches one kernel per arithmetic step for a whole list of tensors, and the fused path
(`fused=True`) one kernel for the whole update. The foreach path still runs one kernel per arithmetic step over
every parameter — AdamW about ten: a lerp into the first moment, a multiply and an addcmul into the second, a
square root, divisions and adds, the parameter's update — each streaming whole parameter-sized tensors through
memory, so its device time is several times the fused kernel's, which reads each parameter, its gradient and
states once and writes the parameter and states once. On large parameters (embedding tables, wide layers) that is
most of the optimizer's time, and the step is memory-bound there, not launch-bound.

## How to fix
Construct the optimizer with `fused=True` (Adam, AdamW and SGD have a fused CUDA kernel in torch.optim: the
advice for them) or `foreach=True` (every other class); PyTorch picks foreach by default only when every
parameter and state is a CUDA tensor and `differentiable=False`, so check for `foreach=False` in the code and
for parameters left on the CPU. `torch.compile` of the step function also fuses the update. On the foreach
path, `fused=True` is the fix.

## Evidence
Per optimizer: the steps, the host time of one optimizer step and of its per-parameter update loop (first op
to last: what a fix replaces; the step's lead-in, `_init_group` and the grouping of tensors, stays), the kernels
it launches and their GPU time, the ops that launch them with their counts, the estimated parameter count (the
launches of the least frequent per-parameter op), and each fix variant as the replay prices it (`variants`):
- foreach: each arithmetic op per parameter becomes one `_foreach_` op, costing the loop's own mean time per
  launching op (its Python call, dispatch and launch) plus a launch call per extra multi_tensor_apply launch
  (PyTorch launches again whenever 320 blocks of 64K-element chunks, or 110/64/48/36/30 tensors for lists 1-5
  deep, fill up); the per-parameter step counters (ops that launch nothing) stay on the host at their recorded
  cost; the kernels move the single-tensor kernels' bytes (each foreach op is one pass, as before);
- fused: the fused op and, for Adam/AdamW, the step counters' one foreach add on the device, launched per
  chunk set, each call at the loop's mean time per op, plus 0.18 of that per parameter (the C++ walk of the
  tensor lists between the calls, measured on the bundled fused twins: 151-402 µs traced for 24-76 parameters);
  the kernel reads parameter, gradient and states and writes parameter and states once
  (param bytes × (3 + 2 × states)).
- fused, from the foreach path: the fused op (and the step counters' foreach add) at the foreach loop's mean time
  per launching op, launched per chunk set as above; the kernel moves param bytes x (3 + 2 x states) once (the
  parameters: the longest list of the largest elements the `_foreach_` ops take, at the element size of the type
  in the multi_tensor_apply kernel's name) where the foreach kernels moved every list each op reads and writes.
  The finding's class is `gpu_memory` where the fused kernel's device time is most of what it saves (the device's
  passes over memory), else `cpu_launch` (the per-op calls).
Device time is those bytes over the multi-tensor kernel's own bandwidth where the parameters fill a launch (320
64K-element chunks or more: ~77 % of the device's peak for a foreach op, ~70 % for the fused update, measured in
a sweep and in the fixed twins' traces), else over the bandwidth the single-tensor kernels achieved on the same
tensors (a launch of few blocks runs as far below the peak as they did). Each variant's saving is a replay: the update loop's host
time beyond the variant's leaves the host path; each of the loop's kernels keeps its place and takes the
variant's share of its time (variant's device time / theirs), and as many of their device gaps stay as the
variant launches. Where the problem's host sets the step's pace and the fixed loop's host runs faster than its
device, the fixed steps are priced at the device's own pace: the host then keeps a queue ahead, which the window's
replay, started from the problem's drained device, builds only over its first steps (`fixes.led_mean`; GPT-2's
fused AdamW on the H100: 3.82 -> 5.10 ms, measured 5.66, the step after it 25.4 against 25.2). (The replay only shortens an activity, so the variant's time put on the first kernel alone
was cut to that kernel's few µs: both variants lost their device time, and a step the device holds — GPT-2's
optimizer kernels run 2.1 ms behind the backward's — was priced as the host's, both variants at the same
2.69 ms where the same-process rounds measure 0.80 (foreach) and 2.05 (fused).) The finding's saving is the
advised variant's. The foreach variant's host time already matches its twins' traced update loops (1.5-1.7 ms
priced vs 1.0-1.1 traced for 48 parameters, 3.4-3.7 vs 2.9-3.4 for GPT-2's 76): it keeps the per-parameter
step counters and a Python call per op. Not modelled: the grouping of the tensors by device and dtype before the
loop (the fused and foreach twins' lead-in runs 70-320 µs longer traced than the single-tensor run's).

## Options
- `min_kernels` (32): fewest single-tensor kernels per optimizer step worth a finding (4 parameters of AdamW).
- `min_savings_pct` (2.0): smallest savings (% of step time) worth a finding: the GPU's idle time in the update loop as traced, or the advised fix's replayed saving, whichever is larger (a capture whose device stays busy through the loop shows little idle time there, while without the profiler the loop's host time is on the step's path).
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- PyTorch docs, `torch.optim` "Algorithms" (foreach and fused implementations, their defaults).
- PyTorch `aten/src/ATen/native/cuda/MultiTensorApply.cuh` (chunk size, blocks and tensors per launch).
- PyTorch `torch/optim/optimizer.py` (`Optimizer.step#<name>.step` profiler spans).
"""

from __future__ import annotations

import math
import re
from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.features import host_names
from traceview.analyses.fixes import per_step_us, pricing_transform
from traceview.analyses.fusible import MULTI_TENSOR_RE as MULTI_TENSOR_KERNEL_RE
from traceview.analyses.opshapes import decode, tensor_lists
from traceview.analyses.overhead import host_share
from traceview.analyses.param_work import OPT_STEP_RE
from traceview.analyses.replay import Transform, spans
from traceview.analyses.roofline import DTYPE_BYTES
from traceview.analyses.rowid import by_id, join_by_id
from traceview.analyses.whatif import EMPTY, gpu_idle_within, removed_per_step
from traceview.evidence import Meta, OpCount
from traceview.ruleapi import XPROF_SEVERITY, Finding, Option, RuleContext, min_savings

CODE = "TV203"
NAME = "unfused-optimizer"
SEVERITY = "warning"
CLASS = "cpu_launch"  # the classifier class whose time a fix of these findings removes
TITLE = "Optimizer step not fused: tiny kernels per parameter, or a pass per arithmetic step"
OPTIONS = {
    "min_kernels": Option(32, "fewest single-tensor kernels per optimizer step worth a finding"),
    **min_savings(2.0),
    **XPROF_SEVERITY,
}
OPT_RE = OPT_STEP_RE  # torch.optim's annotation of a step (traceview/analyses/param_work.py)
MULTI_TENSOR_RE = r"^aten::_(foreach|fused)_"
FUSED_OP_RE = r"^aten::_fused_"
#: PyTorch's multi_tensor_apply (ATen/native/cuda/MultiTensorApply.cuh), which runs both the foreach ops and the
#: fused optimizers: one block per chunk of CHUNK elements, at most MAX_BLOCKS blocks and MAX_TENSORS[depth - 1]
#: tensors (of lists `depth` deep) per launch: a launch more whenever either fills
CHUNK, MAX_BLOCKS, MAX_TENSORS = 65536, 320, (110, 64, 48, 36, 30)
#: torch.optim classes with a fused CUDA kernel -> (state tensors per parameter with momentum, a step counter per
#: parameter): the fused kernel reads the parameter, its gradient and states and writes the parameter and states once
FUSED = {"Adam": (2, True), "AdamW": (2, True), "SGD": (1, False)}
VARIANTS = ("foreach", "fused")
#: host time per parameter of the fused step's calls beyond their call and launches, in the single-tensor loop's
#: own time per op (so it scales as that trace's host does): the fused op and the step counters' foreach add walk
#: their tensor lists in C++ (checks, metadata into the kernel's arguments) between the Python calls. The bundled
#: fused twins' update loops, first op to last, less two of their problem trace's mean op, per parameter: 0.18
#: (collected2 adamw_fused, 48 parameters: 217 µs traced), 0.28 (collected3 adamw_l12_fused, 24: 151 µs), 0.18
#: (collected3 gpt2_sdpa_fused, 76: 402 µs); the median
FUSED_PER_PARAM_OPS = 0.18
#: share of the device's memory bandwidth a multi_tensor_apply launch that fills the device (MAX_BLOCKS blocks, one
#: 512-thread block per 64K-element chunk) streams at: the kernel's own rate, whatever the single-tensor kernels
#: reached on the same tensors (GPT-2's, held to 67 % of the H200's peak by ~1 µs a kernel on its 400 small biases
#: and norms; Llama's large tensors at 83 %). A foreach op: 3.69-3.77 TB/s of the H200's 4.8 over 72-1332 MB of
#: parameters (multi_tensor_cost_h200.ndjson, L2 flushed), 3.66 in GPT-2's foreach twin (collected3/gpt2_sdpa).
#: The fused update, which walks 4-deep tensor lists and does the whole update's math per element: 3.26-3.39 in the
#: sweep, 3.37 and 3.40 in the fused twins (collected3/gpt2_sdpa_fused, 326 MB; ab_traced/llama_ctl, 623 MB).
#: Shares of the peak, so that they carry to another device as the kernel does
FOREACH_PEAK_SHARE, FUSED_PEAK_SHARE = 0.77, 0.70
#: the integer columns `_loop` adds per optimizer step
LOOP_COLS = (
    "loop_ts",
    "loop_end",
    "arith",
    "arith_ns",
    "scalar",
    "scalar_ns",
    "params",
    "param_bytes",
    "chunks",
)


def _fix(opt: str, advised: str) -> str:
    how = {
        "fused": (
            f"Construct it with {opt}(..., fused=True): one fused kernel (a launch per few hundred 64K-element "
            "chunks) reads and writes each parameter and its state once; foreach=True (one kernel per "
            "arithmetic step over all parameters) saves less here (evidence: variants)."
        ),
        "foreach": (
            f"Construct it with {opt}(..., foreach=True): one multi-tensor kernel per arithmetic step over "
            f"all parameters ({opt} has no fused CUDA kernel in torch.optim)."
        ),
    }[advised]
    return (
        f"{opt}.step runs its update one parameter at a time (the single-tensor path): a handful of ops per "
        f"parameter, each a few µs of host time for a kernel that finishes in a few µs, so the GPU waits for "
        f"the host. {how} PyTorch picks foreach by default only when every parameter and state is a CUDA tensor "
        "and differentiable=False: look for foreach=False in the code and for parameters left on the CPU."
    )


FIX = _fix("The optimizer", "fused")


def _fix_foreach(opt: str, passes: float, gb: float, fused_gb: float) -> str:
    return (
        f"{opt}.step runs the multi-tensor (foreach) path, PyTorch's default on CUDA: one kernel per arithmetic step "
        f"of the update over all parameters, {passes:.0f} ops a step, each reading and writing parameter-sized "
        f"tensors (about {gb:.2f} GB a step here), so the update streams the parameters and their states through "
        f"memory once per op. Construct it with {opt}(..., fused=True): one kernel reads each parameter, its "
        f"gradient and states once and writes the parameter and states once (about {fused_gb:.2f} GB), and the "
        "per-op host calls go with them. Large parameters (embedding tables, big layers) gain most."
    )


def optimizer_spans(ctx: RuleContext, min_kernels: int) -> pl.DataFrame:
    """One row per single-tensor optimizer step in the analysed steps: [i, opt, ts, end, kernels, kinds,
    gpu_ns, bytes, ids, durs (their kernels' durations, as ids), ops, tid], the bandwidth and median launch call of its kernels [_bw (bytes/ns), _launch]
    and its update loop (`_loop`): what `variants` prices each fix from."""
    host = ctx.trace.host
    if not host_names(ctx.trace, "user_annotation").str.contains(OPT_RE).any():  # no optimizer step annotated
        return pl.DataFrame()
    # the regex only on the annotations (a few hundred rows, not every host event)
    spans = host[["i", "cat", "name", "ts", "end", "tid"]].filter(pl.col("cat") == "user_annotation")
    spans = spans.filter(
        pl.col("name").str.contains(OPT_RE) & (pl.col("ts") >= ctx.trace.steps["cpu_ts"].min())
    )
    spans = spans.filter(pl.col("end") > ctx.lo).select(
        "i", pl.col("name").str.extract(OPT_RE).alias("opt"), "ts", "end", "tid"
    )
    if spans.height == 0:
        return pl.DataFrame()
    if ctx.steps.height:
        # a span ends no later than the step it starts in: a profiler that steps from the optimizer's post-hook (a
        # collector's `on_trace_ready` after the last step) records its own teardown inside the last span (50-140
        # ms after the update loop's last op on every bundled collector trace), which is no optimizer time
        st = ctx.steps.select(pl.col("ts").alias("_st"), pl.col("end").alias("_se")).sort("_st")
        spans = (spans.sort("ts").join_asof(st, left_on="ts", right_on="_st", strategy="backward")
                 .with_columns(end=pl.min_horizontal("end", pl.col("_se").fill_null(pl.col("end"))))
                 .drop("_st", "_se"))
    k = ctx.trace.gpu[["i", "name", "kind", "dur", "op", "launch_ts", "launch_end"]].filter(
        (pl.col("kind") == "compute") & pl.col("launch_ts").is_not_null()
    )
    k = (
        k.sort("launch_ts")
        .join_asof(
            spans.select(
                pl.col("i").alias("span"), pl.col("ts").alias("_sts"), pl.col("end").alias("_send")
            ).sort("_sts"),
            left_on="launch_ts",
            right_on="_sts",
            strategy="backward",
        )
        .filter(pl.col("launch_ts") < pl.col("_send"))
    )
    k = join_by_id(k, "op", host, pl.col("name").alias("op_name"))  # the op names of those kernels only
    k = k.join(ctx.kb.select("i", pl.col("bytes").alias("_kb")), on="i", how="left")
    # (the joins keep no row order: each span's kernel lists in launch order, which the fix's kept gaps read by position)
    k = k.sort("launch_ts", "i", maintain_order=True)
    per = k.group_by("span", maintain_order=True).agg(
        pl.len().alias("kernels"),
        pl.col("name").n_unique().alias("kinds"),
        pl.col("dur").sum().alias("gpu_ns"),
        pl.col("_kb").fill_null(0).sum().alias("bytes"),
        pl.col("i").alias("ids"),
        pl.col("dur").alias("durs"),
        # the bandwidth its kernels achieved on these tensors (bytes over time: large tensors near the device's
        # peak, small ones far below it, as any kernel over the same tensors)
        (pl.col("_kb").fill_null(0).sum() / pl.col("dur").filter(pl.col("_kb").is_not_null()).sum()).alias(
            "_bw"
        ),
        (pl.col("launch_end") - pl.col("launch_ts")).median().alias("_launch"),
        # multi-tensor by the op that launched it or, where no op is linked (CUDA graphs, apex), by the kernel
        (
            pl.col("op_name").fill_null("?").str.contains(MULTI_TENSOR_RE)
            | pl.col("name").str.contains(MULTI_TENSOR_KERNEL_RE)
        )
        .sum()
        .alias("multi"),
        pl.col("op_name").fill_null("?").str.contains(FUSED_OP_RE).sum().alias("_fused"),
        pl.col("op_name").fill_null("?").alias("ops"),
    )
    per = spans.rename({"i": "span"}).join(per, on="span", how="inner").rename({"span": "i"})
    single = per.filter((pl.col("multi") == 0) & (pl.col("kernels") >= min_kernels))
    # the multi-tensor (foreach) path of a class that has a fused kernel: one pass over the parameters per
    # arithmetic step, where the fused kernel makes one
    multi = per.filter((pl.col("multi") > 0) & (pl.col("_fused") == 0) & pl.col("opt").is_in(list(FUSED)))
    out = []
    if single.height:
        out.append(single.join(_loop(ctx, single, k), on="i", how="left").with_columns(path=pl.lit("single")))
    if multi.height:
        out.append(_foreach_sizes(ctx, multi.join(_loop(ctx, multi, k), on="i", how="left")))
    if not out:
        return single.drop("_fused")
    got = pl.concat(out, how="diagonal_relaxed") if len(out) > 1 else out[0]
    return got.drop("_fused").with_columns(
        pl.col("_launch").fill_null(0), pl.col("_bw").fill_null(0.0).fill_nan(0.0)
    )


def _foreach_sizes(ctx: RuleContext, per: pl.DataFrame) -> pl.DataFrame:
    """Foreach optimizer steps (`per`, with `_loop`'s columns) with their parameters read from the tensor lists the
    foreach ops were called with: `params` (the longest list of the largest elements), `param_bytes` and `chunks`
    (its elements at the kernels' element size: the multi_tensor_apply functor's type in the kernel's name), and
    `bytes` (every list each op reads and the list it writes, once per op: the passes the foreach path makes), whose
    rate over the kernels' time is `_bw`; `path` "foreach"."""
    host = ctx.trace.host
    ops = host.filter(pl.col("parent").is_in(per["i"].implode()) & pl.col("name").str.starts_with("aten::_foreach_"))
    ops = ops.select(pl.col("parent").cast(pl.Int64).alias("span"), "ts", "end", "input_dims", "input_type")
    kernels = by_id(ctx.trace.gpu, per["ids"].explode().drop_nulls().unique().cast(pl.UInt32), "i", "name",
                    "launch_ts")
    per = _foreach_extent(per, ops, kernels)
    name = dict(zip(kernels["i"].to_list(), kernels["name"].to_list(), strict=True))
    rows = []
    for r in per.select("i", "ids").to_dicts():
        esize = next((ELEMENT_BYTES[m] for i in r["ids"] if (m := _functor_type(name[i]))), 4)
        best, touched = (0, 0, 0), 0
        for d, t in ops.filter(pl.col("span") == int(r["i"])).select("input_dims", "input_type").rows():
            lists = tensor_lists(d, t)
            if not lists:
                continue
            numel = sum(math.prod(x) for x in lists[0])
            touched += (len(lists) + 1) * numel * esize
            if (numel, len(lists[0])) > best[:2]:
                best = (numel, len(lists[0]), sum(math.ceil(math.prod(x) / CHUNK) for x in lists[0]))
        rows.append((r["i"], best[1], best[0] * esize, best[2], touched))
    sizes = pl.DataFrame(rows, schema={"i": per.schema["i"], "params": pl.Int64, "param_bytes": pl.Int64,
                                       "chunks": pl.Int64, "bytes": pl.Int64}, orient="row")
    out = per.drop("params", "param_bytes", "chunks", "bytes").join(sizes, on="i", how="left")
    return out.with_columns(_bw=pl.col("bytes") / pl.col("gpu_ns"), path=pl.lit("foreach"))


def _foreach_extent(per: pl.DataFrame, ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Foreach steps `per` with their update loop and kernels cut to the `_foreach_` ops' extent (`ops`: [span, ts,
    end], the step's own foreach calls; `kernels`: [i, launch_ts] of the steps' kernels): an optimizer stepped with a
    closure (Lightning, LBFGS) runs the forward and backward inside its step's span, which the fused kernel does not
    replace. The loop's time is shared evenly by its foreach calls (`arith`: those that launched a kernel; `scalar`:
    the step counters' add on the host)."""
    at = dict(zip(kernels["i"].to_list(), kernels["launch_ts"].to_list(), strict=True))
    rows = []
    for r in per.select("i", "ids", "durs").to_dicts():  # (one row per optimizer step: a handful)
        mine = ops.filter(pl.col("span") == int(r["i"]))
        if mine.height == 0:
            rows.append((r["i"], None, None, 0, 0, 0, 0, [], [], 0))
            continue
        lo, hi = int(mine["ts"].min()), int(mine["end"].max())
        keep = [(i, d) for i, d in zip(r["ids"], r["durs"], strict=True) if lo <= (at.get(i) or -1) < hi]
        ts, end = mine["ts"].to_list(), mine["end"].to_list()
        launched = sum(any(a <= (at.get(i) or -1) < b for i, _ in keep) for a, b in zip(ts, end, strict=True))
        each = (hi - lo) / mine.height
        rows.append((r["i"], lo, hi, launched, int(each * launched), mine.height - launched,
                     int(each * (mine.height - launched)), [i for i, _ in keep], [d for _, d in keep],
                     sum(d for _, d in keep)))
    cols = ("loop_ts", "loop_end", "arith", "arith_ns", "scalar", "scalar_ns", "ids", "durs", "gpu_ns")
    got = pl.DataFrame(rows, schema={"i": per.schema["i"], **{c: per.schema[c] for c in cols}}, orient="row")
    return per.drop(cols).join(got, on="i", how="left").with_columns(kernels=pl.col("ids").list.len())


#: element bytes of the type a multi_tensor_apply kernel's functor computes in (`…Functor<float, …>`)
ELEMENT_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2}
_FUNCTOR_RE = re.compile(r"Functor<(float|double|c10::BFloat16|c10::Half)\b")


def _functor_type(kernel: str) -> str | None:
    m = _FUNCTOR_RE.search(kernel)
    return m.group(1) if m else None


def _loop(ctx: RuleContext, per: pl.DataFrame, k: pl.DataFrame) -> pl.DataFrame:
    """Per optimizer step [i]: its update loop — the ops it calls itself, from the first to the last — [loop_ts,
    loop_end], the ops that launch kernels (`arith`: one per parameter and arithmetic step) and their host time
    with the gap before each (`arith_ns`), the ops that launch none (`scalar`, `scalar_ns`: the per-parameter step
    counters on the host), the parameters (`params`: calls of the least frequent launching op), their elements' bytes
    (`param_bytes`) and 64K-element chunks (`chunks`) from the recorded shapes, and per launching op name its calls
    per parameter and list depth (`per_param`, `depth`)."""
    host = ctx.trace.host
    ch = (
        host.filter(pl.col("parent").is_in(per["i"].implode()) & (pl.col("cat") == "cpu_op"))
        .select(
            "i",
            pl.col("parent").cast(pl.Int64).alias("span"),
            "name",
            "ts",
            "end",
            "input_dims",
            "input_type",
        )
        .sort("ts")
    )
    if ch.height == 0:
        # (no op recorded under the steps: nothing to price)
        return pl.DataFrame(schema={"i": per.schema["i"], **dict.fromkeys(LOOP_COLS, pl.Int64)})
    # the op each kernel was launched from: the last op of its optimizer step that started before the launch
    own = (
        k.select(pl.col("span").cast(pl.Int64), "launch_ts")
        .sort("launch_ts")
        .join_asof(
            ch.select("span", pl.col("i").alias("_c"), pl.col("ts").alias("_cts")),
            left_on="launch_ts",
            right_on="_cts",
            by="span",
            strategy="backward",
            check_sortedness=False,
        )
        .group_by("_c")
        .len()
    )
    ch = ch.join(own.rename({"_c": "i", "len": "launches"}), on="i", how="left").with_columns(
        arith=pl.col("launches").fill_null(0) > 0,
        slot=(
            pl.col("end")
            - pl.col("ts")
            + (pl.col("ts") - pl.col("end").shift(1).over("span")).clip(lower_bound=0).fill_null(0)
        ),
    )
    # the first tensor argument of each launching op: the parameter (or its state) it updates (decoded once per
    # distinct shape text: a handful)
    key = ["input_dims", "input_type"]
    rows = []
    for d, t in ch.filter("arith").select(key).unique().rows():
        v = decode(d, t)
        rows.append((d, t, math.prod(v[0][0]) if v else 0, DTYPE_BYTES.get(v[0][1], 0) if v else 0, len(v)))
    first = pl.DataFrame(
        rows,
        schema={
            "input_dims": pl.String,
            "input_type": pl.String,
            "numel": pl.Int64,
            "esize": pl.Int64,
            "tensors": pl.Int64,
        },
        orient="row",
    )
    ch = ch.with_columns(pl.col(key).cast(pl.String)).join(first, on=key, how="left", nulls_equal=True)
    ch = ch.with_columns(
        pl.col("numel", "esize").fill_null(0),
        depth=pl.col("tensors").fill_null(0) + (~pl.col("name").str.ends_with("_")).cast(pl.Int64),
    )
    ar = ch.filter("arith")
    names = ar.group_by("span", "name").agg(pl.len().alias("n"), pl.col("depth").max())
    params = names.group_by("span").agg(pl.col("n").min().alias("params"))
    # the least frequent launching op runs once per parameter: its first tensors are the parameters
    least = (
        names.join(params, on="span")
        .filter(pl.col("n") == pl.col("params"))
        .group_by("span")
        .agg(pl.col("name").min().alias("_least"))
    )
    sizes = (
        ar.join(least, on="span")
        .filter(pl.col("name") == pl.col("_least"))
        .group_by("span")
        .agg(
            (pl.col("numel") * pl.col("esize")).sum().alias("param_bytes"),
            (pl.col("numel") / CHUNK).ceil().sum().cast(pl.Int64).alias("chunks"),
        )
    )
    kinds = (
        names.join(params, on="span")
        .with_columns((pl.col("n") / pl.col("params")).alias("per_param"))
        .group_by("span")
        # (in an order of their own: the join before this group-by keeps no row order)
        .agg(pl.struct("per_param", "depth").sort_by("depth", "per_param", maintain_order=True).alias("per_op"))
    )
    loop = ch.group_by("span").agg(
        pl.col("ts").min().alias("loop_ts"),
        pl.col("end").max().alias("loop_end"),
        pl.col("arith").sum().alias("arith"),
        pl.col("slot").filter("arith").sum().alias("arith_ns"),
        (~pl.col("arith")).sum().alias("scalar"),
        pl.col("slot").filter(~pl.col("arith")).sum().alias("scalar_ns"),
    )
    out = (
        loop.join(params, on="span", how="left")
        .join(sizes, on="span", how="left")
        .join(kinds, on="span", how="left")
    )
    return out.rename({"span": "i"}).with_columns(pl.col("i").cast(per.schema["i"]))


def _launches(params: int, chunks: int, depth: int) -> int:
    """Launches of one multi-tensor op over `params` tensors of `chunks` chunks in all, with lists `depth` deep."""
    per = MAX_TENSORS[min(max(depth, 1), len(MAX_TENSORS)) - 1]
    return max(1, math.ceil(params / per), math.ceil(chunks / MAX_BLOCKS))


def variants(ctx: RuleContext, row: dict) -> dict[str, dict[str, float]]:
    """Each fix variant of one optimizer step (a row of `optimizer_spans`): {variant: {host_ns, gpu_ns, launches}}.

    - foreach: the per-parameter step counters stay on the host (`scalar` ops, at their recorded cost); each
      arithmetic op per parameter becomes one foreach op, a Python call as the single-tensor loop's (the mean
      `arith_ns` per op) plus a launch (the median launch call) per extra multi_tensor_apply launch; its kernels
      move the single-tensor kernels' bytes (each op is one pass over all parameters, as before).
    - fused (Adam, AdamW, SGD): one fused op (and, with a step counter, one foreach add on the device), launched
      per multi_tensor_apply chunk set, plus FUSED_PER_PARAM_OPS of a loop op per parameter; its kernel reads the parameters, gradients and states and writes the
      parameters and states once: param_bytes x (3 + 2 states).
    Device time is bytes over the multi-tensor kernel's own bandwidth (FOREACH_PEAK_SHARE, FUSED_PEAK_SHARE of the
    device's peak) where the parameters fill a launch (MAX_BLOCKS chunks), else over the bandwidth the single-tensor
    kernels achieved on the same tensors (their bytes over their time, the device's peak at most; its peak where the
    kernels carry no byte counts), never more than the single-tensor kernels' own time."""
    spec_bw = ctx.spec.bw
    bw = min(float(row.get("_bw") or 0.0) * 1e9, spec_bw) or spec_bw
    params = int(row.get("params") or 0)
    if not params or row.get("arith") is None or not row["arith"]:
        return {}
    if row.get("path") == "foreach":
        # (the fused kernel priced from the foreach loop: its mean call per launching op, its kernels' time the cap)
        return {"fused": _fused(ctx, row, bw, momentum=int(row["arith"]) > 1, per_param_ops=0.0,
                                cap_ns=float(row["gpu_ns"]))}
    chunks = int(row.get("chunks") or 0)
    c_op = float(row["arith_ns"]) / float(row["arith"])
    launch = float(row.get("_launch") or 0.0)
    gpu = float(row["gpu_ns"])
    per_op = row.get("per_op") or []
    # a parameter set of MAX_BLOCKS chunks or more fills each launch and streams at the multi-tensor kernel's own
    # rate; a smaller one runs few blocks a launch, as slow per byte as its single-tensor kernels ran (the 48-
    # parameter MLP's fused kernel: 48 blocks, 0.3 TB/s, as its single-tensor kernels)
    full = chunks >= MAX_BLOCKS
    fe_launch = sum(p["per_param"] * _launches(params, chunks, int(p["depth"] or 1)) for p in per_op)
    fe_ops = sum(p["per_param"] for p in per_op)
    out = {
        "foreach": {
            "host_ns": float(row["scalar_ns"]) + fe_ops * c_op + (fe_launch - fe_ops) * launch,
            "gpu_ns": min(gpu, float(row["bytes"]) / (FOREACH_PEAK_SHARE * spec_bw if full else bw) * 1e9)
            if row["bytes"]
            else gpu,
            "launches": fe_launch,
        }
    }
    if row["opt"] in FUSED:
        out["fused"] = _fused(ctx, row, bw, momentum=fe_ops > 1, per_param_ops=FUSED_PER_PARAM_OPS,
                              cap_ns=out["foreach"]["gpu_ns"])
    return out


def _fused(ctx: RuleContext, row: dict, bw: float, *, momentum: bool, per_param_ops: float,
           cap_ns: float) -> dict[str, float]:
    """The fused variant of one optimizer step (a row of `optimizer_spans`, its class in FUSED): the fused op (and,
    with a step counter, one foreach add on the device), each a call at the loop's mean time per launching op plus
    `per_param_ops` of it per parameter, launched per multi_tensor_apply chunk set; its kernel moves param_bytes x
    (3 + 2 states) once (no states without `momentum`: SGD's plain add), at the fused kernel's own rate where the
    parameters fill a launch, else at `bw` (the rate the loop's kernels reached), never above `cap_ns`."""
    states, counter = FUSED[row["opt"]]
    states = states if momentum else 0
    params, chunks = int(row.get("params") or 0), int(row.get("chunks") or 0)
    n_launch = _launches(params, chunks, 2 + states) + (_launches(params, 0, 1) if counter else 0)
    n_ops = 2 if counter else 1
    c_op = float(row["arith_ns"]) / float(row["arith"])
    launch = float(row.get("_launch") or 0.0)
    pb = float(row.get("param_bytes") or 0.0)
    fbw = FUSED_PEAK_SHARE * ctx.spec.bw if chunks >= MAX_BLOCKS else min(bw, FUSED_PEAK_SHARE * ctx.spec.bw)
    return {
        "host_ns": (n_ops + per_param_ops * params) * c_op + (n_launch - n_ops) * launch,
        "gpu_ns": min(cap_ns, pb * (3 + 2 * states) / fbw * 1e9) if pb else cap_ns,
        "launches": n_launch,
    }


def advised(opt: str) -> str:
    """The variant the fix advises: fused where torch.optim has a fused CUDA kernel for the class (it does less
    host and device work than foreach in every term of `variants`), else foreach."""
    return "fused" if opt in FUSED else "foreach"


def _with_variants(ctx: RuleContext, per: pl.DataFrame) -> pl.DataFrame:
    """`per` with [variant, host_v, gpu_v]: the advised variant's host and device time per optimizer step (the
    loop kept whole where the model has no numbers)."""
    rows = []
    for r in per.to_dicts():
        v = advised(r["opt"])
        got = variants(ctx, r).get(v)
        rows.append((v, got["host_ns"] if got else float("nan"), got["gpu_ns"] if got else float("nan")))
    return per.with_columns(
        variant=pl.Series([r[0] for r in rows], dtype=pl.String),
        host_v=pl.Series([r[1] for r in rows], dtype=pl.Float64),
        gpu_v=pl.Series([r[2] for r in rows], dtype=pl.Float64),
    )


def _removed(ctx: RuleContext, per: pl.DataFrame) -> pl.DataFrame:
    if per.height == 0 or "loop_ts" not in per.columns:
        return EMPTY
    p = _with_variants(ctx, per).filter(pl.col("host_v").is_not_nan())
    cut = p.select(ts=(pl.col("loop_ts") + pl.col("host_v")).cast(pl.Int64), end=pl.col("loop_end")).filter(
        pl.col("end") > pl.col("ts")
    )
    return gpu_idle_within(ctx.trace, cut, ctx.lo, ctx.hi, keep_launched_inside=True)


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The optimizer's update-loop host time beyond the advised variant's, where the GPU had nothing else to run."""
    return ctx.once("removes", lambda: _removed(ctx, _spans(ctx)))


def _spans(ctx: RuleContext) -> pl.DataFrame:
    return ctx.once("spans", lambda: optimizer_spans(ctx, int(ctx.options["min_kernels"])))


class Variant(msgspec.Struct, kw_only=True):
    """One way to fix the single-tensor loop, as the replay prices it."""

    variant: Annotated[str, Meta(description="foreach (foreach=True) or fused (fused=True)")]
    host_time_per_step_us: Annotated[
        float, Meta(description="the update loop's predicted host time per optimizer step, as traced (µs)")
    ]
    gpu_time_per_step_us: Annotated[
        float, Meta(description="its kernels' predicted device time per optimizer step (µs)")
    ]
    launches_per_step: Annotated[float, Meta(description="its kernel launches per optimizer step")]
    savings_us: Annotated[float, Meta(description="its replayed saving per step, unprofiled (µs)")]


class Evidence(msgspec.Struct, kw_only=True):
    optimizer: Annotated[str, Meta(description="the optimizer class whose step runs the single-tensor or foreach path")]
    optimizer_steps: Annotated[int, Meta(description="its steps in the analysed window")]
    host_time_per_step_us: Annotated[float, Meta(description="host time of its step per optimizer step (µs)")]
    update_loop_per_step_us: Annotated[
        float,
        Meta(
            description="of which its per-parameter update loop, first op to last (µs): what a fix replaces"
        ),
    ]
    kernels_per_step: Annotated[float, Meta(description="kernels it launches per optimizer step")]
    gpu_time_per_step_us: Annotated[float, Meta(description="their device time per optimizer step (µs)")]
    distinct_kernels: Annotated[int, Meta(description="distinct kernel names it launches")]
    estimated_parameters: Annotated[
        int | None, Meta(description="parameter tensors (calls of its least frequent op per step; on the foreach "
                                     "path the longest tensor list its ops take)")
    ]
    ops: Annotated[list[OpCount], Meta(description="the 10 ops it calls most")]
    predicted_multi_tensor_time_per_step_us: Annotated[
        float,
        Meta(
            description="the advised variant's optimizer step, predicted: the span less the loop plus its loop (µs)"
        ),
    ]
    advised: Annotated[str, Meta(description="the variant the fix advises (its saving is the finding's)")]
    variants: Annotated[
        list[Variant], Meta(description="each fix variant: its predicted times and replayed saving")
    ]
    savings_per_step_us: Annotated[
        dict[str, float], Meta(description="the fix's saving per step (µs), by step number")
    ]


def _variant_evidence(ctx: RuleContext, p: pl.DataFrame) -> list[Variant]:
    """Each variant's per-step times and replayed saving over the optimizer steps `p` (one class)."""
    n = p.height
    got: dict[str, list[dict]] = {}
    for r in p.to_dicts():
        for v, x in variants(ctx, r).items():
            got.setdefault(v, []).append(x)
    if not got:
        return []
    base = [pricing_transform(ctx)]
    out = []
    for v in VARIANTS:
        xs = got.get(v)
        if not xs or len(xs) != n:
            continue
        t = _transform(ctx, p, v)
        save = per_step_us(ctx.trace, ctx.steps, t, base) if t is not None else 0.0
        out.append(
            Variant(
                variant=v,
                host_time_per_step_us=round(sum(x["host_ns"] for x in xs) / n / 1000, 3),
                gpu_time_per_step_us=round(sum(x["gpu_ns"] for x in xs) / n / 1000, 3),
                launches_per_step=round(sum(x["launches"] for x in xs) / n, 1),
                savings_us=round(save, 3),
            )
        )
    return out


def check(ctx: RuleContext) -> list[Finding]:
    per = _spans(ctx)
    if per.height == 0:
        return []
    out = []
    for opt in sorted(per["opt"].unique().to_list()):  # one finding per optimizer class: one or two
        p = per.filter(pl.col("opt") == opt)
        rem = removed_per_step(_removed(ctx, p), ctx.steps)
        savings = int(rem["removed"].sum())
        if (ctx.pct(savings) < ctx.options["min_savings_pct"]
                and ctx.pct(_replayed_ns(ctx, p)) < ctx.options["min_savings_pct"]):
            continue
        ops = (
            p.select(pl.col("ops").explode())
            .group_by("ops")
            .len()
            .sort(["len", "ops"], descending=[True, False], maintain_order=True)
        )
        n = p.height
        pv = _with_variants(ctx, p)
        loop = (pv["loop_end"] - pv["loop_ts"]).fill_null(0)
        span = pv["end"] - pv["ts"]
        predicted = (span - loop + pv["host_v"].fill_nan(None).fill_null(loop.cast(pl.Float64))).sum()
        evidence = Evidence(
            optimizer=opt,
            optimizer_steps=n,
            host_time_per_step_us=round(float(span.sum()) / n / 1000, 3),
            update_loop_per_step_us=round(float(loop.sum()) / n / 1000, 3),
            kernels_per_step=round(float(p["kernels"].sum()) / n, 1),
            gpu_time_per_step_us=round(float(p["gpu_ns"].sum()) / n / 1000, 3),
            distinct_kernels=int(p["kinds"].max()),
            estimated_parameters=int(ops["len"].min() // n) if ops.height else None,
            ops=[OpCount(op=r["ops"], count=r["len"]) for r in ops.head(10).to_dicts()],
            predicted_multi_tensor_time_per_step_us=round(float(predicted) / n / 1000, 3),
            advised=advised(opt),
            variants=_variant_evidence(ctx, p),
            savings_per_step_us={str(s): round(r / 1000, 3) for s, r in rem.rows()},
        )
        steps = rem.filter(pl.col("removed") > 0)["step"].to_list()
        foreach = bool((p["path"] == "foreach").all())
        if foreach:
            passes = float(p["arith"].sum()) / n
            gb = float(p["bytes"].sum()) / n / 1e9
            fused_gb = float(p["param_bytes"].sum()) / n / 1e9 * (3 + 2 * FUSED[opt][0])
            evidence.estimated_parameters = int(p["params"].max())
            fix, title = _fix_foreach(opt, passes, gb, fused_gb), (
                f"{opt}.step makes {passes:.0f} passes over its parameters per step (foreach path)")
        else:
            fix = _fix(opt, advised(opt))
            title = f"{opt}.step launches {evidence.kernels_per_step:.0f} tiny kernels per step (single-tensor path)"
        f = ctx.finding(
            cost_ns=int((p["end"] - p["ts"]).sum()),
            savings_ns=savings,
            count=int(p["kernels"].sum()),
            steps=steps,
            evidence=evidence,
            fix=fix,
            title=title,
            kernel_ids=p["ids"].explode(),
        )
        if foreach and _device_saves_most(ctx, p):
            f.cls = "gpu_memory"  # (what the fused kernel removes there is the device's passes over memory)
        out.append(f)
    return out


def _device_saves_most(ctx: RuleContext, per: pl.DataFrame) -> bool:
    """Whether the advised variant takes more time off the steps' kernels than off their update loops' host time
    (less the profiler's share of it: `overhead.host_share`)."""
    dev = host = 0.0
    for r in per.to_dicts():
        v = variants(ctx, r).get(advised(r["opt"]))
        if v is not None:
            dev += float(r["gpu_ns"]) - v["gpu_ns"]
            host += float(r["loop_end"] - r["loop_ts"]) - v["host_ns"]
    return dev > host * (1.0 - host_share(ctx.trace))


def _replayed_ns(ctx: RuleContext, per: pl.DataFrame) -> float:
    """The advised fix's saving over the analysed steps as the replay prices it (unprofiled terms, ns). A capture
    whose device is busy through the update loop (kernels queued before it) shows little idle time there, while
    without the profiler the loop's host time is on the step's path: Llama's single-tensor AdamW on an H100, 1.3 %
    of the window idle as traced, 4.8 % replayed, 4.4 % measured (sample_traces/ab_traced/llama_single_b16_h100)."""
    tf = _transform(ctx, per)
    if tf is None:
        return 0.0
    return per_step_us(ctx.trace, ctx.steps, tf, [pricing_transform(ctx)]) * 1000 * ctx.steps.height


def _transform(ctx: RuleContext, per: pl.DataFrame, variant: str | None = None) -> Transform | None:
    """The fix of the optimizer steps `per` as the `variant` (None: each class's advised one) makes it: the update
    loop's host time beyond the variant's leaves the host path (the loop's start stays: the variant's own calls,
    then the step's tail); each of the loop's kernels takes the variant's share of its time (the replay only
    shortens an activity: the variant's whole time on the first kernel would be cut to that kernel's own) and the
    device gaps between them stay for the variant's launches only (spread over the loop)."""
    if per.height == 0 or "loop_ts" not in per.columns:
        return None
    host: list[tuple[int, int, int]] = []
    gpu: dict[int, int] = {}
    gap: dict[int, int] = {}
    for r in per.to_dicts():  # one row per optimizer step: a handful
        v = variants(ctx, r).get(variant or advised(r["opt"]))
        if v is None:
            continue
        host.append((int(r["tid"]), int(r["loop_ts"] + v["host_ns"]), int(r["loop_end"])))
        # each kernel scaled to the variant's device time (never more than the kernels' own: the replay only
        # shortens an activity), so the device's share of the step keeps its place behind the kernels before
        f = min(float(v["gpu_ns"]) / float(r["gpu_ns"]), 1.0) if r["gpu_ns"] else 0.0
        gpu.update({int(i): int(d * f) for i, d in zip(r["ids"], r["durs"], strict=True)})
        # the variant's launches keep their device gap (one per launch, spread over the loop); the others' go
        n, m = len(r["ids"]), max(1, round(v["launches"]))
        keep = {round(j * (n - 1) / max(m - 1, 1)) for j in range(min(m, n))}
        gap.update({int(i): 0 for j, i in enumerate(r["ids"]) if j not in keep})
    if not gpu:
        return None
    return Transform(
        NAME if variant is None else f"{NAME}:{variant}",
        host_spans=spans(pl.DataFrame(host, schema=["tid", "ts", "end"], orient="row")),
        gpu_dur=gpu,
        gpu_gap=gap,
        # the single-tensor loop is a host-bound stretch the device waits for in every step: without it the host
        # may run ahead of the device (priced at the device's own pace then: fixes.led_mean)
        leads=True,
    )


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation, as the finding advises it (`advised`): the single-tensor update loop
    replaced by the variant's calls and launches on the host and its kernels' time on the device (`variants`)."""
    return _transform(ctx, _spans(ctx))


def fix_variants(ctx: RuleContext) -> dict[str, Transform]:
    """{variant: the fix made that way}: the variants every optimizer step of the trace has."""
    per = _spans(ctx)
    out = {}
    for v in VARIANTS:
        if per.height and all(v in variants(ctx, r) for r in per.to_dicts()):
            t = _transform(ctx, per, v)
            if t is not None:
                out[v] = t
    return out
