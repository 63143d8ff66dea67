"""Every rule on every sample trace: no crash, no rule error, JSON-serialisable findings."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, bundled, load

from traceview.finding_model import SEVERITIES
from traceview.options import Options
from traceview.ruleapi import RuleContext
from traceview.sections.findings import run_rules
from traceview.sections.verdict import classification_section

ALL = [str(p.relative_to(SAMPLES)) for p in bundled()]


@pytest.mark.parametrize("rel", ALL)
def test_all_rules_run(rel):
    t = load(rel)
    ctx, warns = RuleContext.prepare(t, t.steps) if t.has_gpu else (None, [])
    c = classification_section(ctx)
    found, w2 = run_rules(ctx, Options()) if ctx else ([], [])
    json.dumps([c, found])
    assert not [w for w in warns + w2 if "internal error" in w]
    for f in found:
        assert f["severity"] in SEVERITIES and f["count"] >= 1 and f["cost_us"] >= 0 and f["fix"]
        assert 0 <= f["savings_us"] <= f["cost_us"] + 1e-6 or f["rule"] == "input-bound"
