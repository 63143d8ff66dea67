"""The verdict of a trace: the `classification` section (classifier shares per trace and step, and the
`primary` class — what to fix first) and the one-line `verdict_text`, both from the partition in the trace's
`RuleContext` (computed once) and the findings.

`dominant` is the largest class. `primary` is the class of the fix with the largest replayed saving (each
rule's fix replayed, analyses/fixes.py: a rule's findings together carry its saving; a class is worth its best
rule's fix, never a sum): a step where an in-process DataLoader costs 28 % while compute holds 53 % is `input`.
With no fix saving more than FEW_PCT % of the step it is the dominant class, and the verdict says there is
nothing the rules know to fix: a GEMM-bound step with nothing to fix is `gpu_compute` — once the profiler's own cost is taken
out of `cpu_launch` (`primary_basis` `share_unprofiled` when that changes the answer). Per step, a finding's savings are
spread over the steps in proportion to its class's time in each step.
"""

from __future__ import annotations

import polars as pl

from ..analyses import classify
from ..analyses.fixes import FEW_PCT
from ..ruleapi import RuleContext
from ..rules import BY_NAME
from .section import Section

CLASSIFICATION = Section(
    keys=('classification',), computes="what to fix first: the classifier's shares and each class's savings, per trace and step",
    json_type='object', text='header', app_page='overview',
    json_doc="`primary` (what to fix first: the class of the fix with the largest replayed saving — a class is worth its best rule's fix, never a sum —; when no fix saves more than 3 % of the step, the largest class once the profiler's cost is taken out of `cpu_launch`, and the verdict says nothing the rules know to fix saves more), `primary_basis` (`savings`, `share`, `share_unprofiled`), `savings_pct` (per class, % of the unprofiled step: the savings' own terms), `dominant` (the largest share), `shares` (% per class), `time_us`, `window_us`, per-step `steps` [{`step`, `primary`, `primary_basis`, `dominant`, `shares`, `time_us`}] (a finding's savings spread over its steps by its class's time in each), `roofline`, `analyzed_steps` — classes: `gpu_compute`, `gpu_memory`, `communication`, `input`, `host_sync`, `cpu_launch`, `other_idle`",
)
VERDICT_LINE = Section(
    keys=('verdict_text',), computes='the verdict: one line that leads with what to fix first',
    json_type='str\\|null', text='header', app_page='overview',
    json_doc="one plain-text line that leads with `classification.primary`, says what fixing it saves, names the runner-up when its savings reach half the primary's (and always the top finding's class), and the largest class when it differs (a trace without GPU activity: the host verdict from `cpu.dominant`)",
)

VERDICT_TEXT = {
    "gpu_compute": "compute-bound: the GPU is busy in compute-bound kernels (GEMM/conv/attention); speed-ups come "
                   "from better kernels, lower precision or less work, not from the host",
    "gpu_memory": "memory-bound: the GPU is busy in kernels limited by memory bandwidth; fuse elementwise ops and "
                  "avoid round trips through HBM",
    "communication": "communication-bound: exposed NCCL collectives with no compute to hide them",
    "input": "input-bound: the GPU idles while the host loads data",
    "host_sync": "sync-bound: the GPU idles after the host blocks on it (.item(), .cpu(), nonzero, synchronize)",
    "cpu_launch": "CPU/launch-bound: the GPU idles because the CPU launches kernels too slowly",
    "other_idle": "idle for other reasons (launch latency, cross-stream waits)",
}
#: the runner-up is named when its savings reach this fraction of the primary's (the two are "close")
RUNNER_UP_RATIO = 0.5

NO_GPU = {"dominant": None, "primary": None, "shares": {}, "steps": [],
          "note": "no GPU activity: nothing to classify"}


def _actionable(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f.get("severity") != "info" and f.get("class") in classify.CLASSES]


def savings_by_class(findings: list[dict]) -> dict[str, float]:
    """µs per step the best fix of each class saves, from the findings above info (a rule's findings together
    carry its replayed saving; the best rule of a class, never a sum of rules; largest first, ties in class
    order)."""
    per_rule: dict[tuple[str, str], float] = {}
    for f in _actionable(findings):
        k = (f["class"], f["rule"])
        per_rule[k] = per_rule.get(k, 0.0) + float(f["savings_us"])
    out: dict[str, float] = {}
    for (c, _r), v in per_rule.items():
        out[c] = max(out.get(c, 0.0), v)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], classify.CLASSES.index(kv[0]))))


def _primary(savings: dict[str, float], dominant: str | None, time_us: dict[str, float] | None = None,
             overhead_us: float = 0.0, few_us: float = 0.0) -> tuple[str | None, str]:
    """(primary, basis). With no fix saving more than `few_us`, the largest class once the profiler's own cost
    is taken out of `cpu_launch` (the host time every recorded event adds is GPU idle the unprofiled run does
    not have)."""
    best = next(iter(savings.items()), None)
    if best and best[1] > few_us:
        return best[0], "savings"
    if not time_us or not overhead_us or dominant != "cpu_launch":
        return dominant, "share"
    t = dict(time_us)
    t["cpu_launch"] = max(0.0, t.get("cpu_launch", 0.0) - overhead_us)
    top = max(classify.CLASSES, key=lambda c: (t.get(c, 0.0), -classify.CLASSES.index(c)))
    return top, ("share" if top == dominant else "share_unprofiled")


