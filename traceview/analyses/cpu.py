"""Host (CPU) time: which ops hold it, where a step's time goes on a trace without GPU activity, per-layer CPU time.

Traces of CPU training/inference (and what `traceview collect` records on a machine without CUDA) have no
kernels, so the GPU analyses are empty; the step runs on the host and these answer the same questions there.

- **Ops by CPU time** (`op_times`), per op name as torch.profiler's `key_averages()` counts them: `total` is
  the op's own span (it includes everything it called; an op nested in one of the same name counts in both),
  `self` its span minus the spans of the host events directly inside it (child ops, annotations).
- **Step split** (`step_split`): every instant of a step once, in priority order: `input` (inside a
  DataLoader span), `cpu_ops` (some thread runs a top-level op: the work, and the per-op overhead inside it),
  `communication` (only a host collective such as a `gloo:` range is in flight: the ranks wait for each other),
  `outside_ops` (nothing recorded runs: Python between the ops, framework code, waiting).
- **Per-layer CPU time** (`layer_times`): the top-level ops of each layer (forward, backward, other),
  inclusive of sub-layers, over the steps.
"""

from __future__ import annotations

import polars as pl

from ..frames import pick
from ..model import Trace
from .breakdown import DATALOADER_RE
from .intervals import clip, priority_sweep
from .layers import UNATTRIBUTED, attribution, host_layers, subtree_sums, top_level_ops
from .windows import in_steps

SPLIT = ("input", "cpu_ops", "communication", "outside_ops")
# host-side collectives (gloo's worker ranges, the c10d ops that enqueue them)
COLLECTIVE_RE = r"^(gloo:|nccl:|c10d::|record_param_comms$)"


def op_times(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """Per op name, over the ops starting inside the steps: [op, calls, total_ns, self_ns, top_calls], sorted
    by self time. `top_calls` counts the calls made from outside any op (from Python)."""
    h = trace.host
    ops = in_steps(h.filter(pl.col("cat") == "cpu_op").select("i", "name", "ts", "dur"), steps)
    kids = (h.filter(pl.col("parent").is_not_null()).group_by("parent")
            .agg(pl.col("dur").sum().alias("_kids")).rename({"parent": "i"}))
    top = top_level_ops(trace).select("i", _top=pl.lit(True))
    ops = (ops.join(kids, on="i", how="left").join(top, on="i", how="left")
           .with_columns(_self=(pl.col("dur") - pl.col("_kids").fill_null(0)).clip(lower_bound=0)))
    return (ops.group_by("name").agg(
        pl.len().alias("calls"), pl.col("dur").sum().alias("total_ns"), pl.col("_self").sum().alias("self_ns"),
        pl.col("_top").fill_null(False).sum().alias("top_calls"))
        .rename({"name": "op"}).sort("self_ns", "op", descending=[True, False], maintain_order=True))


def step_split(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """[step, dur, input, cpu_ops, communication, outside_ops] in ns: each instant of a step once (priority order
    of `SPLIT`); the four parts of a step add up to its length."""
    if steps.height == 0:
        return pl.DataFrame(schema={"step": pl.Int64, "dur": pl.Int64, **{c: pl.Int64 for c in SPLIT}})
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    # (the columns read, then the filter: a filter copies every column of its frame)
    h = pick(trace.host, "i", "cat", "name", "ts", "end").filter(pl.col("cat").is_in(["cpu_op", "user_annotation"]))
    top = top_level_ops(trace)
    coll = h.filter(pl.col("name").str.contains(COLLECTIVE_RE))
    iv = pl.concat([
        h.filter(pl.col("name").str.contains(DATALOADER_RE)).select(pl.lit("input").alias("label"), "ts", "end"),
        # a top-level op that is itself a collective (c10d::allreduce_) is communication, not work
        top.join(pick(coll, "i"), on="i", how="anti").select(pl.lit("cpu_ops").alias("label"), "ts", "end"),
        coll.select(pl.lit("communication").alias("label"), "ts", "end"),
    ])
    win = pick(steps, "step", "ts", "end").sort("ts")
    sweep = priority_sweep(clip(iv, lo, hi), list(SPLIT[:3]), win, other="outside_ops")
    wide = sweep.pivot(on="label", index="step", values="dur")
    for c in SPLIT:
        if c not in wide.columns:
            wide = wide.with_columns(pl.lit(0, pl.Int64).alias(c))
    return (win.select("step", (pl.col("end") - pl.col("ts")).alias("dur")).join(wide, on="step", how="left")
            .select("step", "dur", *[pl.col(c).fill_null(0).cast(pl.Int64) for c in SPLIT]).sort("step"))


def layer_times(trace: Trace, steps: pl.DataFrame) -> pl.DataFrame:
    """Per layer in tree order: [layer, name, depth, fwd_ns, bwd_ns, other_ns, cpu_ns, ops] from the top-level
    ops each layer issued (inclusive of its sub-layers), plus `(unattributed)` when some ops have no layer."""
    att = attribution(trace)
    top = in_steps(top_level_ops(trace).select("i", "ts", "dur"), steps).join(
        host_layers(trace).select("i", "layer", "phase"), on="i", how="left").with_columns(
        pl.col("layer").fill_null(UNATTRIBUTED), pl.col("phase").fill_null("other"))
    ph = pl.col("phase")
    agg = [pl.col("dur").filter(ph == "forward").sum().alias("fwd_ns"),
           pl.col("dur").filter(ph == "backward").sum().alias("bwd_ns"),
           pl.col("dur").filter(~ph.is_in(["forward", "backward"])).sum().alias("other_ns"),
           pl.col("dur").sum().alias("cpu_ns"), pl.len().alias("ops")]
    schema = {"layer": pl.String, "name": pl.String, "depth": pl.Int32, "fwd_ns": pl.Int64, "bwd_ns": pl.Int64,
              "other_ns": pl.Int64, "cpu_ns": pl.Int64, "ops": pl.UInt32}
    if att.tree.height == 0 or top.height == 0:
        return pl.DataFrame(schema=schema)
    # summed per layer, then added up the layer tree (no row per enclosing layer)
    tree = att.tree
    cols = ["fwd_ns", "bwd_ns", "other_ns", "cpu_ns", "ops"]
    own = pick(tree, "layer").join(top.group_by("layer").agg(agg), on="layer", how="left", maintain_order="left")
    up = subtree_sums(tree, own.select(cols).fill_null(0).cast(pl.Int64).to_numpy())
    per = pick(tree, "layer", "name", "depth", "first_ts").hstack(
        pl.DataFrame(up, schema=cols, orient="row")).sort("first_ts", "depth", maintain_order=True)
    un = top.filter(pl.col("layer") == UNATTRIBUTED)
    parts = [per.select(list(schema)).cast(schema)]
    if un.height:
        parts.append(un.group_by("layer").agg(agg).with_columns(name=pl.lit(UNATTRIBUTED), depth=pl.lit(0))
                     .select(list(schema)).cast(schema))
    return pl.concat(parts).with_columns([pl.col(c).fill_null(0) for c in list(schema)[3:]])
