"""The timeline of one step as plain data (what a trace viewer draws): CPU threads, GPU streams, the
classifier's segments and the findings' occurrences.

`timeline(trace, step, max_items)` returns lists of dicts with µs times relative to the step start, so a
front end (the web app) only draws them. Everything comes from the trace frames, the classifier partition
that `RuleContext.prepare` computes for the rules and the rules' own detectors (syncs, elementwise chains):
the timeline shows the same occurrences the findings count.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceview.rules import (
    RULES,
    elementwise_chain,
    host_sync,
    input_bound,
    launch_bound,
    nccl_wait,
    pageable_memcpy,
)

from ..analyses.classify import IDLE_CLASSES, partition, string_classes
from ..errors import TraceError
from ..model import RUNTIME_CATS, STEP_RE, Trace
from ..ruleapi import RuleContext

MAX_ITEMS = 20_000  # drawn slices; beyond that the shortest (narrower than a pixel at step zoom) are dropped
MAX_ROWS = {"python": 6, "op": 4, "runtime": 1}  # nesting levels drawn per thread; deeper ones are detail
GROUP_ORDER = ("python", "op", "runtime")


def _us(col: str | pl.Expr, lo: int) -> pl.Expr:
    e = pl.col(col) if isinstance(col, str) else col
    return ((e - lo) / 1000).round(3)


def _step_window(trace: Trace, step: int) -> pl.DataFrame:
    sel = trace.steps.filter(pl.col("step") == step)
    if sel.height == 0:
        have = ", ".join(map(str, trace.steps["step"].to_list()))
        raise TraceError(f"{trace.meta.path}: no step {step} in this trace (steps: {have})")
    return sel


def _part(trace: Trace, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(classifier segments, kernel bounds) of the step: the rules' own partition (RuleContext.prepare); a last
    step cut off by the recording, which the rules leave out, is partitioned the same way (as the layers do)."""
    ctx, _ = RuleContext.prepare(trace, steps)
    if ctx.steps.height == steps.height:
        return string_classes(ctx.part), ctx.kb
    return partition(trace, steps, ctx.kb), ctx.kb


def _merge_runs(part: pl.DataFrame) -> pl.DataFrame:
    """Consecutive segments of one class as one [ts, end, cls] (they still tile the step)."""
    p = part.sort("ts").with_columns(_run=(pl.col("cls") != pl.col("cls").shift()).fill_null(True).cast(pl.Int64).cum_sum())
    return p.group_by("_run").agg(pl.col("ts").min(), pl.col("end").max(), pl.col("cls").first()).sort("ts").drop("_run")


def _nesting(h: pl.DataFrame) -> pl.Series:
    """Per slice, how many slices of its group and thread are open when it starts (its row): a sweep over
    starts (+1) and ends (-1); at one instant ends come first and an enclosing slice before the one inside."""
    key = ["pid", "tid", "group"]
    ev = pl.concat([
        h.select(*key, "i", t=pl.col("ts"), d=pl.lit(1), o=pl.lit(1), ne=-pl.col("end")),
        h.select(*key, "i", t=pl.col("end"), d=pl.lit(-1), o=pl.lit(0), ne=pl.lit(0, pl.Int64)),
    ]).sort(*key, "t", "o", "ne", "i", maintain_order=True)
    ev = ev.with_columns(open=pl.col("d").cum_sum().over(key)).filter(pl.col("d") == 1)
    return h.select("i").join(ev.select("i", row=pl.col("open") - 1), on="i", how="left")["row"].cast(pl.Int64)


