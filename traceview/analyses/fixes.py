"""Each rule's fix replayed: the transforms the rules declare (`fix_transform(ctx)` in their modules) and their
per-step savings with the profiler's cost removed and on the trace as recorded (issue 25). traceview/sections/fixrunner.py
gives the findings these savings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType

import numpy as np
import polars as pl

from .overhead import measured_transform
from .replay import Transform, replay

#: a fix saving less than this share of the step is "nothing the rules know to fix"
FEW_PCT = 3.0


def transforms(ctx, options, rules: Sequence[ModuleType]) -> dict[str, Transform]:
    """rule name -> its fix as a Transform, for the rules that declare one (None or an error: no transform).
    A rule may also declare `fix_bound_us(ctx) -> float | None`: the most its fix can save per step (what the
    fix removes, where the replay alone would let the host run further ahead than the fix allows); it is kept
    as the Transform's `bound_us`."""
    out: dict[str, Transform] = {}
    for mod in rules:
        fn = getattr(mod, "fix_transform", None)
        if fn is None:
            continue
        try:
            rctx = ctx.for_rule(mod, options.options_for(mod))
            t = fn(rctx)
            bound = getattr(mod, "fix_bound_us", None)
            if t is not None and bound is not None:
                b = bound(rctx)
                t = replace(t, bound_us=None if b is None else max(float(b), 0.0))
        except Exception:  # noqa: BLE001 - a fix that cannot be built saves nothing; the finding stays
            t = None
        if t is not None:
            out[mod.NAME] = t
    return out


def mean_saving_us(base: np.ndarray, fixed: np.ndarray) -> float:
    """Mean per-step saving (µs) of the replayed periods `fixed` against `base` (ns), within [0, mean base]. The
    means, not the steps, are compared: a fix that lets the host run ahead shortens the first steps' periods
    and lengthens the last one (its device work still drains), so per-step differences clipped at zero would
    count the run-ahead and never the drain."""
    if base.size == 0:
        return 0.0
    b = float(base.mean())
    return min(max(b - float(fixed.mean()), 0.0), b) / 1000


def per_step_us(trace, steps: pl.DataFrame, t: Sequence[Transform] | Transform, base: list[Transform],
                b: np.ndarray | None = None) -> float:
    """Mean per-step saving (µs) of `t` over `base`, within [0, the base's mean replayed step]; `b`: the base's
    replayed periods when already known."""
    ts = [t] if isinstance(t, Transform) else list(t)
    b = replay(trace, steps, base) if b is None else b
    got = mean_saving_us(b, replay(trace, steps, [*base, *ts]))
    bounds = [x.bound_us for x in ts if x.bound_us is not None]
    return min(got, sum(bounds)) if bounds and len(bounds) == len(ts) else got


def pricing_transform(ctx) -> Transform:
    """The profiler-cost transform every saving is priced against: solved to the collector's measured unprofiled
    step where there is one (`ctx.profiler` source `manifest`), else the fitted model (analyses.overhead)."""
    prof = ctx.profiler or {}
    measured = prof.get("unprofiled_step_ns") if prof.get("source") == "manifest" else None
    return measured_transform(ctx.trace, ctx.steps, measured)


def rule_savings(ctx, tf: dict[str, Transform]) -> dict[str, dict[str, float]]:
    """rule -> {unprofiled_us, traced_us}: each fix's per-step saving with the profiler's cost removed, and on
    the trace as recorded (each base replayed once)."""
    if not tf:
        return {}
    base = [pricing_transform(ctx)]
    b_un, b_tr = replay(ctx.trace, ctx.steps, base), replay(ctx.trace, ctx.steps, [])
    return {r: {"unprofiled_us": per_step_us(ctx.trace, ctx.steps, t, base, b_un),
                "traced_us": per_step_us(ctx.trace, ctx.steps, t, [], b_tr)} for r, t in tf.items()}
