"""bench/run.py: a failing section leaves one "Not measured: <reason>" line in its place; the other sections and
the Summary (with "not run" for the missing figures) are still written. No benchmark runs: every measurement is
a stub, and nothing is timed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
TINY = Path(__file__).resolve().parents[1] / "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz"


@pytest.fixture
def bench_run(monkeypatch):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_run_under_test", BENCH / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.path.remove(str(BENCH))
    row = {"traceview": (1.0, 100.0), "orjson": (0.5, 50.0), "json": (2.0, 60.0)}
    monkeypatch.setattr(mod, "median_runs", lambda cases, repeat: {k: row[k] for k in cases})
    monkeypatch.setattr(mod, "read_halves", lambda p: {"mb": 1.0, "gunzip_cpu_s": 0.1, "inflate": "zlib",
                                                       "scan_cpu_s": 0.2})
    monkeypatch.setattr(mod, "replay_share", lambda p, r: {"wall_s": 1.0, "replay_s": 0.1, "share": 0.1,
                                                           "cpu_share": 0.1, "loops_s": 0.01})
    monkeypatch.setattr(mod, "startup", lambda r: (["\n## Start-up\n", "start-up table"], 0.04))
    monkeypatch.setattr(mod, "importable", lambda m: False)
    monkeypatch.setattr(mod, "profile", lambda p: None)
    monkeypatch.setattr(mod, "scaling_svg", lambda series, note: "<svg/>")
    return mod


def run_main(mod, tmp_path, monkeypatch) -> str:
    out = tmp_path / "RESULTS.md"
    monkeypatch.setattr(sys, "argv", ["run.py", "--trace", str(TINY), "--sizes", "", "--tiny-events", "",
                                      "--repeat", "1", "--no-scaling", "--out", str(out)])
    mod.main()
    return out.read_text()


def boom(*_a):
    raise RuntimeError("the child died\nwith two lines")


def test_a_failing_section_leaves_one_line_and_the_rest_is_written(bench_run, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_run, "replay_share", boom)
    text = run_main(bench_run, tmp_path, monkeypatch)
    replay = text.split("## The replay model")[1].split("\n## ")[0]
    assert "Not measured: RuntimeError: the child died with two lines" in replay
    for kept in ("## Summary", "## Cost vs size", "## The read pipeline", "start-up table", "Peers: HTA is not"):
        assert kept in text
    assert "| replay share of end to end" in text and "| not run | <= 15 % |" in text
    assert "| start-up over `import numpy, polars` (tiny trace) | +0.040 s |" in text


def test_failing_benchmark_row_and_start_up_leave_the_summary(bench_run, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_run, "median_runs", boom)
    monkeypatch.setattr(bench_run, "startup", lambda r: (_ for _ in ()).throw(SystemExit("failed: python -m x")))
    text = run_main(bench_run, tmp_path, monkeypatch)
    assert f"Not measured: {TINY.name}: RuntimeError: the child died with two lines" in text
    assert "## Start-up\n\nNot measured: SystemExit: failed: python -m x" in text
    assert "speed vs `orjson.loads` | not run |" in text and "(tiny trace) | not run |" in text
    assert "## The replay model" in text and "1.00 s end to end" in text
    assert "| not run |" in text.split("## The read pipeline")[1].split("\n## ")[0]  # the row's traceview time
