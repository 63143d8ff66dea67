"""The `Finding` model: what a rule reports, ready to rank, render and serialise.

JSON keys (the contract, docs/json-schema.md): rule, code, severity, title, steps, count, cost_us,
savings_us, savings_pct, evidence, fix, layer, class (the classifier class whose time a fix removes: the rule's
`CLASS`, or null). `count` is the number of occurrences over all analysed
steps; `cost_us` the measured time lost; `savings_us` the estimated time a fix recovers and
`savings_pct` that as % of the analysed window (the sum of the analysed steps). `evidence` is the rule's
`Evidence` struct (traceview.evidence), a dict once serialised.
"""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Any

import msgspec

from .evidence import to_builtins
from .records import record

SEVERITIES = ("info", "warning", "error")


def severity_rank(sev: str) -> int:
    return SEVERITIES.index(sev)


def severity_for(pct: float | None, moderate: float, high: float, default: str = "warning") -> str:
    """XProf-style grading: >= high -> error, >= moderate -> the rule's default, else info."""
    if pct is None or pct < moderate:
        return "info"
    if pct >= high:
        return "error"
    return default


@record()
class Finding:
    """One rule's finding: what it costs, what fixing it saves, its severity and its evidence."""

    rule: str
    code: str
    severity: str
    title: str
    steps: list[int]
    count: int
    cost_us: float
    savings_us: float
    savings_pct: float
    evidence: msgspec.Struct | dict[str, Any] = field(default_factory=dict)
    fix: str = ""
    layer: str | None = None
    cls: str | None = None  # JSON "class"
    #: the rule chose the severity itself (a judgement, e.g. nothing left to apply): the replay only lowers it
    explicit_severity: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"bad severity {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = to_builtins(self.evidence)  # a struct: its fields in order, the unset ones left out
        d["cost_us"] = round(float(self.cost_us), 3)
        d["savings_us"] = round(float(self.savings_us), 3)
        d["savings_pct"] = round(float(self.savings_pct), 2)
        d["steps"] = [int(s) for s in self.steps]
        d["count"] = int(self.count)
        d["class"] = d.pop("cls")
        del d["explicit_severity"]
        return d


def ranked(findings: list[dict]) -> list[dict]:
    """Findings sorted by estimated savings, then severity, then code."""
    return sorted(findings, key=lambda f: (-f["savings_us"], -severity_rank(f["severity"]), f["code"]))
