"""Evidence as typed structs (traceview/evidence.py): every rule declares its findings' evidence as a described
msgspec struct, the contract rejects a rule without one, and what the rules write on real bundled traces is what
the structs declare — msgspec's own validation (`msgspec.convert`) accepts each finding's evidence as the rule's
struct, and the struct gives back the same keys, in the same order, with the same values."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "rules"))
import rulekit  # noqa: E402
from traceview.rules import RULES  # noqa: E402

from traceview import docs  # noqa: E402
from traceview.evidence import UNSET, ReportAdded, Span, StepSpan, field_docs, field_problems, to_builtins  # noqa: E402
from traceview.ruleapi import contract_problems  # noqa: E402

# small bundled traces and the rules that fire on them (the GPU path of the rules)
FIRING = {
    # (its Triton poi → red → per run is no chain now: a split reduction is two reductions, two kernels compiled too)
    "gpu_h200_compile/compile_graph_break.json.gz": {"TV101", "TV102", "TV103"},
    "gpu_h200/elementwise_chain_eager.json.gz": {"TV201"},
    "gpu_h200_memory/memory_pressure_empty_cache.json.gz": {"TV202", "TV302", "TV303"},
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz": {"TV301"},
    "gpu_h200/cudagraph_reduce_overhead.json.gz": {"TV207"},
    "gpu_h200/seed_relu_linear_m4096.json.gz": {"TV204"},
    "hta/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz": {"TV501"},
}


@pytest.mark.parametrize("rel", sorted(FIRING))
def test_the_evidence_written_is_the_declared_struct(rel: str) -> None:
    _, found, _ = rulekit.run(rel)
    assert FIRING[rel] <= {f["code"] for f in found}
    for f in found:
        ev = f["evidence"]
        obj = msgspec.convert(
            ev, RULES[f["code"]].Evidence
        )  # raises on a key of the wrong type or a missing one
        assert list(to_builtins(obj)) == list(ev)  # the same keys, in the same order
        assert json.dumps(to_builtins(obj)) == json.dumps(ev)  # the same values, formatted alike


def test_a_struct_becomes_the_dict_the_document_holds() -> None:
    class Ev(msgspec.Struct, kw_only=True):
        worst: StepSpan
        spans: list[Span]
        by_step: dict[str, float]
        note: str | msgspec.UnsetType = UNSET

    ev = Ev(
        worst=StepSpan(start_us=1.5, end_us=2.0, step=3),
        spans=[Span(start_us=0.0, end_us=1.0)],
        by_step={"3": 0.5},
    )
    assert to_builtins(ev) == {
        "worst": {"start_us": 1.5, "end_us": 2.0, "step": 3},
        "spans": [{"start_us": 0.0, "end_us": 1.0}],
        "by_step": {"3": 0.5},
    }
    ev.note = "set"
    assert list(to_builtins(ev)) == [
        "worst",
        "spans",
        "by_step",
        "note",
    ]  # declaration order, the set key last


def test_the_contract_requires_a_described_evidence_struct() -> None:
    good = RULES["TV101"]
    bad = types.ModuleType("traceview.rules.launch_bound")
    for a in ("CODE", "NAME", "CLASS", "SEVERITY", "TITLE", "OPTIONS", "check"):
        setattr(bad, a, getattr(good, a))
    assert contract_problems(bad) == ["TV101: no Evidence"]
    bad.Evidence = dict
    assert contract_problems(bad) == ["TV101: Evidence is not a msgspec.Struct"]

    class Undescribed(msgspec.Struct):
        late_gaps: int

    bad.Evidence = Undescribed
    assert contract_problems(bad) == [
        "TV101: Evidence: Undescribed is not kw_only (fields are passed by name)",
        "TV101: Evidence: field Undescribed.late_gaps has no description",
    ]
    # a nested struct's fields are checked too
    assert field_problems(ReportAdded, "x") == []
    assert all(f.description for f in field_docs(good.Evidence))


def test_a_finding_takes_only_its_rules_struct() -> None:
    t = rulekit.trace("gpu_h200/seed_relu_linear_m4096.json.gz")
    ctx, _ = rulekit.RuleContext.prepare(t, t.steps)
    ctx = ctx.for_rule(RULES["TV101"], {"moderate_pct": 3.0, "high_pct": 15.0})
    with pytest.raises(TypeError, match="TV101: evidence must be the rule's Evidence struct, not dict"):
        ctx.finding(cost_ns=1000, count=1, steps=[1], evidence={"cpu_launch_us": 1.0})
    other = RULES["TV102"].Evidence(cause="x", sync_calls={}, syncs_per_step=None)
    with pytest.raises(TypeError):
        ctx.finding(cost_ns=1000, count=1, steps=[1], evidence=other)


def test_the_docs_list_every_declared_key() -> None:
    rules_md = docs.render()
    schema = docs.evidence_table()
    for code, m in RULES.items():
        section = rules_md.split(f"## {code} {m.NAME}\n", 1)[1].split("\n## TV", 1)[0]
        keys = [f.key for f in field_docs(m.Evidence)]
        assert keys and all(f"- `{k}` (" in section for k in keys), code
        # under the Evidence heading, before Options; and in the schema's EVIDENCE row
        assert section.index(f"- `{keys[0]}` (") > section.index("### Evidence")
        assert section.index(f"- `{keys[-1]}` (") < section.index("### Options")
        row = next(r for r in schema.splitlines() if r.startswith(f"| {code} "))
        assert all(f"`{k}`" in row for k in keys), code
    job = [f.key for f in field_docs(RULES["TV501"].JobEvidence)]
    assert "`last_rank`? int" in schema and {"straggler", "note", "comm_bound"} <= set(job)
