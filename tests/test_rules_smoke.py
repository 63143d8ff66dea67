"""Every rule on every sample trace: no crash, no rule error, JSON-serialisable findings."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, load

from traceview import engine
from traceview.findings import SEVERITIES

ALL = sorted(str(p.relative_to(SAMPLES)) for p in SAMPLES.rglob("*.json.gz"))


@pytest.mark.parametrize("rel", ALL)
def test_all_rules_run(rel):
    t = load(rel)
    ctx: dict = {}
    c = engine.classification_section(t, t.steps, ctx)
    found = engine.run_rules(t, t.steps, ctx)
    json.dumps([c, found])
    assert not [w for w in ctx.get("_warnings", []) if "internal error" in w]
    for f in found:
        assert f["severity"] in SEVERITIES and f["count"] >= 1 and f["cost_us"] >= 0 and f["fix"]
        assert 0 <= f["savings_us"] <= f["cost_us"] + 1e-6 or f["rule"] == "input-bound"
