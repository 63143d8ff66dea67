"""Every finding's saving from the replay (issue 25): each rule's fix replayed (analyses/fixes.py) and given to
its findings; severity follows it; the `--what-if` replay of a chosen set of fixes.

A finding's `savings_us` is its rule's replayed saving per step in unprofiled terms (`overhead.saving`), split
over the rule's findings in proportion to their measured cost (one transform per rule: the split never adds up
to more than the rule's replay). Where a larger fix saves the same time (a decode loop's CUDA graph and the
launch-bound fix), the larger one owns it: the other's findings are `info` and report only what is left of
their saving once the larger fix is made (`marginal_savings`; `evidence.after_larger_fixes` keeps the saving
alone). A rule without a `fix_transform` (its fix cannot be expressed on the graph)
saves nothing and its findings are `info`. A finding whose fix saves something only in the traced (profiled)
replay and nothing once the profiler's cost is removed is the profiler's own and is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from traceview.rules import BY_NAME, RULES

from ..analyses.fixes import per_step_us, pricing_transform, rule_savings, saving_us, transforms
from ..analyses.replay import Transform, replay
from ..evidence import AfterLargerFixes, ProfilerNote, to_builtins
from ..finding_model import ranked, severity_for, severity_rank
from ..ruleapi import profiler_source_text
from .findings import RULE_SEVERITY


def apply(ctx, options, findings: list[dict]) -> tuple[list[dict], dict[str, Any]]:
    """(findings with replayed savings and severities, {rules: rule -> savings, transforms: rule -> Transform,
    base_step_us}). Rules without a transform keep their findings at `info` with no saving."""
    named = sorted({f["rule"] for f in findings if f["rule"] in BY_NAME})
    errors: list[str] = []
    tf = transforms(ctx, options, [BY_NAME[r] for r in named], errors)
    sav = rule_savings(ctx, tf)
    n = max(1, ctx.steps.height)
    base_us = float(replay(ctx.trace, ctx.steps, [pricing_transform(ctx)]).mean()) / 1000
    window_us = ctx.window_ns / 1000 / n  # the traced step
    # a saving is in unprofiled terms (the profiler's cost replayed away): the share it shows (`savings_pct`, the
    # verdict's, the projection's) is of the unprofiled step; of the traced step the same saving reads smaller by
    # the profiler's cost (22 % where Swin-T's job gains 52 %). Severity reads the traced step's share, the
    # conservative one: a saving priced on a profiled host carries that host's error (a sync twin priced at 5 % of
    # its unprofiled step measured nothing), and the profiler's cost discounts it by as much as it inflated the step
    step_us = base_us if base_us > 0 else window_us
    after = marginal_savings(ctx, tf, sav)
    remainder: set[str] = set()  # rules whose findings report only what is left after the larger fixes
    out = []
    for r in {f["rule"] for f in findings}:
        fs = [{k: v for k, v in f.items() if k != RULE_SEVERITY} for f in findings if f["rule"] == r]
        judged = [bool(f.get(RULE_SEVERITY)) for f in findings if f["rule"] == r]
        s = sav.get(r)
        if s is None:  # no fix model: the finding keeps its evidence, not a saving
            for f in fs:
                out.append({**f, "savings_us": 0.0, "savings_pct": 0.0, "severity": "info"})
            continue
        if s["unprofiled_us"] <= 0.0005 and s["traced_us"] > 0.0005:
            continue  # only the profiler's cost: nothing to fix once it is gone
        cost = np.array([max(float(f["cost_us"]), 0.0) for f in fs])
        w = cost / cost.sum() if cost.sum() > 0 else np.full(len(fs), 1.0 / len(fs))
        opts = options.options_for(BY_NAME[r]) if r in BY_NAME else {}
        m = after.get(r)
        # the larger fix owns the shared time when what is left of this rule's is below its moderate share: its
        # findings then report only that remainder (the projection's entry too)
        if m is not None and "moderate_pct" in opts and window_us and 100.0 * m["us"] / window_us < opts["moderate_pct"]:
            remainder.add(r)
        for f, wi, own in zip(fs, w, judged, strict=True):
            alone = min(s["unprofiled_us"] * float(wi), base_us)
            us = min(m["us"] * float(wi), alone) if r in remainder else alone
            grade = 100.0 * alone / window_us if window_us else 0.0  # (severity's share: of the traced step)
            pct = 100.0 * alone / step_us if step_us else 0.0
            sev = f["severity"]
            if "moderate_pct" in opts:  # the replayed saving grades it; a rule's own judgement is a ceiling
                sev = severity_for(grade, opts["moderate_pct"], opts["high_pct"], BY_NAME[r].SEVERITY)
                if m is not None and sev != "info":  # what it still saves once the larger fixes are made
                    left = m["us"] * float(wi)
                    if (100.0 * left / window_us if window_us else 0.0) < opts["moderate_pct"]:
                        sev = "info"
                        m_pct = 100.0 * left / step_us if step_us else 0.0
                        f = {**f, "evidence": {**f["evidence"], "after_larger_fixes": to_builtins(AfterLargerFixes(
                            fixes=m["after"], savings_us=round(left, 3),
                            savings_pct=round(m_pct, 2), alone_savings_us=round(alone, 3),
                            note=(f"the time it saves is mostly the same as {', '.join(m['after'])}'s: once "
                                  f"that is fixed this fix saves {m_pct:.1f} % of the step")))}}
                if own and severity_rank(f["severity"]) < severity_rank(sev):
                    sev = f["severity"]
            if r in remainder:  # (its share is what is left, not the profiler's doing)
                sev, pct = "info", 100.0 * us / step_us
                if "after_larger_fixes" not in f["evidence"]:
                    f = {**f, "evidence": {**f["evidence"], "after_larger_fixes": to_builtins(AfterLargerFixes(
                        fixes=m["after"], savings_us=round(us, 3), savings_pct=round(pct, 2),
                        alone_savings_us=round(alone, 3),
                        note=(f"the time it saves is mostly the same as {', '.join(m['after'])}'s: once that is "
                              f"fixed this fix saves {pct:.1f} % of the step")))}}
            if us <= 0.0005:
                sev = "info"
            f = {**f, "savings_us": round(us, 3), "savings_pct": round(pct, 2), "severity": sev}
            traced_pct = 100.0 * s["traced_us"] * float(wi) / window_us if window_us else 0.0
            if "moderate_pct" in opts and grade < opts["moderate_pct"] <= traced_pct and r not in remainder:
                f["evidence"] = {**f["evidence"], "profiler": _profiler_note(ctx, us, traced_pct, pct)}
            elif "profiler" in f["evidence"]:  # a rule's own estimate of the profiler's share: the replay's instead
                f["evidence"] = {**f["evidence"], "profiler": _profiler_note(ctx, us, traced_pct, pct, most=False)}
            out.append(f)
    # what to fix first leads: findings above info by replayed saving, then the info ones
    owned = {r: {"us": min(after[r]["us"], sav[r]["unprofiled_us"]), "after": after[r]["after"]} for r in remainder}
    return sorted(ranked(out), key=lambda f: f["severity"] == "info"), {"rules": sav, "transforms": tf,
                                                                        "base_step_us": base_us, "remainder": owned,
                                                                        "errors": errors}


def marginal_savings(ctx, tf: dict[str, Transform], sav: dict[str, dict[str, float]]) -> dict[str, dict]:
    """rule -> {us, after}: what each fix still saves per step (unprofiled terms) once the fixes with larger
    savings are made, in that order (one replay per fix after the first). Two rules that price the same idle
    (a graph break's sync and the launch gaps after it; a sync and the relaunch it forces) are not both worth
    fixing: the smaller one's severity follows what is left of it. Nothing is added up."""
    order = sorted((r for r in tf if sav.get(r, {}).get("unprofiled_us", 0.0) > 0),
                   key=lambda r: (-sav[r]["unprofiled_us"], r))
    if len(order) < 2:
        return {}
    base = [pricing_transform(ctx)]
    prev = replay(ctx.trace, ctx.steps, [*base, tf[order[0]]])
    out = {}
    for i, r in enumerate(order[1:], start=1):
        cur = replay(ctx.trace, ctx.steps, [*base, *(tf[x] for x in order[: i + 1])])
        # (priced as fixes.per_step_us prices them: the steps after the first where they remove a drain every step)
        us = saving_us(ctx.trace, ctx.steps, [*base, *(tf[x] for x in order[:i])], [tf[r]], prev, cur)
        bound = tf[r].bound_us
        out[r] = {"us": min(us, bound) if bound is not None else us, "after": order[:i]}
        prev = cur
    return out


def _profiler_note(ctx, us: float, traced_pct: float, pct: float, most: bool = True) -> dict[str, Any]:
    """Evidence (an `evidence.ProfilerNote`) for a finding whose fix saves a moderate share of the traced step but
    not once the replay takes the profiler's cost off (analyses.overhead): the profiler explains most of what the
    rule saw (`most`), else the replayed saving with and without the profiler's cost."""
    prof = ctx.profiler
    how = profiler_source_text(prof)
    over = float(prof.get("overhead_ns") or 0.0) / 1000
    note = (f"the profiler's own cost ({how}: {over:,.1f} µs per step) accounts for most of this: replayed "
            f"without it the fix saves {us:,.1f} µs a step ({pct:.1f} % of the unprofiled step, against "
            f"{traced_pct:.1f} % of the traced step as recorded) — re-record with fewer events (no --stack/--modules) "
            "or time the unprofiled step to confirm") if most else (
            f"the profiler's own cost ({how}: {over:,.1f} µs per step) is replayed away: the fix saves "
            f"{us:,.1f} µs a step, {pct:.1f} % of the unprofiled step ({traced_pct:.1f} % of the traced step as "
            "recorded)")
    return to_builtins(ProfilerNote(
        source=prof.get("source"), overhead_per_step_us=round(over, 3),
        unprofiled_step_us=round(float(prof.get("unprofiled_step_ns") or 0.0) / 1000, 3),
        traced_savings_pct=round(traced_pct, 2), unprofiled_savings_pct=round(pct, 2), note=note))


def what_if(ctx, tf: dict[str, Transform], names: Sequence[str], options: Any = None) -> dict[str, Any]:
    """{fixes, unknown, step_us, fixed_step_us, savings_us}: the replayed unprofiled step with the named rules'
    fixes applied together (names are rule slugs or codes; `name:variant` is the fix made that way, where the rule
    prices several, `fix_variants`: `fp32-gemm:autocast`, `unfused-optimizer:foreach`, `gemm-epilogue:compile`; a
    variant the rule does not price for this trace is listed in `unknown` with the ones it does)."""
    from traceview.options import Options

    chosen, unknown, made, rules = [], [], dict(tf), set()
    for n in names:
        key, _, variant = n.partition(":")
        mod = RULES.get(key.upper()) or BY_NAME.get(key)
        if mod is None:
            unknown.append(n)
            continue
        if mod.NAME in rules:
            continue  # one way to fix per rule: the first (the options list them in code order)
        label = f"{mod.NAME}:{variant}" if variant else mod.NAME
        if variant:
            got = mod.fix_variants(ctx.for_rule(mod, (options or Options()).options_for(mod))) \
                if hasattr(mod, "fix_variants") else {}
            if variant not in got:
                unknown.append(f"{label} (priced here: {', '.join(sorted(got)) or 'none'})")
                continue
            made[label] = got[variant]
        chosen.append(label)
        rules.add(mod.NAME)
    base = [pricing_transform(ctx)]
    b = replay(ctx.trace, ctx.steps, base)
    have = [made[r] for r in chosen if r in made]
    # the same pricing as the findings' (fixes.per_step_us: mean periods, the fixes' own bounds)
    saved = per_step_us(ctx.trace, ctx.steps, have, base, b) if have else 0.0
    step = float(b.mean()) / 1000 if b.size else 0.0
    def mod_of(r: str):
        return BY_NAME[r.partition(":")[0]]

    return {"fixes": chosen, "without_model": [r for r in chosen if not hasattr(mod_of(r), "fix_transform")],
            "nothing_to_fix": [r for r in chosen if r not in made and hasattr(mod_of(r), "fix_transform")],
            "unknown": unknown,
            "step_us": round(step, 3), "fixed_step_us": round(step - saved, 3), "savings_us": round(saved, 3)}
