"""Runs the selected rules on one trace (or one job) and ranks their findings.

One failing rule becomes a warning; the other rules still run.
"""

from __future__ import annotations

import functools

from traceview.rules import RULES

from ..finding_model import ranked
from ..options import Options
from ..parallel import run_all
from ..ruleapi import JobContext, RuleContext
from .section import Section

FINDINGS = Section(
    keys=('findings',), computes="the selected rules' findings, ranked by savings",
    json_type='[FINDING]', text='findings', app_page='findings',
    json_doc='sorted by `savings_us`, see below and docs/rules.md',
)


#: a private key of run_rules' findings, popped before a document is written (fixrunner, report)
RULE_SEVERITY = "_rule_severity"


def run_rules(ctx: RuleContext, options: Options) -> tuple[list[dict], list[str]]:
    """(findings ranked by savings, warnings) of the selected rules on one trace."""
    if ctx.steps.height == 0:
        return [], []
    def check(code: str) -> tuple[list[dict], str | None]:
        mod = RULES[code]
        try:
            found = mod.check(ctx.for_rule(mod, options.options_for(mod)))
        except Exception as e:  # noqa: BLE001 - one broken rule must not end the run
            ctx.forget_rule(mod.NAME)
            return [], f"internal error in rule {code} {mod.NAME}: {type(e).__name__}: {e}"
        if not found:  # no finding, so no fix to build: what the rule shared with its fix would only hold memory
            ctx.forget_rule(mod.NAME)
            return [], None
        # RULE_SEVERITY marks a severity the rule judged itself, so the replay (fixrunner) only lowers it
        return [{**f.to_dict(), RULE_SEVERITY: True} if f.explicit_severity else f.to_dict() for f in found], None

    # no GPU activity: the host-side rules only
    codes = [c for c in options.selected() if ctx.cpu is None or getattr(RULES[c], "CPU", False)]
    # the checks are independent (each reads the shared context; per-trace analyses they share are computed
    # once): concurrent, their findings and warnings in the rules' order
    done = run_all([functools.partial(check, c) for c in codes])
    out = [f for found, _ in done for f in found]
    warns = [w for _, w in done if w is not None]
    return ranked(out), warns


def run_job_rules(ctx: JobContext, options: Options) -> tuple[list[dict], list[str]]:
    """(findings, warnings) of the selected rules that judge a whole job (`check_job`). A job rule prices its
    finding over the job's analysed steps, as a trace's rules do before the replay; the document's `savings_us` is
    per step everywhere (what every formatter prints as ms/step), so it is divided here by the job's steps."""
    out: list[dict] = []
    warns: list[str] = []
    steps = max(int(ctx.comm.get("steps") or 1), 1)
    for code in options.selected():
        mod = RULES[code]
        check_job = getattr(mod, "check_job", None)
        if check_job is None:
            continue
        try:
            found = check_job(ctx.for_rule(mod, options.options_for(mod)))
        except Exception as e:  # noqa: BLE001 - as above
            warns.append(f"internal error in job rule {code} {mod.NAME}: {type(e).__name__}: {e}")
            continue
        out.extend({**(d := f.to_dict()), "savings_us": round(d["savings_us"] / steps, 3)} for f in found)
    return ranked(out), warns