def _step_savings(findings: list[dict], by_step: pl.DataFrame, n: int = 1) -> dict[int, dict[str, float]]:
    """Per step, µs a fix would save per class: each finding's savings over the `n` analysed steps (its per-step
    `savings_us` x n) spread over its steps in proportion to its class's time in each step (evenly when the
    class holds no time). `by_step`: `classify.shares(part)`."""
    per = by_step.rows()  # (step, class, ns): steps x classes, small
    out: dict[int, dict[str, float]] = {}
    for f in _actionable(findings):  # a handful
        steps = [int(s) for s in f.get("steps") or []]
        named = set(steps)
        d = [(s, v) for s, c, v in per if c == f["class"] and s in named]
        tot = float(sum(v for _, v in d)) if d else 0.0  # ints: the exact sum
        w = dict((s, v / tot) for s, v in d) if tot else {s: 1.0 / len(steps) for s in steps}
        for s, share in w.items():
            row = out.setdefault(int(s), {})
            row[f["class"]] = row.get(f["class"], 0.0) + float(f["savings_us"]) * n * share
    return out


def classification_section(ctx: RuleContext | None, findings: list[dict] | None = None,
                           unprofiled_step_us: float | None = None) -> dict:
    """{dominant, primary, primary_basis, savings_pct, shares, time_us, window_us, steps, device, roofline,
    analyzed_steps}; `ctx` None: no GPU. `unprofiled_step_us`: the replayed unprofiled step the savings are in
    (the fix runner's); without it, the traced step less the profiler's estimated cost."""
    if ctx is None:
        return dict(NO_GPU)
    findings = findings or []
    by_step = classify.shares(ctx.part)  # the time per step and class: once for the classification and the savings
    out = classify.classification(ctx.trace, ctx.steps, ctx.part, ctx.kb, by_step)
    sav = savings_by_class(findings)
    window = out.get("window_us") or 0.0
    over_us = float(ctx.profiler.get("overhead_ns") or 0.0) / 1000  # per step
    n = max(1, ctx.steps.height)
    step_us = window / n
    # savings are per step in unprofiled terms: shares of the unprofiled step, as the findings' and the projection's
    unprof_us = unprofiled_step_us if unprofiled_step_us and unprofiled_step_us > 0 else max(step_us - over_us, 0.0)
    unprof_us = unprof_us or step_us
    ratio = unprof_us / step_us if step_us else 1.0
    out["primary"], out["primary_basis"] = _primary(sav, out["dominant"], out["time_us"], over_us * n,
                                                    FEW_PCT / 100 * unprof_us)
    out["savings_pct"] = {c: round(100.0 * v / unprof_us, 2) if unprof_us else 0.0 for c, v in sav.items()}
    per_step = _step_savings(findings, by_step, n)
    for row in out["steps"]:
        ss = dict(sorted(per_step.get(row["step"], {}).items(), key=lambda kv: (-kv[1], classify.CLASSES.index(kv[0]))))
        row["primary"], row["primary_basis"] = _primary(ss, row["dominant"], row["time_us"], over_us,
                                                        FEW_PCT / 100 * ratio * float(row.get("window_us") or step_us))
    out["analyzed_steps"] = ctx.steps["step"].to_list()
    return out


def verdict_text(c: dict, n_steps: int, findings: list[dict] | None = None) -> str | None:
    """One line that leads with the primary class; names the runner-up when close, and the largest class when it
    differs. It never contradicts the top finding: that finding's class is the primary or is named."""
    primary = c.get("primary") or c.get("dominant")
    if not primary:
        return None
    top = sorted(((v, k) for k, v in c["shares"].items() if v > 0), key=lambda x: (-x[0], x[1]))[:3]
    parts = ", ".join(f"{k} {v:.1f} %" for v, k in top)
    text = f"Verdict: {VERDICT_TEXT[primary]}"
    sav = c.get("savings_pct") or {}
    lead = next((f for f in _actionable(findings or []) if f["class"] == primary), None)
    if c.get("primary_basis") == "savings" and lead and getattr(BY_NAME.get(lead["rule"]), "VERDICT", None):
        # a rule whose mechanism the class's words would misname says what its class's time is (TV106: the host
        # builds per-shape plans, it does not launch slowly)
        text = f"Verdict: {BY_NAME[lead['rule']].VERDICT}"
    if c.get("primary_basis") == "savings":
        text += f"; fixing it saves ~{sav.get(primary, 0):.0f} % of the step time"
        rest = [(k, v) for k, v in sav.items() if k != primary]
        top_f = next(iter(_actionable(findings or [])), None)
        named = [k for k, v in rest if v >= RUNNER_UP_RATIO * sav.get(primary, 0)]
        if top_f and top_f["class"] != primary and top_f["class"] not in named:
            named.insert(0, top_f["class"])
        if named:
            text += "; runner-up: " + ", ".join(f"{k} (~{sav.get(k, 0):.0f} %)" for k in named[:2])
        if c.get("dominant") and c["dominant"] != primary:
            text += f"; largest share: {c['dominant']}"
    elif findings is not None:
        text += (f"; the step is limited by {primary} and nothing the rules know to fix saves more than "
                 f"{FEW_PCT:g} % of it")
    return f"{text} ({parts} of {c['window_us'] / 1000:,.2f} ms over {n_steps} step(s))"
