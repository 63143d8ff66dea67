"""The report on traces without GPU activity: the `cpu` section, the CPU verdict and the CPU rules.

The computation lives in `analyses/cpu.py`; this module turns its frames into JSON-ready data (µs, %) and
runs the rules that apply on the host (modules in `rules/` with `CPU = True`). JSON keys: docs/json-schema.md.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .analyses import cpu
from .model import Trace
from .units import pct, us

TOP = 10
VERDICT = {
    "cpu_ops": "CPU-bound in ops: the host is busy running ops (no GPU in this trace); make the heaviest ops (by self "
               "time) cheaper or do less work",
    "outside_ops": "CPU-bound outside ops: most of the step runs no recorded op (Python between ops, framework code, "
                   "or waiting); look at the Python around the model",
    "input": "input-bound: the step waits for the DataLoader in the training process",
    "communication": "communication-bound: the step waits in host collectives (gloo) for the other ranks",
}


def prepare(trace: Trace, steps: pl.DataFrame, ctx: dict) -> dict:
    """The CPU analyses of one trace, computed once and cached in the (per-trace) ctx."""
    hit = ctx.get("_cpu")
    if hit is not None and hit["trace"] is trace:
        return hit
    split = cpu.step_split(trace, steps)
    tot = {c: int(split[c].sum()) for c in ("dur", *cpu.SPLIT)} if split.height else {}
    window = tot.get("dur", 0)
    dominant = max(cpu.SPLIT, key=lambda c: tot[c]) if window else None
    hit = {"trace": trace, "steps": steps, "split": split, "totals": tot, "window_ns": window, "dominant": dominant}
    ctx["_cpu"] = hit
    return hit


def section(trace: Trace, steps: pl.DataFrame, ctx: dict) -> dict[str, Any] | None:
    """`cpu`: host time of a trace without GPU activity (None when the trace has GPU activity)."""
    if trace.has_gpu:
        return None
    p = prepare(trace, steps, ctx)
    window = p["window_ns"]
    ops = cpu.op_times(trace, steps)
    top = [{"op": r["op"], "calls": r["calls"], "top_calls": r["top_calls"], "total_us": us(r["total_ns"]),
            "self_us": us(r["self_ns"]), "self_pct": pct(r["self_ns"], window), "total_pct": pct(r["total_ns"], window)}
           for r in ops.head(TOP).iter_rows(named=True)]  # TOP rows
    tot = p["totals"]
    n = max(steps.height, 1)
    layers = [{"layer": r["layer"], "name": r["name"], "depth": r["depth"], "fwd_us": us(r["fwd_ns"]),
               "bwd_us": us(r["bwd_ns"]), "other_us": us(r["other_ns"]), "cpu_us": us(r["cpu_ns"]),
               "pct": pct(r["cpu_ns"], window), "ops": r["ops"]}
              for r in cpu.layer_times(trace, steps).iter_rows(named=True)]  # one per layer
    return {
        "steps": steps["step"].to_list(), "window_us": us(window), "avg_step_us": us(window / n) if window else None,
        "dominant": p["dominant"],
        "split_us": {c: us(tot.get(c, 0)) for c in cpu.SPLIT},
        "split_pct": {c: pct(tot.get(c, 0), window) for c in cpu.SPLIT},
        "split_by_step": [{"step": r["step"], "dur_us": us(r["dur"]), **{f"{c}_pct": pct(r[c], r["dur"]) for c in cpu.SPLIT}}
                          for r in p["split"].iter_rows(named=True)],  # one per step
        "ops_total": ops.height, "top_ops": top, "layers": layers,
    }


def verdict(trace: Trace, steps: pl.DataFrame, ctx: dict) -> str | None:
    """The verdict line of a trace without GPU activity, like the classifier's for GPU traces."""
    p = prepare(trace, steps, ctx)
    if not p["dominant"]:
        return None
    tot, window = p["totals"], p["window_ns"]
    parts = ", ".join(f"{c} {100 * tot[c] / window:.1f} %" for c in sorted(cpu.SPLIT, key=lambda c: -tot[c]) if tot[c])
    text = VERDICT[p["dominant"]]
    from .engine import run_rules

    tiny = next((f for f in run_rules(trace, steps, ctx) if f["rule"] == "cpu-op-overhead"), None)
    if p["dominant"] == "cpu_ops" and tiny and tiny["cost_us"] * 1000 >= 0.5 * tot["cpu_ops"]:
        # most of the op time is in ops dominated by their fixed cost: that, not any one op, is what to fix
        text = (f"CPU-bound by per-op overhead: {tiny['evidence']['tiny_ops_per_step']:g} ops per step run under "
                f"{tiny['evidence']['tiny_op_us']:g} µs each ({tiny['savings_pct']:.1f} % of the step), each paying "
                "the fixed cost of an eager op; do the work in fewer, larger ops")
    elif p["dominant"] == "cpu_ops":
        heavy = cpu.op_times(trace, steps).head(3)
        names = ", ".join(f"{r['op']} {100 * r['self_ns'] / window:.1f} %" for r in heavy.iter_rows(named=True))
        text += f" ({names} of the step by self time)"
    return f"Verdict: {text} ({parts} of {window / 1e6:,.2f} ms over {steps.height} step(s))"


def run_rules(trace: Trace, steps: pl.DataFrame, ctx: dict, selected: list[str], options) -> list[dict]:
    """Findings of the rules that apply on the host (`CPU = True`) for a trace without GPU activity.
    `options(ctx, slug)` gives a rule's options (the engine's)."""
    from traceview.rules import RULES

    from .findings import ranked

    p = prepare(trace, steps, ctx)
    if not p["window_ns"]:
        return []
    out: list[dict] = []
    for code in selected:
        mod = RULES[code]
        if not getattr(mod, "CPU", False):
            continue
        rctx = {"steps": steps, "window_ns": p["window_ns"], "cpu": p, "options": options(ctx, mod.NAME)}
        try:
            found = mod.check(trace, steps, rctx)
        except Exception as e:  # noqa: BLE001 - one broken rule must not end the run
            ctx.setdefault("_warnings", []).append(f"internal error in rule {code} {mod.NAME}: {type(e).__name__}: {e}")
            continue
        out.extend(f.to_dict() for f in found)
    return ranked(out)
