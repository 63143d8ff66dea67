"""Every bundled trace goes through the full analyze path (all sections) without an error entry."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, bundled

from traceview import report

FILES = [p.relative_to(SAMPLES).as_posix() for p in bundled()]


def test_found_the_samples():
    assert len(FILES) >= 40


@pytest.mark.parametrize("rel", FILES)
def test_full_report(rel):
    rep = report.analyze([SAMPLES / rel])
    assert not rep.errors, rep.errors
    doc = rep.to_dict()
    json.dumps(doc)  # serialisable
    t = doc["traces"][0]
    assert not [w for w in t["warnings"] if "internal error" in w]
    assert t["summary"]["steps"] >= 1