def _host_items(trace: Trace, lo: int, hi: int) -> pl.DataFrame:
    """[lane, label, order, name, kind, ts, end, op, launch]: host slices of the step, one row per nesting level."""
    h = trace.host.filter((pl.col("end") > lo) & (pl.col("ts") < hi) & ~pl.col("name").str.contains(STEP_RE))
    grp = (pl.when(pl.col("cat") == "python_function").then(pl.lit("python"))
           .when(pl.col("cat").is_in(["cpu_op", "user_annotation"])).then(pl.lit("op"))
           .when(pl.col("cat").is_in(RUNTIME_CATS)).then(pl.lit("runtime")))
    h = h.with_columns(group=grp).filter(pl.col("group").is_not_null())
    # Python frames that enclose the whole step (interpreter start-up, the training loop) say nothing at the
    # step's zoom and would take every row: the rows go to the frames inside the step
    h = h.filter(~((pl.col("group") == "python") & (pl.col("ts") <= lo) & (pl.col("end") >= hi)))
    h = h.with_columns(row=_nesting(h))
    cap = pl.col("group").replace_strict(MAX_ROWS, return_dtype=pl.Int64)
    # a safety net where the recorded slices are not nested (the Python tracer's frames can overlap): a slice
    # that starts before an earlier one of its row ends is left out, so a row never overlaps
    h = h.sort("ts", "i", maintain_order=True).with_columns(
        _prev=pl.col("end").cum_max().shift().over("pid", "tid", "group", "row"))
    h = h.with_columns(keep=(pl.col("row") < cap) & (pl.col("_prev").is_null() | (pl.col("ts") >= pl.col("_prev"))))
    names = trace.threads.select("pid", "tid", pl.col("name").alias("thread"))
    h = h.join(names, on=["pid", "tid"], how="left")
    gorder = pl.col("group").replace_strict({g: k for k, g in enumerate(GROUP_ORDER)}, return_dtype=pl.Int64)
    thread = pl.col("thread").fill_null(pl.format("thread {}", pl.col("tid")))
    return h.select(
        lane=pl.format("cpu:{}:{}:{}:{}", "pid", "tid", "group", "row"),
        label=pl.when(pl.col("group") == "runtime").then(pl.format("{} · runtime", thread))
        .otherwise(pl.format("{} · {} {}", thread, "group", "row")),
        order=pl.struct(pl.lit(1).alias("a"), pl.col("pid").alias("b"), pl.col("tid").alias("c"),
                        (gorder * 1000 + pl.col("row")).alias("d")),
        name="name", kind="group", cls=pl.lit(None, pl.String), ts="ts", end="end", op=pl.lit(None, pl.String),
        launch=pl.lit(None, pl.Int64), launch_lane=pl.lit(None, pl.String), i="i", keep="keep",
    )


