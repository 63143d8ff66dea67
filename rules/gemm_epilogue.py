"""TV204 gemm-epilogue: a GEMM's bias add and/or activation run as separate kernels on its output.

## What it detects
On one stream, a matrix multiply (`aten::mm`, `aten::addmm`) whose next kernels are a bias add
(`aten::add` of the [M, N] product and an [N], [1, N] or [M, N] tensor; not after `addmm`, which already
adds it) and/or an activation (`relu`/`clamp_min`, `gelu`, `silu`, `tanh`, `sigmoid`) on the same [M, N]
shape: the eager form of `act(x @ w + b)`. A shape [d0, …, dk, N] counts as the [d0·…·dk, N] the GEMM wrote:
`nn.Linear` on a 3-D input runs `addmm` on the flattened rows and hands on a view of its output (HF BERT's
GELU after its intermediate dense). Needs the ops' shapes (`record_shapes=True`).

## Why it is slow
The GEMM writes its [M, N] result to memory; the bias add reads it back and writes it again, and the
activation does the same: two extra round trips of M·N elements through HBM plus two launches, for work
the GEMM could do in its epilogue while the tile is still in registers (cuBLASLt's bias and ReLU/GELU
epilogues, Inductor's fused templates).

## How to fix
Let the GEMM add the bias: `F.linear(x, w, b)` / `torch.addmm(b, x, w)` instead of `x @ w + b`. Fold the
activation too: `torch.compile` fuses bias and activation into the GEMM's epilogue (or into one pointwise
kernel after it); for ReLU/GELU eager `torch._addmm_activation(b, x, w, use_gelu=...)` uses the cuBLASLt
epilogue.

## Evidence
The GEMM op, the epilogue ops and kernels, how many GEMMs per step carry one, the bytes the epilogue kernels
move (inputs + output from their shapes), the epilogue kernels' time against the GEMMs' time, the costliest
occurrence. Savings = the epilogue kernels' time, only where the GPU was the critical path (a busy run of
kernels passes its savings on when the work after it was already queued or the host waited in a sync).
Cost: the epilogue kernels' time and their ops' host time. Savings (per step, unprofiled) are replayed: `fix_transform` gives the epilogue kernels no time and drops their ops' host time
(on a launch-bound step that host time is the saving; the finding's threshold reads the same replay). The
evidence also prices torch.compile's fusion (`fix_variants`): Inductor folds a lone bias into `addmm` but runs
bias + activation as one pointwise kernel after the GEMM, which keeps the activation kernel's time.

## Options
- `min_savings_pct` (1.0): smallest savings (% of step time) worth a finding.
- `moderate_pct` (3.0): savings share at which a finding is a warning (XProf's moderate threshold).
- `high_pct` (15.0): savings share at which it is an error (XProf's high threshold).

## References
- cuBLASLt epilogues (`CUBLASLT_EPILOGUE_BIAS`, `_RELU_BIAS`, `_GELU_BIAS`), NVIDIA cuBLAS documentation.
- PyTorch `torch._addmm_activation`, `F.linear`; Inductor GEMM epilogue fusion.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import polars as pl

from traceview.analyses.classify import sync_calls
from traceview.analyses.fixes import rule_savings
from traceview.analyses.intervals import merge
from traceview.analyses.replay import Transform, replay
from traceview.analyses.rowid import by_id, join_by_id
from traceview.analyses.whatif import gpu_idle_within, shrink_kernels
from traceview.analyses.windows import step_of
from traceview.engine import CHAIN, SMALL_ROWS
from traceview.evidence import Meta, StepSpan
from traceview.frames import dropnull, pick
from traceview.ruleapi import XPROF_SEVERITY, Finding, RuleContext, min_savings

CODE = "TV204"
NAME = "gemm-epilogue"
SEVERITY = "warning"
CLASS = "gpu_memory"  # the classifier class whose time a fix of these findings removes
TITLE = "GEMM bias/activation run as separate kernels (unfused epilogue)"
OPTIONS = {
    **min_savings(1.0),
    **XPROF_SEVERITY,
}
GEMM_OPS = ["aten::mm", "aten::addmm"]
BIAS_OPS = ["aten::add"]  # out of place: `add_` after a GEMM is autograd accumulating a gradient
ACT_OPS = ["aten::relu", "aten::relu_", "aten::clamp_min", "aten::clamp_min_", "aten::gelu", "aten::gelu_",
           "aten::silu", "aten::silu_", "aten::tanh", "aten::tanh_", "aten::sigmoid", "aten::sigmoid_"]
_DIMS = pl.List(pl.List(pl.Int64))
_dec = msgspec.json.Decoder()


def _fix(gemm: str, bias: bool, epilogue_us: float | None = None, compile_us: float | None = None) -> str:
    head = ("The GEMM writes its [M, N] result to memory and each epilogue kernel reads it back and writes it "
            "again, plus one launch each, for work the GEMM could do in its epilogue while the tile is in "
            "registers. ")
    if bias:
        text = head + ("Add the bias in the GEMM: F.linear(x, w, b) or torch.addmm(b, x, w) instead of x @ w + b; "
                       "for ReLU/GELU, torch._addmm_activation(b, x, w, use_gelu=...) runs bias and activation in "
                       "cuBLASLt's epilogue. torch.compile folds a lone bias into addmm but fuses bias + activation "
                       "into one pointwise kernel after the GEMM, which still reads and writes the product once.")
    else:
        text = head + (f"{gemm} already adds the bias; fold the activation too: for ReLU/GELU eager "
                       "torch._addmm_activation(b, x, w) uses cuBLASLt's epilogue; torch.compile fuses it into one "
                       "pointwise kernel after the GEMM (one round trip left).")
    if epilogue_us is not None and compile_us is not None:
        text += (f" Replayed: the epilogue in the GEMM saves {epilogue_us / 1000:.3f} ms a step, torch.compile's "
                 f"fusion {compile_us / 1000:.3f} ms.")
    return text


FIX = _fix("addmm", True)


def _shapes(raw: pl.Series) -> pl.DataFrame:
    """[_raw, _d]: each distinct `Input Dims` JSON text as a list of shapes (a non-tensor argument, or a
    tensor list, as an empty shape); undecodable text as null. One decode per distinct text, not per event."""
    out = []
    for r in raw.to_list():
        try:
            v = _dec.decode(r)
        except msgspec.DecodeError:
            v = None
        ok = isinstance(v, list)
        out.append([[x for x in a if isinstance(x, int)] if isinstance(a, list) else [] for a in v] if ok else None)
    return pl.DataFrame({"_raw": raw.to_list(), "_d": out}, schema={"_raw": pl.String, "_d": _DIMS})


def _as_2d(dims: pl.Expr) -> pl.Expr:
    """A shape [d0, …, dk, N] as the [d0·…·dk, N] a GEMM writes: `nn.Linear` on a 3-D input runs `addmm` on the
    flattened rows and hands on a view of its [M, N] output with the leading dims restored (linear → view →
    addmm → view), so an elementwise op on [B, S, N] after an [B·S, N] GEMM reads the GEMM's own output. A 2-D
    shape is unchanged; a 1-D one becomes [1, N]."""
    lead = dims.list.head(dims.list.len() - 1).list.eval(pl.element().product()).list.first()
    return pl.concat_list(pl.when(dims.list.len() > 1).then(lead).otherwise(1), dims.list.last())


def _next_on_stream(col: str, n: int) -> pl.Expr:
    """`col` of the n-th next row on the same (device, stream), for rows sorted by them (each stream's rows
    together): `pl.col(col).shift(-n).over("device", "stream")` without a per-group window (~3x)."""
    same = pl.all_horizontal(pl.col(k).shift(-n).eq_missing(pl.col(k)) for k in ("device", "stream"))
    return pl.when(same).then(pl.col(col).shift(-n))


def epilogues(ctx: RuleContext) -> pl.DataFrame:
    """One row per epilogue kernel: [gemm_i, i, gemm_op, op, role, ts, end, dur, bytes, step]."""
    g = ctx.trace.gpu[["i", "kind", "device", "stream", "ts", "end", "dur", "op"]].filter(
        pl.col("kind").is_in(["compute", "comm", "memcpy", "memset"]) & (pl.col("ts") >= ctx.lo) & (pl.col("ts") < ctx.hi))
    g = join_by_id(pick(g, "i", "device", "stream", "ts", "end", "dur", "op"), "op", ctx.trace.host,
                   pl.col("name").alias("op_name"))
    # no GEMM (on a small trace also: no bias add or activation for one to be followed by, which every test below
    # needs): nothing to look after, decided in one query (the sort and shifts below are a small trace's costliest
    # query here; a large trace, which has both, would pay a pass over its kernels' names for nothing)
    after = pl.col("op_name").is_in([*BIAS_OPS, *ACT_OPS]).any() if g.height < SMALL_ROWS else pl.lit(True)
    gemm, after = g.select(pl.col("op_name").is_in(GEMM_OPS).any(), after.alias("_after")).row(0)
    if not gemm or not after:
        return pl.DataFrame()
    # (one query: a small trace's run is mostly polars' fixed cost per query)
    g = g.lazy().sort("device", "stream", "ts", maintain_order=True)  # (stable: 5x faster here, ties in input order)
    g = g.with_columns(*[_next_on_stream(c, n).alias(f"{c}{n}") for n in (1, 2) for c in ("i", "op_name", "op")])
    # only a GEMM followed by a bias add or an activation can have an epilogue (every test below needs one)
    g = g.filter(pl.col("op_name").is_in(GEMM_OPS) & pl.col("op_name1").is_in([*BIAS_OPS, *ACT_OPS])).collect(**CHAIN)
    if g.height == 0:
        return pl.DataFrame()
    # the Input Dims of those GEMMs and of the ops of the two kernels after each (by op id)
    g = pl.concat([g, *[by_id(ctx.trace.host, g[op], pl.col("input_dims").cast(pl.String).alias(d))
                        for op, d in (("op", "_dims"), ("op1", "_dims1"), ("op2", "_dims2"))]], how="horizontal")
    shapes = _shapes(dropnull(pl.concat([g["_dims"], g["_dims1"], g["_dims2"]])).unique())
    g = (g.join(shapes.rename({"_raw": "_dims", "_d": "_d0"}), on="_dims", how="left")
         .join(shapes.rename({"_raw": "_dims1", "_d": "_d1"}), on="_dims1", how="left")
         .join(shapes.rename({"_raw": "_dims2", "_d": "_d2"}), on="_dims2", how="left"))
    a, b = (pl.col("_d0").list.get(0, null_on_oob=True), pl.col("_d0").list.get(1, null_on_oob=True))
    is_addmm = pl.col("op_name") == "aten::addmm"
    a = pl.when(is_addmm).then(b).otherwise(a)
    b = pl.when(is_addmm).then(pl.col("_d0").list.get(2, null_on_oob=True)).otherwise(b)
    g = g.with_columns(_mn=pl.concat_list(a.list.first(), b.list.last()))
    mn, n_ = pl.col("_mn"), pl.col("_mn").list.last()

    def same(dcol: str) -> pl.Expr:
        return _as_2d(pl.col(dcol).list.get(0, null_on_oob=True)) == mn

    bias_arg = pl.col("_d1").list.get(1, null_on_oob=True)
    is_bias = (~is_addmm & pl.col("op_name1").is_in(BIAS_OPS) & same("_d1")
               & ((bias_arg == pl.concat_list(n_)) | (bias_arg == pl.concat_list(pl.lit(1), n_))
                  | (_as_2d(bias_arg) == mn)))
    act1 = pl.col("op_name1").is_in(ACT_OPS) & same("_d1")
    act2 = is_bias & pl.col("op_name2").is_in(ACT_OPS) & same("_d2")
    g = g.with_columns(_bias=is_bias.fill_null(False), _act1=act1.fill_null(False), _act2=act2.fill_null(False))
    rows = pl.concat([
        g.filter("_bias").select(pl.col("i").alias("gemm_i"), pl.col("i1").alias("i"), pl.col("op_name").alias("gemm_op"),
                                 pl.col("op_name1").alias("op"), pl.lit("bias").alias("role")),
        g.filter(~pl.col("_bias") & pl.col("_act1")).select(pl.col("i").alias("gemm_i"), pl.col("i1").alias("i"),
                                                            pl.col("op_name").alias("gemm_op"), pl.col("op_name1").alias("op"),
                                                            pl.lit("activation").alias("role")),
        g.filter("_act2").select(pl.col("i").alias("gemm_i"), pl.col("i2").alias("i"), pl.col("op_name").alias("gemm_op"),
                                 pl.col("op_name2").alias("op"), pl.lit("activation").alias("role")),
    ])
    rows = rows.join(pick(ctx.trace.gpu, "i", "ts", "end", "dur"), on="i").join(pick(ctx.kb, "i", "bytes"), on="i", how="left")
    return step_of(rows, ctx.steps).filter(pl.col("step").is_not_null())


def removes(ctx: RuleContext, finding: dict | None = None) -> pl.DataFrame:
    """The epilogue kernels (see the module doc); computed once (the check and the projection)."""
    return ctx.once("removes", lambda: _removes(ctx))


def _epilogues(ctx: RuleContext) -> pl.DataFrame:
    return ctx.once("epilogues", lambda: epilogues(ctx))


def _removes(ctx: RuleContext) -> pl.DataFrame:
    """The kernels' time where the GPU was the critical path, and their ops' host time where the GPU idled (a
    launch-bound step: the host's dispatch and launch of each epilogue op is what the fused GEMM saves)."""
    e = _epilogues(ctx)
    if e.height == 0:
        return e
    kernels = shrink_kernels(ctx.trace, e.select("i", pl.lit(0, pl.Int64).alias("new_dur")), sync_calls(ctx.trace))
    host = ctx.trace.host.filter(pl.col("i").is_in(_launching_ops(ctx, e).implode())).select("ts", "end")
    return merge(pl.concat([kernels, gpu_idle_within(ctx.trace, host, ctx.lo, ctx.hi)]))


def _launching_ops(ctx: RuleContext, e: pl.DataFrame) -> pl.Series:
    """The host rows (ids) of the ops that launched the epilogue kernels (`e["op"]` holds their names)."""
    return ctx.trace.gpu.filter(pl.col("i").is_in(e["i"].implode()))["op"].drop_nulls().unique().cast(pl.Int64)


class EpilogueOp(msgspec.Struct, kw_only=True):
    """An epilogue kernel kind after the GEMMs."""

    role: Annotated[str, Meta(description="what it adds: `bias`, `activation`, …")]
    op: Annotated[str | None, Meta(description="the op that launched it")]
    count: Annotated[int, Meta(description="its kernels")]
    time_us: Annotated[float, Meta(description="their device time (µs)")]


class Evidence(msgspec.Struct, kw_only=True):
    gemm_op: Annotated[str, Meta(description="the GEMM op most often followed by an epilogue kernel")]
    gemms_with_epilogue: Annotated[int, Meta(description="GEMMs followed by a separate epilogue kernel")]
    gemms_per_step: Annotated[float, Meta(description="those per step")]
    epilogue_ops: Annotated[list[EpilogueOp], Meta(description="the epilogue kernels by role and op, longest first")]
    epilogue_kernels: Annotated[int, Meta(description="epilogue kernels in the analysed steps")]
    epilogue_time_us: Annotated[float, Meta(description="their device time (µs)")]
    gemm_time_us: Annotated[float, Meta(description="the device time of the GEMMs they follow (µs)")]
    epilogue_bytes: Annotated[int | None, Meta(description="bytes the epilogue kernels move (null: unknown)")]
    worst: Annotated[StepSpan, Meta(description="the GEMM with the longest epilogue, GEMM to last epilogue kernel")]
    savings_per_step_us: Annotated[dict[str, float], Meta(
        description="the fix's saving per step (µs) replayed on the trace as recorded, by step number")]
    epilogue_savings_us: Annotated[float, Meta(
        description="the saving per step (µs, unprofiled) of the epilogue in the GEMM (cuBLASLt's bias/activation "
                    "epilogue, `torch._addmm_activation`): every epilogue kernel gone")]
    compile_savings_us: Annotated[float, Meta(
        description="the saving per step (µs, unprofiled) of torch.compile's fusion: a lone bias folded into "
                    "`addmm`, a bias + activation fused into one pointwise kernel after the GEMM (it still reads "
                    "and writes the [M, N] product once)")]


def check(ctx: RuleContext) -> list[Finding]:
    e = _epilogues(ctx)
    if e.height == 0:
        return []
    # the fix replayed on the trace as recorded: on a GPU-bound step the kernels' time, on a launch-bound one
    # (eager BERT) the epilogue ops' dispatch and launch, which every later launch waited for
    fused, compiled = fix_transform(ctx), fix_variants(ctx)["compile"]
    saved = replay(ctx.trace, ctx.steps) - replay(ctx.trace, ctx.steps, [fused])
    savings = int(max(float(saved.sum()), 0.0))
    if ctx.pct(savings) < ctx.options["min_savings_pct"]:
        return []
    priced = rule_savings(ctx, {"epilogue": fused, "compile": compiled})  # per step, unprofiled terms
    gemms = ctx.trace.gpu.filter(pl.col("i").is_in(e["gemm_i"].unique().implode()))
    per_gemm = e.group_by("gemm_i").agg(pl.col("dur").sum().alias("t"), pl.col("ts").min(), pl.col("end").max(),
                                        pl.col("step").first()).sort(["t", "gemm_i"], descending=[True, False], maintain_order=True)
    w = per_gemm.row(0, named=True)
    ops = e.group_by("role", "op").agg(pl.len().alias("count"), pl.col("dur").sum()).sort(["dur", "op"], descending=[True, False], maintain_order=True)
    bias = bool((e["role"] == "bias").any())
    gemm_op = str(e["gemm_op"].mode().sort()[0])
    evidence = Evidence(
        gemm_op=gemm_op, gemms_with_epilogue=per_gemm.height,
        gemms_per_step=round(per_gemm.height / ctx.steps.height, 2),
        epilogue_ops=[EpilogueOp(role=r["role"], op=r["op"], count=r["count"], time_us=round(r["dur"] / 1000, 3))
                         for r in ops.to_dicts()],
        epilogue_kernels=e.height, epilogue_time_us=round(float(e["dur"].sum()) / 1000, 3),
        gemm_time_us=round(float(gemms["dur"].sum()) / 1000, 3),
        epilogue_bytes=int(e["bytes"].sum()) if e["bytes"].null_count() == 0 else None,
        worst=StepSpan(start_us=round(w["ts"] / 1000, 3), end_us=round(w["end"] / 1000, 3), step=w["step"]),
        savings_per_step_us={str(s): round(float(r) / 1000, 3) for s, r in zip(ctx.steps["step"], saved, strict=True)},
        epilogue_savings_us=round(priced["epilogue"]["unprofiled_us"], 3),
        compile_savings_us=round(priced["compile"]["unprofiled_us"], 3),
    )
    roles = " + ".join(sorted(e["role"].unique().to_list()))
    # cost: the epilogue kernels' device time and their ops' host time (dispatch and launch), what the fix removes
    host_ns = int(ctx.trace.host.filter(pl.col("i").is_in(_launching_ops(ctx, e).implode()))["dur"].sum())
    return [ctx.finding(cost_ns=int(e["dur"].sum()) + host_ns, savings_ns=savings, count=per_gemm.height,
                        steps=sorted(e["step"].unique().to_list()), evidence=evidence,
                        fix=_fix(gemm_op, bias, evidence.epilogue_savings_us, evidence.compile_savings_us),
                        title=f"{gemm_op} followed by a separate {roles} kernel: fold it into the GEMM epilogue",
                        kernel_ids=e["i"])]


def fix_variants(ctx: RuleContext) -> dict[str, Transform]:
    """Other fixes the rule's text names, as replay transformations: `compile` — Inductor folds a lone bias into
    `addmm`, but lowers bias + activation to one Triton pointwise kernel after the GEMM (`triton_poi_fused_add_gelu`),
    not into its epilogue: that kernel reads and writes the [M, N] product once, as the activation kernel does, so
    it keeps the activation kernel's time; the bias kernels and their ops' host time go."""
    e = _epilogues(ctx)
    if e.height == 0:
        return {}
    act = e.filter(pl.col("role") == "activation")
    gone = e.filter(~pl.col("i").is_in(act["i"].implode()))
    ids = gone["i"].cast(pl.Int64).to_list()
    return {"compile": Transform(f"{NAME}:compile", gpu_dur=dict.fromkeys(ids, 0),
                                 host_removed=_launching_ops(ctx, gone).to_list())}


def fix_transform(ctx: RuleContext) -> Transform | None:
    """The fix as a replay transformation: the epilogue runs in the GEMM's epilogue — the bias-add and activation
    kernels take no device time (the tile is still in registers) and their ops' host time leaves the path."""
    e = _epilogues(ctx)
    if e.height == 0:
        return None
    ids = e["i"].cast(pl.Int64).to_list()
    return Transform(NAME, gpu_dur=dict.fromkeys(ids, 0), host_removed=_launching_ops(ctx, e).to_list())
