"""Why the straggler is late (`jobs[].nccl.straggler.cause`), on our own ground truth.

In `sample_traces/nccl_h200x2/*_rank1_slowed*` (2 x H200, NCCL) and `sample_traces/gloo_straggler/slowed` (CPU,
gloo) rank 1 spins `--delay-ms` of CPU in a Python busy loop before `backward()` every step (the manifests'
command lines say how long). That is host work outside any torch op: on a GPU rank its GPU idles until the host
launches backward — the classifier's `cpu_launch` —, on a CPU rank it is the host's own time (`host_busy`); the
mechanism is `host_code` (code outside any profiled op). The cause's excess per step must match the injected
delay within ±30 %; an independent reference from the raw JSON (no traceview code) finds the same stretch with no
profiled host event. Balanced jobs get nothing above info, and a balanced launch-bound job whose profiled host ran
slower (same ops, each slower) is explained by the profiler's overhead: info, never warning/error.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from traceview.report import analyze

REPO = Path(__file__).resolve().parents[1]
NCCL = REPO / "sample_traces" / "nccl_h200x2"
GLOO = REPO / "sample_traces" / "gloo_straggler"
TOL = 0.30


def _delay(run: Path) -> tuple[int, float]:
    """(slowed rank, injected ms) from the run's recorded command line."""
    argv = json.loads((run / "manifest.json").read_text())["argv"]
    rank = int(argv[argv.index("--slow-rank") + 1]) if "--slow-rank" in argv else 1  # gloo script: always rank 1
    return rank, float(argv[argv.index("--delay-ms") + 1])


def _job(run: Path) -> dict:
    (job,) = analyze([run]).to_dict()["jobs"]
    return job


