"""Many ranks: a job synthesised at test time by tools/synth_ranks.py from our 2 x H200 recording
`sample_traces/nccl_h200x2/ddp_rank1_slowed` (rank 1 spins 100 ms before backward each step): every rank a copy
of recorded rank 0 with its clock shifted by up to ±20 µs, one rank a copy of the recorded straggler.

Checked: the files the tool writes; the straggler, its cause and every waiting rank's loss equal those of the
recorded 2-rank job (the copies ran the same recorded work); the parallel path (worker processes) gives the same
document as the serial one, byte for byte; and the job section stays readable (the straggler, the distribution of
waits, the worst ranks — not one row per rank). No speed is asserted here (bench/bench_ranks.py times it).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from traceview.formatters.findings_text import MANY_RANKS, WORST_RANKS, render_job
from traceview.options import Options
from traceview.report import analyze

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "sample_traces" / "nccl_h200x2" / "ddp_rank1_slowed"
N, STRAG, JITTER_US = 10, 7, 20.0
sys.path.insert(0, str(REPO / "tools"))
from synth_ranks import synthesize  # noqa: E402


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "job"
    synthesize(SRC, out, N, straggler=STRAG, jitter_us=JITTER_US, seed=1)
    return out


@pytest.fixture(scope="module")
def serial(job_dir: Path) -> dict:
    return analyze([job_dir], Options(jobs=1)).to_dict()


def _header(path: Path) -> tuple[dict, int, str]:
    with gzip.open(path, "rt") as fh:
        d = json.load(fh)
    return d["distributedInfo"], d["baseTimeNanoseconds"], json.dumps(d["traceEvents"])


def test_the_tool_writes_one_file_per_rank_with_its_rank_and_a_shifted_clock(job_dir: Path) -> None:
    files = sorted(job_dir.glob("rank*.pt.trace.json.gz"))
    assert len(files) == N
    rec = {json.loads(gzip.open(f, "rt").read())["distributedInfo"]["rank"]: f
           for f in SRC.glob("rank*.pt.trace.json.gz")}
    (_, base0, ev0), (_, base1, ev1) = _header(rec[0]), _header(rec[1])
    for k in range(N):
        info, base, events = _header(job_dir / f"rank{k}.synth.pt.trace.json.gz")
        assert info["rank"] == k and info["world_size"] == N
        src_base, src_events = (base1, ev1) if k == STRAG else (base0, ev0)
        assert events == src_events and abs(base - src_base) <= JITTER_US * 1000  # the events untouched, the clock shifted


def test_straggler_and_waits_equal_the_recorded_job(serial: dict) -> None:
    (job,) = serial["jobs"]
    (rec,) = analyze([SRC]).to_dict()["jobs"]
    strag = job["nccl"]["straggler"]
    assert strag["rank"] == STRAG and strag["raised"] and strag["times_last"] == strag["of"] == 24
    assert job["ranks"] == list(range(N))
    cause, rcause = strag["cause"], rec["nccl"]["straggler"]["cause"]
    assert cause["class"] == rcause["class"] == "cpu_launch" and cause["mechanism"] == "host_code"
    assert cause["class_excess_us_per_step"] == pytest.approx(rcause["class_excess_us_per_step"], rel=0.01)
    assert cause["class_excess_us_per_step"] / 1000 == pytest.approx(100.0, rel=0.30)  # the injected 100 ms
    # the job saving of its change: the recorded job's, give or take the copies' clock shifts (each of the 8 ranks
    # the straggler's change is replayed with arrives up to 2 x 20 µs apart at each of the step's 8 all-reduces)
    assert cause["excess_us_per_step"] == strag["job_saving_us_per_step"]
    assert cause["excess_us_per_step"] == pytest.approx(rcause["excess_us_per_step"], rel=0.05)
    want = {r["rank"]: r for r in rec["nccl"]["ranks"]}[0]["exposed_wait_per_step_us"]
    # every copy of rank 0 loses what recorded rank 0 lost, give or take the clock shifts: each of the step's
    # collectives' waits moves by at most the two ranks' shifts (2 x 20 µs)
    tol = job["nccl"]["collectives"] / job["nccl"]["steps"] * 2 * JITTER_US
    for r in job["nccl"]["ranks"]:
        if r["rank"] != STRAG:
            assert r["exposed_wait_per_step_us"] == pytest.approx(want, abs=tol), r["rank"]
    assert job["step_period"]["period_us"] == pytest.approx(rec["step_period"]["period_us"], rel=0.01)


def test_parallel_workers_give_the_same_document(job_dir: Path, serial: dict) -> None:
    par = analyze([job_dir], Options(jobs=2)).to_dict()
    assert json.dumps(par, sort_keys=True) == json.dumps(serial, sort_keys=True)
    # and through the CLI (`-j`), whose spawned workers start from its real __main__
    out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(job_dir), "-j", "2", "--format", "json"],
                         capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ})  # fmt: skip
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert json.loads(out.stdout)["jobs"] == serial["jobs"]


def _own(entry: dict) -> dict:
    """A rank's entry without what its job's replay sets (its profiling estimate, and the projection's
    unprofiled step where that is the estimate)."""
    out = {k: v for k, v in entry.items() if k != "profiling"}
    if out.get("projection"):
        out["projection"] = {k: v for k, v in out["projection"].items() if k != "unprofiled_step_us"}
    return out


def _sans_overhead(findings: list[dict]) -> list[dict]:
    return [{**f, "evidence": {k: v for k, v in f["evidence"].items() if k != "profiling_overhead_ms_per_step"}}
            for f in findings]


def test_large_job_reduced_and_replayed_on_its_latest_ranks(job_dir: Path, serial: dict,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Above `report.REDUCE_ABOVE_RANKS` ranks (forced down to 4 here) each rank is reduced as it is read (in the
    workers) and the job is replayed on the sub-job of its latest arrivers: every rank's own entry, the matching,
    the straggler, its cause and every priced change are those of the whole-job analysis (the changes were
    always priced on that sub-job); only the replay's fidelity rows and job step cover the replayed ranks."""
    import traceview.report as report
    from traceview.sections import job_answer, rank_changes

    monkeypatch.setattr(report, "REDUCE_ABOVE_RANKS", 4)
    monkeypatch.setattr(job_answer, "MAX_FIX_RANKS", 4)
    large = analyze([job_dir], Options(jobs=2)).to_dict()
    # every rank's own entry is the whole job's but for its profiling estimate: a job above MAX_FIX_RANKS is not
    # replayed whole, so each rank's comes from its own replay there (`replay`), from the job's here (`job_replay`)
    assert [_own(e) for e in large["traces"]] == [_own(e) for e in serial["traces"]]
    assert {e["profiling"]["model"]["method"] for e in large["traces"]} == {"replay"}
    assert {e["profiling"]["model"]["method"] for e in serial["traces"]} == {"job_replay"}
    (job,), (whole,) = large["jobs"], serial["jobs"]
    # (the job finding's profiler cost per step is the ranks' largest traced minus estimated unprofiled step: from
    # their own replays here, from the job's there)
    assert job["nccl"] == whole["nccl"] and _sans_overhead(job["findings"]) == _sans_overhead(whole["findings"])
    rep = job["replay"]
    assert len(rep["replayed_ranks"]) == rank_changes.SUB_JOB < N and STRAG in rep["replayed_ranks"]
    assert [r["rank"] for r in rep["fidelity"]["ranks"]] == rep["replayed_ranks"]
    assert rep["changes"] == whole["replay"]["changes"]
    fixed, wfixed = job["projection"]["straggler_fixed"], whole["projection"]["straggler_fixed"]
    assert fixed["saving_us"] == wfixed["saving_us"]
    # the job's step replayed on 8 of the 10 ranks: the same step (every rank runs it), within the copies' jitter
    assert rep["job_step_us"] == pytest.approx(whole["replay"]["job_step_us"], rel=0.001)
    assert "all_top_fixes" not in job["projection"]


