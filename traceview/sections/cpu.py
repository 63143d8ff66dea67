"""The report on traces without GPU activity: the host analyses shared by the CPU rules, the `cpu` section and
the CPU verdict.

The computation lives in `analyses/cpu.py`; this module turns its frames into JSON-ready data (µs, %). The
rules that apply on the host (modules in `rules/` with `CPU = True`) read `prepare`'s result through
`RuleContext.cpu`. JSON keys: docs/json-schema.md.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analyses import cpu
from ..model import Trace
from ..units import pct, us
from .section import Section

SECTION = Section(
    keys=('cpu',), computes='host (CPU) time of a trace without GPU activity',
    json_type='object\\|null', text='ops', app_page='overview',
    json_doc='host (CPU) time of a trace **without GPU activity** (null otherwise): `steps`, `window_us`, `avg_step_us`, `dominant` (largest of the split), `split_us` / `split_pct` {`input` (inside a DataLoader span), `cpu_ops` (some thread runs a top-level op), `communication` (only a host collective such as `gloo:` is in flight), `outside_ops` (nothing recorded runs: Python between ops, framework, waiting)} — every instant once, in that priority order —, `split_by_step` [{`step`, `dur_us`, `<part>_pct`}], `ops_total` (op names), `top_ops` [{`op`, `calls`, `top_calls` (called from outside any op), `total_us` (spans: as `key_averages()` CPU total), `self_us` (minus the host events directly inside), `self_pct`, `total_pct` (% of `window_us`)}] (10, by self time), `layers` [{`layer`, `name`, `depth`, `fwd_us`, `bwd_us`, `other_us`, `cpu_us`, `pct`, `ops`}] (top-level ops per layer, inclusive, tree order, `(unattributed)` last)',
)

TOP = 10
VERDICT = {
    "cpu_ops": "CPU-bound in ops: the host is busy running ops (no GPU in this trace); make the heaviest ops (by self "
               "time) cheaper or do less work",
    "outside_ops": "CPU-bound outside ops: most of the step runs no recorded op (Python between ops, framework code, "
                   "or waiting); look at the Python around the model",
    "input": "input-bound: the step waits for the DataLoader in the training process",
    "communication": "communication-bound: the step waits in host collectives (gloo) for the other ranks",
}


def prepare(trace: Trace, steps: pl.DataFrame) -> dict[str, Any]:
    """The host analyses of one trace's steps: the step split per step and in total, its dominant part."""
    split = cpu.step_split(trace, steps)
    tot = {c: int(split[c].sum()) for c in ("dur", *cpu.SPLIT)} if split.height else {}
    window = tot.get("dur", 0)
    dominant = max(cpu.SPLIT, key=lambda c: tot[c]) if window else None
    return {"split": split, "totals": tot, "window_ns": window, "dominant": dominant}


def section(trace: Trace, steps: pl.DataFrame, prep: dict[str, Any]) -> dict[str, Any]:
    """`cpu`: host time of a trace without GPU activity."""
    window = prep["window_ns"]
    ops = cpu.op_times(trace, steps)
    top = [{"op": r["op"], "calls": r["calls"], "top_calls": r["top_calls"], "total_us": us(r["total_ns"]),
            "self_us": us(r["self_ns"]), "self_pct": pct(r["self_ns"], window), "total_pct": pct(r["total_ns"], window)}
           for r in ops.head(TOP).iter_rows(named=True)]  # TOP rows
    tot = prep["totals"]
    n = max(steps.height, 1)
    layers = [{"layer": r["layer"], "name": r["name"], "depth": r["depth"], "fwd_us": us(r["fwd_ns"]),
               "bwd_us": us(r["bwd_ns"]), "other_us": us(r["other_ns"]), "cpu_us": us(r["cpu_ns"]),
               "pct": pct(r["cpu_ns"], window), "ops": r["ops"]}
              for r in cpu.layer_times(trace, steps).iter_rows(named=True)]  # one per layer
    return {
        "steps": steps["step"].to_list(), "window_us": us(window), "avg_step_us": us(window / n) if window else None,
        "dominant": prep["dominant"],
        "split_us": {c: us(tot.get(c, 0)) for c in cpu.SPLIT},
        "split_pct": {c: pct(tot.get(c, 0), window) for c in cpu.SPLIT},
        "split_by_step": [{"step": r["step"], "dur_us": us(r["dur"]), **{f"{c}_pct": pct(r[c], r["dur"]) for c in cpu.SPLIT}}
                          for r in prep["split"].iter_rows(named=True)],  # one per step
        "ops_total": ops.height, "top_ops": top, "layers": layers,
    }


#: the share of the step (%) from which the compiles inside the steps are the verdict: time that only a failing
#: guard costs, more than any one op takes in a model worth compiling
RECOMPILE_FIRST_PCT = 25.0


def verdict(trace: Trace, steps: pl.DataFrame, prep: dict[str, Any], findings: list[dict]) -> str | None:
    """The verdict line of a trace without GPU activity, like the classifier's for GPU traces; it names per-op
    overhead when most of the op time is in ops the `cpu-op-overhead` finding counts."""
    if not prep["dominant"]:
        return None
    tot, window = prep["totals"], prep["window_ns"]
    parts = ", ".join(f"{c} {100 * tot[c] / window:.1f} %" for c in sorted(cpu.SPLIT, key=lambda c: -tot[c]) if tot[c])
    text = VERDICT[prep["dominant"]]
    from traceview.rules import cpu_op_overhead, recompile

    tiny = next((f for f in findings if f["rule"] == cpu_op_overhead.NAME), None)
    comp = next((f for f in findings if f["rule"] == recompile.NAME), None)
    if comp and comp["savings_pct"] >= RECOMPILE_FIRST_PCT:  # compiling, not any op of the model, to fix first
        text = (f"torch.compile recompiles inside the steps: {comp['count']} compiles take {comp['savings_pct']:.1f} % "
                "of the step; fix the failing guard (TV104) before any op")
    elif prep["dominant"] == "cpu_ops" and tiny and tiny["cost_us"] * 1000 >= 0.5 * tot["cpu_ops"]:
        # most of the op time is in ops dominated by their fixed cost: that, not any one op, is what to fix
        text = (f"CPU-bound by per-op overhead: {tiny['evidence']['tiny_ops_per_step']:g} ops per step run under "
                f"{tiny['evidence']['tiny_op_us']:g} µs each ({tiny['savings_pct']:.1f} % of the step), each paying "
                "the fixed cost of an eager op; do the work in fewer, larger ops")
    elif prep["dominant"] == "cpu_ops":
        heavy = cpu.op_times(trace, steps).head(3)
        names = ", ".join(f"{r['op']} {100 * r['self_ns'] / window:.1f} %" for r in heavy.iter_rows(named=True))
        text += f" ({names} of the step by self time)"
    return f"Verdict: {text} ({parts} of {window / 1e6:,.2f} ms over {steps.height} step(s))"