def _raw_largest_host_gap_ms(run: Path, rank: int) -> list[float]:
    """Independent reference: the straggler's longest stretch, per ProfilerStep, in which no host event (op,
    annotation, runtime call; ProfilerStep# and gloo worker ranges aside) is open on any thread that runs ops;
    per step, sorted."""
    f = next(run.glob(f"rank{rank}.*.pt.trace.json.gz"))
    with gzip.open(f, "rt") as fh:
        es = json.load(fh)["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in es if str(e.get("name", "")).startswith("ProfilerStep#"))
    program = {e["tid"] for e in es if e.get("cat") in ("cpu_op", "user_annotation")}  # not the NCCL watchdog
    host = sorted((e["ts"], e["ts"] + e["dur"]) for e in es
                  if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
                  and e["tid"] in program and not str(e["name"]).startswith(("ProfilerStep#", "gloo:")))
    out = []
    for lo, hi in steps:
        end, best = lo, 0.0
        for a, b in host:
            if b <= lo or a >= hi:
                continue
            best = max(best, a - end)
            end = max(end, b)
        out.append(best / 1000)
    return sorted(out)


@pytest.mark.parametrize("run, klass", [(NCCL / "ddp_rank1_slowed", "cpu_launch"),
                                        (NCCL / "ddp_rank1_slowed_50ms", "cpu_launch"),
                                        (NCCL / "fsdp_rank1_slowed", "cpu_launch"),
                                        (GLOO / "slowed", "host_busy")])
def test_cause_class_and_ms_per_step_match_the_injected_delay(run: Path, klass: str) -> None:
    rank, delay = _delay(run)
    job = _job(run)
    strag = job["nccl"]["straggler"]
    cause = strag["cause"]
    assert strag["rank"] == rank and strag["raised"] and cause["severity"] in ("warning", "error")
    assert cause["class"] == klass and cause["mechanism"] == "host_code", cause["text"]
    # the class's excess before the collectives (a replayed job's `excess_us_per_step` is the job saving of the
    # change, tests/test_job_changes.py; a host-side gloo job is not replayed: its excess is the class's)
    class_x = cause.get("class_excess_us_per_step", cause["excess_us_per_step"])
    assert class_x / 1000 == pytest.approx(delay, rel=TOL), cause["text"]
    if "job_saving_us_per_step" in strag:
        assert cause["excess_us_per_step"] == strag["job_saving_us_per_step"]
    # its lateness at the collectives is the delay too, and the host side names the same time: no profiled event
    assert cause["lateness_us_per_step"] / 1000 == pytest.approx(delay, rel=TOL)
    assert cause["host_excess_us_per_step"]["untraced"] / 1000 == pytest.approx(delay, rel=TOL)
    # no other class comes close: the spin is the only difference between the ranks
    others = [v for k, v in cause["classes_excess_us_per_step"].items() if k != klass]
    assert all(v < 0.1 * class_x for v in others), cause["classes_excess_us_per_step"]
    # evidence: where in the program the untraced stretch sits — after zero_grad, before backward's first op
    # (`busy()` runs between `opt.zero_grad()` and `loss.backward()` in both scripts) — and the raw JSON agrees
    gap = cause["evidence"]["largest_gap"]
    assert "zero_grad" in gap["after_op"] and gap["before_op"] == "aten::ones_like", gap
    raw = _raw_largest_host_gap_ms(run, rank)
    assert raw[len(raw) // 2] == pytest.approx(delay, rel=TOL)
    assert gap["us"] / 1000 == pytest.approx(raw[-1], rel=0.01)  # the longest one, as the raw JSON has it
    assert cause["text"].startswith(f"rank {rank} arrives") and f"{klass} +" in cause["text"]


@pytest.mark.parametrize("run", [NCCL / "ddp_balanced", NCCL / "fsdp_balanced", GLOO / "balanced"])
def test_balanced_jobs_get_no_cause_above_info(run: Path) -> None:
    job = _job(run)
    strag = job["nccl"]["straggler"]
    assert not strag["raised"]
    assert strag["cause"] is None or strag["cause"]["severity"] == "info"
    assert all(f["severity"] == "info" for f in job["findings"]), job["findings"]
    # whatever the formally last rank does differently is small against its step
    if strag["cause"] and strag["cause"]["class"]:
        step_us = min(t["summary"]["avg_step_us"] for t in analyze([run]).to_dict()["traces"])
        assert strag["cause"]["excess_us_per_step"] < 0.05 * step_us


def test_profiler_overhead_explains_a_balanced_launch_bound_job() -> None:
    """Same work on both ranks, profiled at +124 %: rank 1's host ran the same ops, each slower — the profiler's
    doing, not a straggler: info with the reason."""
    run = NCCL / "ddp_balanced_launch_bound"
    job = _job(run)
    (f,) = job["findings"]
    cause = job["nccl"]["straggler"]["cause"]
    st = json.loads((run / "manifest.json").read_text())["step_time"]
    over = st["profiled_ms_median"] - st["unprofiled_ms_median"]
    assert f["severity"] == "info" and f["evidence"]["may_be_profiling_artifact"] is True
    assert f["evidence"]["exposed_wait_per_step_us"] / 1000 <= over
    assert cause["class"] == "cpu_launch" and cause["mechanism"] == "slower_host_ops", cause["text"]
    assert cause["evidence"]["ops_per_step"] == cause["evidence"]["others_ops_per_step"]  # the same ops
    assert "same work" in f["evidence"]["note"] and not job["nccl"]["straggler"]["raised"]


def test_a_real_straggler_stays_loud_whatever_the_profiler_overhead(tmp_path: Path) -> None:
    """The 100 ms spin with a manifest claiming the profiler added more than the wait: the spin is work the other
    rank does not have, so the straggler is still raised."""
    run = tmp_path / "run"
    shutil.copytree(NCCL / "ddp_rank1_slowed", run)
    man = json.loads((run / "manifest.json").read_text())
    man["step_time"]["profiled_ms_median"] = man["step_time"]["unprofiled_ms_median"] + 200.0
    (run / "manifest.json").write_text(json.dumps(man))
    job = _job(run)
    (f,) = job["findings"]
    assert f["severity"] == "error" and "may_be_profiling_artifact" not in f["evidence"]
    assert "real straggler" in f["evidence"]["note"] and f["evidence"]["cause"]["mechanism"] == "host_code"


def test_estimated_overhead_from_the_trace_entries() -> None:
    """Without a manifest the job rule reads the profiling section's estimate of the unprofiled step, when a
    trace entry has one."""
    from traceview.model import Job
    from traceview.ruleapi import JobContext

    entries = ({"summary": {"avg_step_us": 30_000.0}, "profiling": {"estimated_unprofiled_step_us": 14_000.0}},
               {"summary": {"avg_step_us": 29_000.0}, "profiling": {"estimated_unprofiled_step_us": 20_000.0}},
               {"summary": {"avg_step_us": 29_000.0}, "profiling": None})
    ctx = JobContext(job=Job(path="x", traces=[]), steps={}, comm={}, entries=entries)
    assert ctx.overhead_ms == pytest.approx(16.0)
    assert JobContext(job=Job(path="x", traces=[]), steps={}, comm={}).overhead_ms is None


def test_text_report_leads_the_job_with_the_cause() -> None:
    import io

    from rich.console import Console

    from traceview.formatters.findings_text import render_job

    job = _job(NCCL / "ddp_rank1_slowed")
    buf = io.StringIO()
    render_job(job, Console(file=buf, width=400))
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    assert lines[1].startswith("Straggler: rank 1 arrives") and "cpu_launch +" in lines[1]
    bal = io.StringIO()
    render_job(_job(NCCL / "ddp_balanced"), Console(file=bal, width=400))
    assert "arrives" not in bal.getvalue()


@pytest.mark.parametrize("run", sorted([*(p for p in NCCL.iterdir() if p.is_dir()), *(p for p in GLOO.iterdir()
                                                                                       if p.is_dir())]))
def test_step_period_per_rank_equals_the_collectors_measured_step(run: Path) -> None:
    """Each rank's step period (from the trace alone) equals the step time the collector measured for that rank
    (CUDA events on GPU ranks, wall clock on the CPU ones; manifest `profiled_step_ms`) within 10 %, and the job
    shows one period and each rank's share of it waiting."""
    man = json.loads((run / "manifest.json").read_text())
    measured = {r["rank"]: r["profiled_step_ms_median"] for r in man["ranks"]}
    job = _job(run)
    per = job["step_period"]
    got = {r["rank"]: r["period_us"] / 1000 for r in per["ranks"]}
    assert set(got) == set(measured)
    for rank, ms in measured.items():
        assert got[rank] == pytest.approx(ms, rel=0.10), (rank, got[rank], ms)
    assert min(got.values()) <= per["period_us"] / 1000 <= max(got.values())
    waits = {r["rank"]: r["exposed_wait_per_step_us"] for r in job["nccl"]["ranks"]}
    for r in per["ranks"]:
        assert r["exposed_wait_pct"] == pytest.approx(100 * waits[r["rank"]] / per["period_us"], abs=0.05)
        assert r["exposed_wait_pct"] < 100