def _gpu_items(trace: Trace, kb: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    g = trace.gpu.filter((pl.col("kind") != "sync") & (pl.col("end") > lo) & (pl.col("ts") < hi))
    g = g.join(kb.select("i", "bound"), on="i", how="left")
    ops = trace.host.select(pl.col("i").alias("op"), pl.col("name").alias("op_name"))
    g = g.join(ops, on="op", how="left")
    cls = (pl.when(pl.col("kind") == "comm").then(pl.lit("communication"))
           .when((pl.col("kind") == "compute") & (pl.col("bound") == "compute")).then(pl.lit("gpu_compute"))
           .when(pl.col("kind") == "compute").then(pl.lit("gpu_memory")))
    return g.select(
        lane=pl.format("gpu:{}:{}", "device", "stream"),
        label=pl.format("GPU {} · stream {}", "device", "stream"),
        order=pl.struct(pl.lit(2).alias("a"), pl.col("device").alias("b"), pl.col("stream").alias("c"),
                        pl.lit(0, pl.Int64).alias("d")),
        name="name", kind="kind", cls=cls, ts="ts", end="end", op="op_name", launch="launch_ts",
        launch_lane=pl.format("thread {}", "launch_tid"), i="i", keep=pl.lit(True),
    )


def _downsample(items: pl.DataFrame, max_items: int) -> tuple[pl.DataFrame, dict[str, Any]]:
    total = items.height
    kept = items.filter("keep").drop("keep")
    deep = total - kept.height
    cut = 0
    if kept.height > max_items:
        # the longest slices: what stays visible at the step's zoom; ties by position in the file
        kept = kept.with_columns(_d=pl.col("end") - pl.col("ts")).sort(["_d", "i"], descending=[True, False], maintain_order=True)
        cut = kept.height - max_items
        kept = kept.head(max_items).drop("_d")
    return kept, {"slices": total, "drawn": kept.height, "not_drawn_nested": deep, "shortest_dropped": cut}


def _windows(seg: pl.DataFrame, syncs: pl.DataFrame, chains: pl.DataFrame, pageable: pl.DataFrame,
             lo: int, hi: int) -> list[dict]:
    """The costliest occurrence in this step of what each rule reports: where to zoom for a finding (clipped
    to the step)."""
    out = []

    def add(code: str, name: str, label: str, df: pl.DataFrame, ts: str = "ts", end: str = "end",
            cost: pl.Expr | None = None) -> None:
        if df.height == 0:
            return
        w = df.with_columns(_c=cost if cost is not None else pl.col(end) - pl.col(ts)).sort(
            ["_c", ts], descending=[True, False], maintain_order=True).row(0, named=True)
        a, b = max(w[ts], lo), min(w[end], hi)
        out.append({"code": code, "rule": name, "label": label, "ts_us": round((a - lo) / 1000, 3),
                    "end_us": round((b - lo) / 1000, 3)})

    def cls(c: str) -> pl.DataFrame:
        return seg.filter(pl.col("cls") == c)

    add(launch_bound.CODE, launch_bound.NAME, "longest launch-bound gap", cls("cpu_launch"))
    if syncs.height:
        add(host_sync.CODE, host_sync.NAME, "costliest sync", syncs.with_columns(_e=pl.max_horizontal("end", "next_ts")),
            end="_e", cost=pl.col("cost"))
    if chains.height:
        ch = chains.group_by("chain").agg(pl.col("ts").min(), pl.col("end").max())
        add(elementwise_chain.CODE, elementwise_chain.NAME, "longest elementwise chain", ch)
    add(pageable_memcpy.CODE, pageable_memcpy.NAME, "longest pageable copy", pageable)
    add(input_bound.CODE, input_bound.NAME, "longest input wait", cls("input"))
    add(nccl_wait.CODE, nccl_wait.NAME, "longest exposed NCCL wait", cls("communication"))
    # every other rule: the longest stretch of the class whose time its fix removes (the rule's CLASS)
    done = {w["code"] for w in out}
    for code, mod in sorted(RULES.items()):
        klass = getattr(mod, "CLASS", None)
        if code not in done and klass:
            add(code, mod.NAME, f"longest {klass.replace('_', ' ')} stretch", cls(klass))
    return out


def timeline(trace: Trace, step: int, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The timeline of ProfilerStep#`step` (times in µs from the step start): lanes (CPU thread rows, then
    GPU streams), the drawn slices (at most `max_items`, the longest), the classifier's segments (tiling the
    step), the syncs, elementwise chains and exposed NCCL waits, and per rule the window to zoom to."""
    steps = _step_window(trace, step)
    lo, hi = int(steps["ts"][0]), int(steps["end"][0])
    part, kb = _part(trace, steps)
    seg = _merge_runs(part) if part.height else part
    items = pl.concat([_host_items(trace, lo, hi), _gpu_items(trace, kb, lo, hi)], how="vertical_relaxed")
    items = items.with_columns(ts=pl.col("ts").clip(lo, hi), end=pl.col("end").clip(lo, hi))
    items, counts = _downsample(items, max_items)
    lanes = items.select("lane", "label", "order").unique("lane").sort("order", "lane", maintain_order=True)
    items = items.sort("order", "ts", "i", maintain_order=True)

    syncs = host_sync.attributed_syncs(trace, steps, part) if trace.has_gpu else pl.DataFrame()
    if syncs.height:
        syncs = syncs.filter(pl.col("step") == step).join(
            trace.host.select("i", "pid", "tid", "depth"), on="i", how="left")
    chains = elementwise_chain.chains(trace, steps, kb) if trace.has_gpu else pl.DataFrame()
    chains = chains.filter(pl.col("step") == step) if chains.height else chains
    pageable = trace.gpu.filter((pl.col("kind") == "memcpy") & pl.col("name").str.contains("Pageable")
                                & (pl.col("ts") >= lo) & (pl.col("ts") < hi))
    rel = lambda c: _us(c, lo)  # noqa: E731
    return {
        "step": step, "start_us": round(lo / 1000, 3), "dur_us": round((hi - lo) / 1000, 3),
        "lanes": [{"id": r["lane"], "label": r["label"], "kind": r["lane"].split(":", 1)[0]}
                  for r in lanes.iter_rows(named=True)],
        "items": items.select("lane", "name", "kind", pl.col("cls").fill_null(""), ts_us=rel("ts"),
                              dur_us=((pl.col("end") - pl.col("ts")) / 1000).round(3), op=pl.col("op").fill_null(""),
                              launch_us=rel("launch"), launch_thread=pl.col("launch_lane").fill_null("")).to_dicts(),
        "counts": counts,
        "segments": seg.select(ts_us=rel("ts"), end_us=rel("end"), cls="cls").to_dicts(),
        "class_us": {c: round(v / 1000, 3) for c, v in
                     part.group_by("cls").agg((pl.col("end") - pl.col("ts")).sum()).sort("cls").iter_rows()},
        "idle_classes": list(IDLE_CLASSES),
        "syncs": [] if syncs.height == 0 else syncs.select(
            pl.format("cpu:{}:{}:runtime:0", "pid", "tid").alias("lane"), "name", pl.col("cause").fill_null(""),
            ts_us=rel("ts"), end_us=rel("end"), next_gpu_us=rel("next_ts"),
            idle_us=(pl.col("cost") / 1000).round(3)).sort("ts_us").to_dicts(),
        "chains": [] if chains.height == 0 else chains.group_by("chain").agg(
            pl.format("gpu:{}:{}", "device", "stream").first().alias("lane"), pl.len().alias("kernels"),
            pl.col("ts").min(), pl.col("end").max(), pl.col("name").sort_by("pos").alias("names"),
        ).select("lane", "kernels", "names", ts_us=rel("ts"), end_us=rel("end")).sort("ts_us").to_dicts(),
        "nccl_waits": seg.filter(pl.col("cls") == "communication").select(ts_us=rel("ts"), end_us=rel("end")).to_dicts(),
        "windows": _windows(seg, syncs, chains, pageable, lo, hi),
    }
