"""The rule contract (`traceview.ruleapi.Rule`): every rule module fulfils it, the checker catches a module that
does not, the shared threshold presets are what the rules use, and nothing outside rules/ names a rule by its
string — behaviour hangs on declared attributes (`FIX_REMOVES_CLASS`, `JUDGES_STRAGGLER`)."""

from __future__ import annotations

import io
import tokenize
import types
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES
from traceview.rules import RULES

from traceview.options import Options
from traceview.registry import straggler_rules
from traceview.report import analyze
from traceview.ruleapi import XPROF_SEVERITY, Rule, contract_problems, min_savings, xprof_severity


def test_every_rule_fulfils_the_contract() -> None:
    assert len(RULES) == 22
    for m in RULES.values():
        assert isinstance(m, Rule), m.__name__
        assert contract_problems(m) == [], m.__name__


def test_the_checker_catches_a_broken_rule() -> None:
    good = RULES["TV101"]
    bad = types.ModuleType("traceview.rules.launch_bound")
    for a in ("CODE", "NAME", "SEVERITY", "TITLE", "OPTIONS", "check"):
        setattr(bad, a, getattr(good, a))
    assert contract_problems(bad) == ["TV101: no CLASS", "TV101: no Evidence"] and not isinstance(bad, Rule)
    bad.Evidence = good.Evidence
    bad.CLASS, bad.SEVERITY, bad.FIX_REMOVES_CLASS = "cpu", "fatal", "yes"
    assert contract_problems(bad) == [
        "TV101: CLASS 'cpu' is not a classifier class",
        "TV101: SEVERITY 'fatal' is not one of ('info', 'warning', 'error')",
        "TV101: FIX_REMOVES_CLASS must be a bool",
    ]


def test_the_threshold_presets() -> None:
    assert {k: o.default for k, o in XPROF_SEVERITY.items()} == {"moderate_pct": 3.0, "high_pct": 15.0}
    assert xprof_severity("kernel-launch")["moderate_pct"].doc == (
        "XProf kernel-launch moderate threshold (% of step time)")
    # the rules that grade by XProf's levels use the preset's very objects or its values; none repeats the block
    shared = [m for m in RULES.values() if m.OPTIONS.get("moderate_pct") is XPROF_SEVERITY["moderate_pct"]]
    assert {m.NAME for m in shared} >= {"host-sync", "elementwise-chain", "memory-pressure", "pageable-memcpy"}
    assert RULES["TV103"].OPTIONS["min_savings_pct"] == min_savings(1.0)["min_savings_pct"]
    for f in sorted((ROOT / "rules").glob("*.py")):
        assert f.read_text().count("XProf moderate threshold (% of step time)") == 0, f.name


def _string_literals(path: Path) -> set[str]:
    out = set()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING and not tok.string.startswith(("f", "F", '"""', "'''")):
            try:
                out.add(eval(tok.string))  # noqa: S307 - a string literal of our own source
            except Exception:  # noqa: BLE001 - bytes, odd prefixes: not a rule name
                continue
    return out


def test_no_table_outside_rules_names_a_rule() -> None:
    names = {m.NAME for m in RULES.values()} | set(RULES)
    files = [p for p in (ROOT / "traceview").rglob("*.py")] + [ROOT / "app.py"]
    hits = {p.relative_to(ROOT).as_posix(): sorted(_string_literals(p) & names) for p in files}
    assert {k: v for k, v in hits.items() if v} == {}


def test_declared_attributes_drive_the_projection_and_the_straggler() -> None:
    assert straggler_rules() == {"nccl-wait"}
    doc = analyze([SAMPLES / "nccl_h200x2/ddp_rank1_slowed"], Options()).to_dict()
    by_name = {m.NAME: m for m in RULES.values()}
    models = {}
    for t in doc["traces"]:
        for fix in (t["projection"] or {}).get("fixes", []):
            # the projection replays the fix the rule declares (fix_transform); one number per saving: the
            # rule's findings together save what its fix does, never more than the step it comes from
            m = by_name[fix["rule"]]
            assert fix["model"] == ("replay" if hasattr(m, "fix_transform") else None), fix
            mine = [f["savings_us"] for f in t["findings"] if f["rule"] == fix["rule"]]
            assert sum(mine) == pytest.approx(fix["savings_us"], abs=0.01 * len(mine))
            assert 0 <= fix["savings_us"] <= t["projection"]["replayed_unprofiled_step_us"]
            models[fix["rule"]] = fix["model"]
    assert models  # the job's traces have fixes to project
    # the waiting rank's own nccl-wait finding carries the straggler note (job.py, by JUDGES_STRAGGLER)
    (job,) = doc["jobs"]
    strag = job["nccl"]["straggler"]["rank"]
    notes = [f["evidence"].get("straggler") for t in doc["traces"] if t["rank"] != strag for f in t["findings"]
             if f["rule"] in straggler_rules()]
    assert notes == [strag]
