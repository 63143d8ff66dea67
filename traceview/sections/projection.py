"""The `projection` section: the step replayed with each rule's fix, with all of them together, and with a chosen
set (`--what-if`), all in unprofiled terms (analyses/fixes.py: each fix is its rule's replay transform).

Nothing is added up: `all_fixed_unprofiled_step_us` is one replay with every fix applied together, so two fixes
that remove the same idle time count it once. `savings_us` of a fix is per step in unprofiled terms (the replay
with the profiler's cost removed, less that with the fix too) — the same number as its findings' `savings_us`
together. A rule whose fix the replay cannot express (no `fix_transform`) is listed with `model: null` and no
saving.
"""

from __future__ import annotations

from typing import Any

from ..analyses.fixes import if_host_keeps_up_us, per_step_us, pricing_transform, transforms
from ..analyses.replay import replay
from ..options import Options
from ..ruleapi import RuleContext
from .fixrunner import what_if
from .section import Section

SECTION = Section(
    keys=('projection',), computes="the average step projected with each rule's findings fixed, and with all",
    json_type='object\\|null', text='header', app_page='overview',
    json_doc="the step replayed with each rule's fix, with all of them together and with a chosen set (docs/replay.md; nothing is added up): `step_us` (measured average analysed step), `unprofiled_step_us` (the profiling estimate, else the collector's measured step; null otherwise), `unprofiled_source` (`estimate`/`measured`/`user` (`--unprofiled-ms`)/null), `replayed_unprofiled_step_us` (the replay with the profiler's cost removed, solved to the collector's measured unprofiled step where there is one), `fixes` [{`rule`, `code`, `model` (`replay`, or null when the rule's fix cannot be replayed), `savings_us` (per step, unprofiled terms: the same number as its findings' savings together; a fix whose time a larger fix saves too reports what is left after it, with `alone_savings_us` and `after`), `traced_savings_us`, `step_us`, and on a step the device holds (GPU busy >= 90 % of it) where the fix leaves the replay host-bound, `if_host_keeps_up_us` (the fix's saving with the host as fast as the profiler model allows: the trace does not show the host's unprofiled speed, so `savings_us` is the fitted profiler cost's host; a faster host saves up to this, a slower one less)}] sorted by savings, `all_fixed_step_us`, `all_fixed_unprofiled_step_us` (one replay with every fix), `what_if` (`--what-if RULES`, a rule's fix variant as `NAME:VARIANT`: {`fixes`, `step_us`, `fixed_step_us`, `savings_us`, `unknown`, `without_model`, `nothing_to_fix`}, else null). Ready for a waterfall chart",
)



def unprofiled_step_us(profiling: dict | None) -> tuple[float | None, str | None, float | None]:
    """(the unprofiled step time, its source, the profiled step time it compares with — None: the traced
    step): the collector's CUDA-event measurement where there is one (it pairs with its own profiled
    measurement), else the profiling estimate from the trace itself."""
    if not profiling:
        return None, None, None
    ms, prof = profiling.get("unprofiled_step_ms"), profiling.get("profiled_step_ms")
    if ms is not None:
        how = "user" if profiling.get("method") == "user" else "measured"
        return float(ms) * 1000, how, (float(prof) * 1000 if prof else None)
    est = profiling.get("estimated_unprofiled_step_us")
    if est is not None:
        return float(est), "estimate", None
    return None, None, None


def projection_section(ctx: RuleContext | None, findings: list[dict], profiling: dict | None,
                       options: Options, fixinfo: dict | None = None) -> dict[str, Any] | None:
    """{step_us, unprofiled_step_us, unprofiled_source, replayed_unprofiled_step_us, fixes: [{rule, code, model,
    savings_us, traced_savings_us, step_us}], all_fixed_step_us, all_fixed_unprofiled_step_us, what_if}."""
    if ctx is None or ctx.steps.height == 0:
        return None
    n = ctx.steps.height
    step = ctx.window_ns / n
    unprof, source, _ref = unprofiled_step_us(profiling)
    info = fixinfo or {"rules": {}, "transforms": {}}
    tf, sav = info["transforms"], info["rules"]
    base = [pricing_transform(ctx)]
    b = replay(ctx.trace, ctx.steps, base)
    b_us = float(b.mean()) / 1000 if b.size else 0.0
    codes = {f["rule"]: f["code"] for f in findings}
    fixes = []
    rest = info.get("remainder") or {}  # rules whose findings report what is left after a larger fix
    for rule in sorted({f["rule"] for f in findings if f["severity"] != "info" or f["savings_us"] > 0 or f["rule"] in rest}):
        s = sav.get(rule)
        us = (rest[rule]["us"] if rule in rest else s["unprofiled_us"]) if s else 0.0
        fixes.append({"rule": rule, "code": codes[rule], "model": "replay" if s else None,
                      "savings_us": round(us, 3),
                      "traced_savings_us": round(s["traced_us"], 3) if s else 0.0,
                      "step_us": round(b_us - us, 3)})
        if rule in rest:
            fixes[-1].update(alone_savings_us=round(s["unprofiled_us"], 3), after=rest[rule]["after"])
    # on a step the device holds, a fix the replay leaves host-bound is priced at the fitted profiler cost's host:
    # what it saves if the host keeps up (fixes.if_host_keeps_up_us)
    busy = (profiling or {}).get("gpu_busy_per_step_us")
    up = if_host_keeps_up_us(ctx, {f["rule"]: tf[f["rule"]] for f in fixes if f["rule"] in tf and sav.get(f["rule"])},
                             b_us, busy, {r: s["unprofiled_us"] for r, s in sav.items()})
    for f in fixes:
        if f["rule"] in up:
            f["if_host_keeps_up_us"] = round(up[f["rule"]], 3)
    fixes.sort(key=lambda x: (-x["savings_us"], x["code"]))
    every = [tf[f["rule"]] for f in fixes if f["rule"] in tf]
    # every fix together, each bounded fix held to its bound (fixes.per_step_us: host-sync's ceiling)
    b_tr = replay(ctx.trace, ctx.steps, [])
    traced_all = float(b_tr.mean()) / 1000 - per_step_us(ctx.trace, ctx.steps, every, [], b_tr) if every else step / 1000
    unprof_all = b_us - per_step_us(ctx.trace, ctx.steps, every, base, b) if every else b_us
    out = {
        "step_us": round(step / 1000, 3), "unprofiled_step_us": round(unprof, 3) if unprof is not None else None,
        "unprofiled_source": source, "replayed_unprofiled_step_us": round(b_us, 3), "fixes": fixes,
        "all_fixed_step_us": round(min(traced_all, step / 1000), 3),
        "all_fixed_unprofiled_step_us": round(unprof_all, 3), "what_if": None,
    }
    if options.what_if:
        out["what_if"] = what_if(ctx, _all_transforms(ctx, options, tf), options.what_if, options)
    return out


def _all_transforms(ctx: RuleContext, options: Options, have: dict) -> dict:
    """Every selected rule's fix transform (the what-if may name a rule without findings)."""
    from traceview.rules import RULES

    mods = [RULES[c] for c in options.selected() if RULES[c].NAME not in have]
    return {**have, **transforms(ctx, options, mods)}
