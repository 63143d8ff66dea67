"""Report sections are declared (`traceview.sections.section.Section`) and listed once, in document order, in
`report.SECTIONS`: every bundled document's trace entries hold exactly the declared keys in that order, each
declaration names a real text-report part and app page, and docs/json-schema.md's TRACE table is generated
from the declarations (a test fails when it is stale). Job entries likewise (`report.JOB_SECTIONS`, the JOB
table)."""

from __future__ import annotations

import ast
import json
from dataclasses import replace

import pytest
from conftest import ROOT, SAMPLES
from jobkit import unranked_job

from traceview import docs
from traceview.formatters.sections import TEXT_SECTIONS
from traceview.options import Options
from traceview.report import JOB_SECTIONS, SECTIONS, analyze
from traceview.sections.section import Section

DECLARED = [k for s in SECTIONS for k in s.keys]


@pytest.mark.parametrize("rel", ["gpu_h200/sync_item_nonzero_cpu.json.gz", "cpu_trace_example_torch2.13.json.gz",
                                 "nccl_h200x2/ddp_rank1_slowed", "gpu_h200_memory/memory_pressure_empty_cache.json.gz"])
def test_every_trace_entry_holds_the_declared_sections_in_order(rel: str) -> None:
    doc = json.loads(json.dumps(analyze([SAMPLES / rel], Options()).to_dict()))
    assert doc["traces"] and not doc["errors"]
    for t in doc["traces"]:
        assert list(t) == DECLARED


def test_declarations_name_real_renderers_and_pages() -> None:
    pages = {f.stem for f in (ROOT / "traceview/app/pages").glob("*.py")
             if any(isinstance(n, ast.FunctionDef) and n.name == "page" for n in ast.parse(f.read_text()).body)}
    assert {"overview", "findings", "layers", "kernels", "memory"} <= pages
    for s in SECTIONS:
        assert isinstance(s, Section) and s.computes and s.json_type and s.json_doc, s.keys
        assert s.text is None or s.text == "header" or s.text in TEXT_SECTIONS, s.keys
        assert s.app_page is None or s.app_page in pages, s.keys
    assert len(DECLARED) == len(set(DECLARED))


def test_every_section_module_is_listed() -> None:
    """A module of traceview/sections/ that declares a Section has it in report.SECTIONS; the others say why
    they are not trace-entry sections."""
    listed = {*SECTIONS, *JOB_SECTIONS}
    import importlib

    declaring = set()
    for f in sorted((ROOT / "traceview/sections").glob("*.py")):
        mod = importlib.import_module(f"traceview.sections.{f.stem}")
        found = [v for v in vars(mod).values() if isinstance(v, Section)]
        assert set(found) <= listed, f.stem
        if found:
            declaring.add(f.stem)
    # the job entry (job, straggler, straggler_fix, rank_changes, job_answer: job_entry declares their parts), the app's timeline view, the declaration type itself, the package, and
    # fixrunner (it gives the findings section and the projection their replayed savings)
    assert {f.stem for f in (ROOT / "traceview/sections").glob("*.py")} - declaring == {
        "__init__", "section", "job", "straggler", "straggler_fix", "rank_changes", "job_answer", "timeline", "fixrunner"}


def test_the_schema_document_is_generated_from_the_declarations() -> None:
    text = docs.SCHEMA.read_text(encoding="utf-8")
    assert docs.render_schema(text) == text, "run python -m traceview.docs"
    table = text.split(docs.BEGIN, 1)[1].split(docs.END, 1)[0]
    assert [line.split(" | ")[0].strip("| ") for line in table.strip().splitlines()[2:]] == [
        ", ".join(f"`{k}`" for k in s.keys) for s in SECTIONS]


def test_a_changed_declaration_makes_the_document_stale(monkeypatch) -> None:
    import traceview.report as report

    text = docs.SCHEMA.read_text(encoding="utf-8")
    changed = (replace(SECTIONS[0], json_doc="something else"), *SECTIONS[1:])
    monkeypatch.setattr(report, "SECTIONS", changed)
    assert docs.render_schema(text) != text
    assert "| something else |" in docs.render_schema(text)


JOB_DECLARED = [k for s in JOB_SECTIONS for k in s.keys]


@pytest.mark.parametrize("rel", ["nccl_h200x2/ddp_rank1_slowed", "gloo_straggler/slowed", "no-rank names"])
def test_every_job_entry_holds_the_declared_parts_in_order(rel: str, tmp_path) -> None:
    path = SAMPLES / rel
    if rel == "no-rank names":  # two ranks' traces whose names and metadata carry no rank: the job warns
        path = unranked_job(tmp_path / "job")
    doc = json.loads(json.dumps(analyze([path], Options()).to_dict()))
    (job,) = doc["jobs"]
    assert list(job) == [k for k in JOB_DECLARED if k != "warnings" or "warnings" in job]
    assert ("warnings" in job) == (rel == "no-rank names")


def test_the_job_table_is_generated_and_goes_stale(monkeypatch) -> None:
    import traceview.report as report

    text = docs.SCHEMA.read_text(encoding="utf-8")
    table = text.split(docs.JOB_BEGIN, 1)[1].split(docs.JOB_END, 1)[0]
    assert [line.split(" | ")[0].strip("| ") for line in table.strip().splitlines()[2:]] == [
        ", ".join(f"`{k}`" for k in s.keys) for s in JOB_SECTIONS]
    assert all(s.app_page in (None, "job") and s.text in ("header", "findings") for s in JOB_SECTIONS)
    monkeypatch.setattr(report, "JOB_SECTIONS", (*JOB_SECTIONS, replace(JOB_SECTIONS[0], keys=("new_key",))))
    assert docs.render_schema(text) != text and "| `new_key` |" in docs.render_schema(text)
