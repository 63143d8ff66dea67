"""Predicted vs measured fix savings on the bundled eager/fixed twins (issue 25): the replayed saving of the
relevant rule's fix on the problem trace against the collector's measured unprofiled saving of its twin.

    python tools/predictions.py           # print the table
    python tools/predictions.py --write   # rewrite the table in docs/predictions.md
    python tools/predictions.py --check   # exit 1 when docs/predictions.md is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "predictions.md"
BAND = 0.20  # the bar: within ±20 % of the measured saving
#: collected2 problems whose fix is another rule's than the first expected one (the labels name what must fire)
FIX_RULE = {"train_syncs_item": "host-sync"}  # deferred .item(): a host-sync fix; launch-bound is what fires
BEGIN, END = "<!-- predictions:begin -->", "<!-- predictions:end -->"


def twins() -> list[dict]:
    """[{set, problem, fixed, rule, measured_ms}] of every twin with a measured saving."""
    out = []
    c2 = json.loads((ROOT / "sample_traces/collected2/labels.json").read_text())
    for name, v in sorted(c2.items()):
        if v.get("twin_role") != "problem" or v.get("measured_fix_saving_ms") is None:
            continue
        rule = FIX_RULE.get(name) or next((r for r in v.get("expected_rules") or [] if r != "none"), None)
        out.append({"set": "collected2", "problem": name, "fixed": v["twin"], "rule": rule,
                    "measured_ms": v["measured_fix_saving_ms"]})
        for other, m in sorted((v.get("also_fixed_by") or {}).items()):
            out.append({"set": "collected2", "problem": name, "fixed": other, "rule": rule,
                        "measured_ms": m["measured_fix_saving_ms"]})
    for name in ("collected3", "collected4", "collected5"):  # the sets of tools/labels.py
        path = ROOT / f"sample_traces/{name}/labels.json"
        if not path.is_file():
            continue
        labels = json.loads(path.read_text())
        for t in labels["twins"]:
            out.append({"set": name, "problem": t["problem"], "fixed": t["fixed"], "rule": t["rule"],
                        "variant": t.get("fix_variant"), "measured_ms": t["measured_fix_saving_ms"]})
    return out


def predicted_ms(path: Path, rule: str, variant: str | None = None) -> float | None:
    """The replayed per-step saving (ms, unprofiled terms) of `rule`'s fix on the trace (None: no model); with
    `variant`, of that other fix the rule prices (its `fix_variants(ctx)`: the fixed twin applies it, not the
    rule's first advice — labels.json's `fix_variant`)."""
    from traceview.rules import BY_NAME

    import traceview
    from traceview.analyses import fixes
    from traceview.options import Options
    from traceview.report import select_steps
    from traceview.ruleapi import RuleContext

    trace = traceview.load(str(next(path.glob("*.pt.trace.json*"))))
    ctx, _ = RuleContext.prepare(trace, select_steps(trace, None))
    if variant is not None:
        mod = BY_NAME[rule]
        t = mod.fix_variants(ctx.for_rule(mod, Options().options_for(mod))).get(variant)
        return 0.0 if t is None else fixes.rule_savings(ctx, {rule: t})[rule]["unprofiled_us"] / 1000
    tf = fixes.transforms(ctx, Options(), [BY_NAME[rule]])
    if rule not in tf:
        return 0.0 if hasattr(BY_NAME[rule], "fix_transform") else None
    return fixes.rule_savings(ctx, tf)[rule]["unprofiled_us"] / 1000


def rows() -> list[dict]:
    out = []
    for t in twins():
        p = (predicted_ms(ROOT / "sample_traces" / t["set"] / t["problem"], t["rule"], t.get("variant"))
             if t["rule"] else None)
        m = t["measured_ms"]
        hit = None if p is None or m <= 0 else abs(p / m - 1) <= BAND
        out.append({**t, "predicted_ms": None if p is None else round(p, 3), "hit": hit})
    return out


def table(rs: list[dict]) -> str:
    lines = ["| set | problem → fixed | rule | measured ms | predicted ms | error | within ±20 % |",
             "|---|---|---|---:|---:|---:|---|"]
    for r in rs:
        p, m = r["predicted_ms"], r["measured_ms"]
        err = f"{100 * (p / m - 1):+.0f} %" if p is not None and m > 0 else "–"
        hit = {True: "yes", False: "**no**", None: "–"}[r["hit"]]
        lines.append(f"| {r['set']} | {r['problem']} → {r['fixed']} | {r['rule'] or '(no rule)'} | {m:.3f} | "
                     f"{'–' if p is None else f'{p:.3f}'} | {err} | {hit} |")
        if r.get("variant"):  # the rule's other fix, which the fixed twin applies
            lines[-1] = lines[-1].replace(f"| {r['rule']} |", f"| {r['rule']} (`{r['variant']}`) |", 1)
    scored = [r for r in rs if r["hit"] is not None]
    n = sum(r["hit"] for r in scored)
    lines.append("")
    lines.append(f"Within ±20 %: **{n} of {len(scored)}** twins covered by a rule with a positive measured saving.")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = table(rows())
    if "--write" in argv or "--check" in argv:
        doc = DOC.read_text()
        a, b = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        new = doc[:a] + "\n" + text + doc[b:]
        if "--check" in argv:
            return 0 if new == doc else 1
        DOC.write_text(new)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
