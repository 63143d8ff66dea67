"""Each rule's fix replayed: the transforms the rules declare (`fix_transform(ctx)` in their modules) and their
per-step savings with the profiler's cost removed and on the trace as recorded (issue 25). traceview/sections/fixrunner.py
gives the findings these savings."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np
import polars as pl

from .overhead import profiler_transform
from .replay import Transform, replay

#: a fix saving less than this share of the step is "nothing the rules know to fix"
FEW_PCT = 3.0


def transforms(ctx, options, rules: Sequence[ModuleType]) -> dict[str, Transform]:
    """rule name -> its fix as a Transform, for the rules that declare one (None or an error: no transform)."""
    out: dict[str, Transform] = {}
    for mod in rules:
        fn = getattr(mod, "fix_transform", None)
        if fn is None:
            continue
        try:
            t = fn(ctx.for_rule(mod, options.options_for(mod)))
        except Exception:  # noqa: BLE001 - a fix that cannot be built saves nothing; the finding stays
            t = None
        if t is not None:
            out[mod.NAME] = t
    return out


def per_step_us(trace, steps: pl.DataFrame, t: Sequence[Transform] | Transform, base: list[Transform],
                b: np.ndarray | None = None) -> float:
    """Mean per-step saving (µs) of `t` over `base`, within [0, the base's replayed step]; `b`: the base's
    replayed periods when already known."""
    ts = [t] if isinstance(t, Transform) else list(t)
    b = replay(trace, steps, base) if b is None else b
    s = b - replay(trace, steps, [*base, *ts])
    return float(np.clip(s, 0, b).mean()) / 1000 if s.size else 0.0


def rule_savings(ctx, tf: dict[str, Transform]) -> dict[str, dict[str, float]]:
    """rule -> {unprofiled_us, traced_us}: each fix's per-step saving with the profiler's cost removed, and on
    the trace as recorded (each base replayed once)."""
    if not tf:
        return {}
    base = [profiler_transform(ctx.trace)]
    b_un, b_tr = replay(ctx.trace, ctx.steps, base), replay(ctx.trace, ctx.steps, [])
    return {r: {"unprofiled_us": per_step_us(ctx.trace, ctx.steps, t, base, b_un),
                "traced_us": per_step_us(ctx.trace, ctx.steps, t, [], b_tr)} for r, t in tf.items()}
