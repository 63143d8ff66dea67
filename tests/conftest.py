from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path

import pytest

# The collector's capture starts once the step time settles (collectors/settle.py): a time-dependent step on a busy
# box. Tests that assert which steps were recorded run with the fixed schedule; tests/test_collect_settle.py
# turns it on.
os.environ.setdefault("TRACEVIEW_SETTLE", "0")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


@functools.cache
def load(rel: str):
    """Each sample trace is loaded once per test session."""
    import traceview

    return traceview.load(SAMPLES / rel)


@functools.cache
def ab_twins() -> dict[str, dict]:
    """The one-process twins (sample_traces/ab_traced/labels.json, written by tools/ab_labels.py), by problem."""
    return {t["problem"]: t for t in json.loads((SAMPLES / "ab_traced/labels.json").read_text())["twins"]}


@functools.cache
def raw_events(rel: str) -> list[dict]:
    """The trace decoded independently (stdlib json), for cross-checks."""
    with gzip.open(SAMPLES / rel, "rt") as fh:
        return json.load(fh)["traceEvents"]


def run_doc(run_dir: Path) -> dict:
    """The report entry of a one-rank run folder, as `traceview analyze RUN_DIR` builds it."""
    from traceview import report

    (tr,) = report.analyze([run_dir]).to_dict()["traces"]
    return tr


def run_rank(run_dir: Path) -> dict:
    """The collector's manifest entry of a one-rank run folder."""
    (rank,) = json.loads((run_dir / "manifest.json").read_text())["ranks"]
    return rank


def estimate_errors(set_dir: Path, runs: tuple[str, ...]) -> dict[str, float]:
    """Each run's (and its `_fixed` twin's) profiler-cost estimate against the collector's CUDA-event median of its
    unprofiled steps: estimated / measured - 1."""
    out = {}
    for run in (r + s for r in runs for s in ("", "_fixed")):
        est = run_doc(set_dir / run)["profiling"]["estimated_unprofiled_step_us"] / 1000
        out[run] = est / run_rank(set_dir / run)["unprofiled_step_ms_median"] - 1
    return out


def iqr(rounds: list[float]) -> float:
    """The interquartile range of a twin's per-round savings, by numpy's percentiles (an independent computation of
    the quartiles tools/predictions.py takes with `statistics.quantiles`)."""
    import numpy as np

    q1, q3 = np.percentile(rounds, [25, 75])
    return float(q3 - q1)


def finding(doc: dict, rule: str) -> dict:
    """The one finding of `rule` in a report entry."""
    (f,) = [f for f in doc["findings"] if f["rule"] == rule]
    return f


def timed_runs(set_dir: Path, prog: str) -> list[dict]:
    """The runs of `prog` timed alone on the device (`set_dir`/fixes_<gpu>.ndjson: {prog, args, step_ms, ...}), in run
    order; a run that failed has no `step_ms`, its `error` instead."""
    (path,) = set_dir.glob("fixes_*.ndjson")  # fixes_h100 / fixes_h200: the GPU the set ran on
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [r for r in rows if r["prog"] == prog]


def steady_ms(run: dict, skip: int = 10, stat=None) -> float:
    """A timed run's steady step (ms): `stat` (the mean unless given) of its steps after the first `skip`."""
    import numpy as np

    return float((stat or np.mean)(run["step_ms"][skip:]))


def pair_savings(runs: list[dict], stat=None, fixed: tuple[str, ...] = ("--fixed",)) -> list[float]:
    """The measured saving of each alternated (problem, fix) pair of `runs` (two of each, in run order): the problem
    run's steady step less its fixed twin's (`steady_ms`)."""
    problem = [steady_ms(r, stat=stat) for r in runs if r["args"] == [] and r.get("step_ms")]
    fix = [steady_ms(r, stat=stat) for r in runs if r["args"] == list(fixed) and r.get("step_ms")]
    assert len(problem) == len(fix) == 2
    return [p - f for p, f in zip(problem, fix, strict=True)]


@pytest.fixture(scope="session")
def samples() -> Path:
    return SAMPLES


CHROMIUM = Path("/usr/bin/chromium")  # Debian's package (.ci/run installs it), never a test tool's own download
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]  # fmt: skip


@pytest.fixture(scope="module")
def browser():
    """Headless chromium through playwright, for the real-browser tests (the app, Open in Perfetto): without
    /usr/bin/chromium they fail, they do not skip."""
    assert CHROMIUM.exists(), "no /usr/bin/chromium: install Debian's package (apt-get install -y chromium)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


#: bundled traces that traceview refuses by design (exit 2, one error line: tests/test_profiler_misuse.py): the
#: profiler recorded none of the program's work, or the file is an execution trace; every "all bundled traces"
#: test leaves them out
REFUSED = frozenset(f"profiler_misuse/{n}.json.gz" for n in (
    "handler_overwritten", "exported_after_schedule", "threads_not_recorded", "execution_trace"))


def bundled(pattern: str = "*.json.gz") -> list[Path]:
    """Every bundled trace file matching `pattern` (sorted), less those refused by design (`REFUSED`)."""
    return sorted(p for p in SAMPLES.rglob(pattern) if p.relative_to(SAMPLES).as_posix() not in REFUSED)
