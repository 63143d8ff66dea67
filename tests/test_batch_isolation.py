"""Issue 13, item 1: one bad input neither aborts the batch nor is blamed on another file.

Documented contract (README): exit 2 when an input could not be read; the other inputs are reported."""

from __future__ import annotations

import pytest
from conftest import SAMPLES
from hostile import analyze_json, error_lines, ev, run_cli, write

from traceview import report

GOOD = SAMPLES / "gpu_h200/sync_item_nonzero_cpu.json.gz"


def _chrome_browser(tmp_path):
    """A chrome://tracing capture of a browser: valid trace-event JSON, no PyTorch profiler event."""
    return write(tmp_path / "chrome_browser.json", {
        "traceEvents": [{"pid": 1, "tid": 2, "ts": 100, "ph": "B", "cat": "toplevel", "name": "MessageLoop::RunTask"},
                        {"pid": 1, "tid": 2, "ts": 200, "ph": "E"},
                        ev(name="Paint", cat="blink", ts=150, dur=10, args={"data": {"frame": "x"}})],
        "metadata": {"product": "Chrome"}})


def test_good_and_chrome_browser_trace(tmp_path, capsys):
    bad = _chrome_browser(tmp_path)
    rc, doc, err = analyze_json(capsys, GOOD, bad)
    assert rc == 2
    assert [t["path"] for t in doc["traces"]] == [str(GOOD)]
    assert doc["traces"][0]["summary"]["step_numbers"] == [1, 2, 3]
    assert [e["path"] for e in doc["errors"]] == [str(bad)]
    lines = error_lines(err)
    assert len(lines) == 1 and "chrome_browser.json" in lines[0] and GOOD.name not in lines[0]
    assert "not a PyTorch profiler trace" in lines[0]


def _boom_on(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A section that fails with an unexpected (non-TraceError) exception on one input only."""
    real = report.memory_section

    def boom(trace, steps):
        if name in trace.meta.path:
            raise RuntimeError("unexpected failure inside an analysis")
        return real(trace, steps)

    monkeypatch.setattr(report, "memory_section", boom)  # a section of the pipeline


def test_internal_error_names_the_file_that_failed(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "second.json.gz"
    bad.write_bytes(GOOD.read_bytes())
    _boom_on("second", monkeypatch)
    rc, _, err = run_cli(capsys, "analyze", GOOD, bad)
    assert rc == 2
    lines = error_lines(err)
    assert len(lines) == 1 and "second.json.gz" in lines[0] and GOOD.name not in lines[0], lines


def test_unexpected_failure_is_isolated(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "second.json.gz"
    bad.write_bytes(GOOD.read_bytes())
    _boom_on("second", monkeypatch)
    rc, doc, err = analyze_json(capsys, GOOD, bad)
    assert rc == 2
    assert doc is not None, "the batch was aborted: no report for the good input"
    assert [t["path"] for t in doc["traces"]] == [str(GOOD)]
    assert [e["path"] for e in doc["errors"]] == [str(bad)]
    assert "unexpected failure inside an analysis" in doc["errors"][0]["error"]
