"""Shared helpers of the rule tests: load a sample trace once, run the classifier and one rule."""

from __future__ import annotations

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

import traceview  # noqa: E402
from traceview import engine  # noqa: E402

SAMPLES = ROOT / "sample_traces"


@functools.cache
def trace(rel: str):
    return traceview.load(SAMPLES / rel)


@functools.cache
def run(rel: str, code: str | None = None) -> tuple[dict, list[dict], list[str]]:
    """(classification, findings, warnings) with only `code` selected (all rules when None)."""
    t = trace(rel)
    ctx: dict = {"codes": [code]} if code else {}
    c = engine.classification_section(t, t.steps, ctx)
    f = engine.run_rules(t, t.steps, ctx)
    return c, f, ctx.get("_warnings", [])


def findings(rel: str, code: str) -> list[dict]:
    return run(rel, code)[1]