def test_job_section_stays_readable(serial: dict) -> None:
    assert N > MANY_RANKS
    (job,) = serial["jobs"]
    buf = io.StringIO()
    render_job(job, Console(file=buf, width=300))
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[1].startswith(f"Straggler: rank {STRAG} arrives")
    head = next(k for k, ln in enumerate(lines) if ln.startswith("rank") and "wait ms/step" in ln)
    table_rows = []  # the wait table's rows, under its header and rule
    for ln in lines[head + 2:]:
        if not re.match(r"^\s*\d+\s", ln):
            break
        table_rows.append(ln)
    assert len(table_rows) == WORST_RANKS + 1  # the five that lose most and the straggler, not N rows
    assert any(ln.split()[0] == str(STRAG) for ln in table_rows)
    exp = sorted(r["exposed_wait_per_step_us"] / 1000 for r in job["nccl"]["ranks"])
    p90 = exp[round(0.9 * (len(exp) - 1))]
    assert (f"exposed wait per step over {N} ranks, ms: min {exp[0]:,.3f} · median {statistics.median(exp):,.3f} · "
            f"p90 {p90:,.3f} · max {exp[-1]:,.3f}") in text
    assert f"ranks {N} ranks (0–{N - 1})" in lines[0]
    assert sum(re.match(r"^rank \d+:", ln) is not None for ln in lines) <= WORST_RANKS + 1
