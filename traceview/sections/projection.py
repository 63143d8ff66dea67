"""The `projection` section: the average step time projected with each rule's findings fixed, and with all.

Projected on the timeline, never by adding savings: each fix is the set of intervals it removes from the
analysed steps (a rule's `removes(ctx, finding)`, see analyses/whatif.py for the principles; the classifier's
segments for the rules whose fix removes a whole class of idle time), the steps close up over them, and
all fixes together remove the union, so two fixes that remove the same instant count it once. A rule with
no timeline model contributes its own savings estimate as an interval at the end of each step it names
(`model: "savings"`), which can only over-count against the others.

`savings_us` is per step in unprofiled terms when the unprofiled step time is known (the profiling
estimate, else the collector's measurement): the traced saving scaled by unprofiled / profiled step time
(the collector's profiled measurement, else the traced step).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceview.rules import BY_NAME

from ..analyses.intervals import clip, merge
from ..analyses.whatif import EMPTY, removed_per_step
from ..options import Options
from ..ruleapi import RuleContext
from .section import Section

SECTION = Section(
    keys=('projection',), computes="the average step projected with each rule's findings fixed, and with all",
    json_type='object\\|null', text='header', app_page='overview',
    json_doc="the average step with each rule's findings fixed, projected on the timeline (the intervals a fix removes are cut out of the steps and the rest closes up; all fixes remove the union, so overlapping fixes count once): `step_us` (measured average analysed step), `unprofiled_step_us` (the profiling estimate `profiling.estimated_unprofiled_step_us` where present, else the collector's measured `unprofiled_step_ms`; null otherwise), `unprofiled_source` (`estimate`/`measured`/null), `fixes` [{`rule`, `code`, `model` (`timeline`: the rule's own model; `class`: removes the classifier class of its idle time; `savings`: its savings estimate at the end of its steps), `step_us` (projected average traced step with that fix), `savings_us` (per step; in unprofiled terms — scaled by unprofiled / profiled step — when the unprofiled time is known), `traced_savings_us`}] sorted by savings, `all_fixed_step_us`, `all_fixed_unprofiled_step_us` (null without an unprofiled time). Ready for a waterfall chart",
)


def _fallback(ctx: RuleContext, findings: list[dict]) -> pl.DataFrame:
    """Each finding's savings as an interval at the end of its steps (split evenly)."""
    rows = []
    for f in findings:  # a handful
        steps = ctx.steps.filter(pl.col("step").is_in(f["steps"] or ctx.steps["step"].to_list()))
        if steps.height == 0:
            continue
        each = int(f["savings_us"] * 1000 / steps.height)
        rows += [(int(e) - min(each, int(e - s)), int(e)) for s, e in steps.select("ts", "end").rows()]
    return pl.DataFrame(rows, schema={"ts": pl.Int64, "end": pl.Int64}, orient="row") if rows else EMPTY


def fix_intervals(ctx: RuleContext, rule: str, findings: list[dict], options: Options) -> tuple[pl.DataFrame, str]:
    """(the intervals fixing `rule`'s findings removes, the model used: 'timeline' | 'class' | 'savings')."""
    mod = BY_NAME.get(rule)
    if mod is not None and hasattr(mod, "removes"):
        rctx = ctx.for_rule(mod, options.options_for(mod))
        parts = [mod.removes(rctx, f) for f in findings]
        parts = [p.select("ts", "end") for p in parts if p.height]
        return (merge(pl.concat(parts)) if parts else EMPTY), "timeline"
    if mod is not None and getattr(mod, "FIX_REMOVES_CLASS", False):  # the GPU idles for that reason only
        return ctx.class_time(mod.CLASS).select("ts", "end"), "class"
    return _fallback(ctx, findings), "savings"


def unprofiled_step_us(profiling: dict | None) -> tuple[float | None, str | None, float | None]:
    """(the unprofiled step time, its source, the profiled step time it compares with — None: the traced
    step): the collector's CUDA-event measurement where there is one (it pairs with its own profiled
    measurement), else the profiling estimate from the trace itself."""
    if not profiling:
        return None, None, None
    ms, prof = profiling.get("unprofiled_step_ms"), profiling.get("profiled_step_ms")
    if ms is not None:
        return float(ms) * 1000, "measured", (float(prof) * 1000 if prof else None)
    est = profiling.get("estimated_unprofiled_step_us")
    if est is not None:
        return float(est), "estimate", None
    return None, None, None


def projection_section(ctx: RuleContext | None, findings: list[dict], profiling: dict | None,
                       options: Options) -> dict[str, Any] | None:
    if ctx is None or ctx.steps.height == 0:
        return None
    n = ctx.steps.height
    step = ctx.window_ns / n
    unprof, source, ref = unprofiled_step_us(profiling)
    ref_ns = ref * 1000 if ref else step
    scale = unprof * 1000 / ref_ns if unprof and ref_ns else None
    lo, hi = ctx.lo, ctx.hi

    def projected(removed: pl.DataFrame) -> float:
        gone = int(removed_per_step(clip(removed, lo, hi), ctx.steps)["removed"].sum()) if removed.height else 0
        return (ctx.window_ns - gone) / n

    by_rule: dict[str, list[dict]] = {}
    for f in findings:
        if f["savings_us"] > 0:
            by_rule.setdefault(f["rule"], []).append(f)
    fixes, every = [], []
    for rule, fs in by_rule.items():  # ranked order of the findings: one per rule
        iv, model = fix_intervals(ctx, rule, fs, options)
        every.append(iv)
        p = projected(iv)
        saved = step - p
        fixes.append({"rule": rule, "code": fs[0]["code"], "model": model, "step_us": round(p / 1000, 3),
                      "savings_us": round((saved * scale if scale else saved) / 1000, 3),
                      "traced_savings_us": round(saved / 1000, 3)})
    fixes.sort(key=lambda x: (-x["traced_savings_us"], x["code"]))
    # one fix: all fixed is that fix (the projection reads the union of the clipped intervals either way)
    allp = step if not every else projected(every[0]) if len(every) == 1 else projected(merge(pl.concat(every)))
    return {
        "step_us": round(step / 1000, 3), "unprofiled_step_us": round(unprof, 3) if unprof is not None else None,
        "unprofiled_source": source, "fixes": fixes, "all_fixed_step_us": round(allp / 1000, 3),
        "all_fixed_unprofiled_step_us": round(allp * scale / 1000, 3) if scale else None,
    }
