"""The README stays a first page (issue 31: at most 150 lines) and its rule count is the registry's."""

from __future__ import annotations

import re

from conftest import ROOT
from traceview.rules import RULES


def test_readme_is_short_and_counts_the_rules() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    (n,) = {int(m) for m in re.findall(r"(\d+) rules \(TV", text)}
    assert n == len(RULES)
    codes = sorted(RULES)
    assert f"TV101–{codes[-1]}" in text
