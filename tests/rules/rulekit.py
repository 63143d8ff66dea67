"""Shared helpers of the rule tests: load a sample trace once, run the classifier and one rule."""

from __future__ import annotations

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

import traceview  # noqa: E402
from traceview.options import Options  # noqa: E402
from traceview.ruleapi import RuleContext  # noqa: E402
from traceview.sections.findings import run_rules  # noqa: E402
from traceview.sections.verdict import classification_section  # noqa: E402

SAMPLES = ROOT / "sample_traces"


@functools.cache
def trace(rel: str):
    return traceview.load(SAMPLES / rel)


@functools.cache
def run(rel: str, code: str | None = None) -> tuple[dict, list[dict], list[str]]:
    """(classification, findings, warnings) with only `code` selected (all rules when None)."""
    t = trace(rel)
    ctx, warns = RuleContext.prepare(t, t.steps)
    c = classification_section(ctx)
    f, w2 = run_rules(ctx, Options(codes=(code,) if code else None))
    return c, f, warns + w2


def findings(rel: str, code: str) -> list[dict]:
    return run(rel, code)[1]
