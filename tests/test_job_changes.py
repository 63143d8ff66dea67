"""Each rank's own changes priced on the job replay (issue 26, item 2: `traceview/sections/rank_changes.py`).

The straggler is the rank whose change saves the job most, not the one most often last to arrive. Checked on our
2 x H200 recordings (sample_traces/nccl_h200x2/MANIFEST.md: rank 1 spins 100 / 50 ms before backward in the
`*_slowed` runs) against the collector's unprofiled CUDA-event step times (manifest.json), and on a synthetic
4-rank job (tools/synth_ranks.py) where a rank whose clock runs 5 ms ahead is recorded last at most collectives
while the rank that spins 100 ms is the one whose fix gives the job back its step.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from traceview.options import Options
from traceview.report import analyze

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "sample_traces" / "nccl_h200x2"
sys.path.insert(0, str(REPO / "tools"))
import synth_ranks  # noqa: E402


def _job(path: Path) -> dict:
    return analyze([path], Options()).jobs[0]


def _unprofiled_ms(run: str) -> float:
    return json.loads((RUNS / run / "manifest.json").read_text())["step_time"]["unprofiled_ms_median"]


@pytest.mark.parametrize("run", ["ddp_rank1_slowed", "ddp_rank1_slowed_50ms"])
def test_straggler_is_the_rank_whose_change_saves_the_job_most(run: str) -> None:
    job = _job(RUNS / run)
    s = job["nccl"]["straggler"]
    assert s["rank"] == 1 and s["raised"] and s["last_to_arrive"] == 1
    c = s["cause"]
    # the change: rank 1's cpu_launch (its GPU idles while its host spins outside any op) as the other rank's
    assert c["class"] == "cpu_launch" and c["mechanism"] == "host_code"
    assert c["change"]["source"] == "median" and c["change"]["class"] == "cpu_launch"
    assert c["evidence"]["largest_gap"]["after_op"].startswith("Optimizer.zero_grad")
    assert c["evidence"]["largest_gap"]["before_op"] == "aten::ones_like"
    # excess = the replayed job saving, and it is what the delay cost the unprofiled job (collector, CUDA events)
    assert c["excess_us_per_step"] == s["job_saving_us_per_step"]
    measured_ms = _unprofiled_ms(run) - _unprofiled_ms("ddp_balanced")
    assert s["job_saving_us_per_step"] / 1000 == pytest.approx(measured_ms, rel=0.10)
    rows = job["replay"]["changes"]
    best = max((r for r in rows if r["own"]), key=lambda r: r["job_saving_us_per_step"])
    assert (best["rank"], best["change"]) == (1, s["fix"])
    assert rows == sorted(rows, key=lambda r: -r["job_saving_us_per_step"])
    # rank 0's changes (it only waits) give the job nothing above the noise
    assert all(r["job_saving_us_per_step"] <= s["noise_us_per_step"] for r in rows if r["rank"] == 0)
    f = next(f for f in job["findings"] if f["rule"] == "nccl-wait")
    assert f["severity"] == "error" and f["evidence"]["job_saving_us_per_step"] == s["job_saving_us_per_step"]


def test_balanced_job_no_change_saves_above_the_noise() -> None:
    job = _job(RUNS / "ddp_balanced")
    s = job["nccl"]["straggler"]
    assert not s["raised"]
    own = [r for r in job["replay"]["changes"] if r["own"]]
    assert own and all(r["job_saving_us_per_step"] <= s["noise_us_per_step"] for r in own)
    # a fix both ranks' findings share (their elementwise chain) is every rank's, never the straggler's cause
    shared = [r for r in job["replay"]["changes"] if not r["own"]]
    assert {r["rule"] for r in shared} >= {"elementwise-chain"}
    f = next(f for f in job["findings"] if f["rule"] == "nccl-wait")
    assert f["severity"] == "info" and f["title"].startswith("No straggler")


@pytest.fixture(scope="module")
def skewed_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 ranks: 0-2 copies of the slowed run's waiting rank 0, rank 3 a copy of its rank 1 (spins 100 ms); rank 2's
    clock 5 ms ahead, so it is recorded arriving last at every collective rank 3 is not late at by more."""
    out = tmp_path_factory.mktemp("skew") / "job"
    synth_ranks.synthesize(RUNS / "ddp_rank1_slowed", out, 4, straggler=3, shift_us={2: 5000.0})
    return out


def _times_last(path: Path) -> dict[int, int]:
    """Per rank, how many DDP all-reduces of the 3 analysed steps (the last 24 NCCL kernels of each file) it
    started last at, on the job clock (`baseTimeNanoseconds` + ts): stdlib recomputation from the raw files."""
    starts = {}
    for p in sorted(path.glob("*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(p.read_bytes()))
        ks = sorted(
            e["ts"]
            for e in doc["traceEvents"]
            if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("ncclDevKernel")
        )[-24:]
        base = doc["baseTimeNanoseconds"] / 1000
        starts[doc["distributedInfo"]["rank"]] = [base + t for t in ks]
    last = [max(starts, key=lambda r: starts[r][i]) for i in range(24)]
    return {r: last.count(r) for r in starts}


def test_last_to_arrive_is_not_the_straggler(skewed_job: Path) -> None:
    raw = _times_last(skewed_job)
    assert raw[2] > raw[3] > 0  # rank 2 is the one most often last, by the recorded clocks
    job = _job(skewed_job)
    s = job["nccl"]["straggler"]
    assert s["last_to_arrive"] == 2
    assert {r["rank"]: r["times_last"] for r in job["nccl"]["ranks"]} == raw
    # but fixing rank 3 (its host's busy loop) is what gives the job back its step
    assert s["rank"] == 3 and s["raised"] and s["times_last"] == raw[3]
    assert s["cause"]["mechanism"] == "host_code"
    measured_ms = _unprofiled_ms("ddp_rank1_slowed") - _unprofiled_ms("ddp_balanced")
    assert s["job_saving_us_per_step"] / 1000 == pytest.approx(measured_ms, rel=0.10)
    rank2 = [r for r in job["replay"]["changes"] if r["rank"] == 2]
    assert rank2 and max(r["job_saving_us_per_step"] for r in rank2) <= s["noise_us_per_step"]
    assert "rank 2 arrived last most often" in s["reason"]


def test_fsdp_straggler_and_cause() -> None:
    job = _job(RUNS / "fsdp_rank1_slowed")
    s = job["nccl"]["straggler"]
    assert s["rank"] == 1 and s["raised"] and s["cause"]["mechanism"] == "host_code"
    assert not _job(RUNS / "fsdp_balanced")["nccl"]["straggler"]["raised"]


def test_fsdp_job_saving_is_the_measured_cost() -> None:
    """Rank 1's busy loop removed gives the FSDP job back what the delay cost it unprofiled (collector, CUDA
    events). It gave 59.1 ms while the NCCL watchdog thread was joined: its ~100 ms sleep between polls pinned
    rank 0's autograd thread to its recorded wake-up (`test_the_nccl_watchdog_is_never_a_join`)."""
    s = _job(RUNS / "fsdp_rank1_slowed")["nccl"]["straggler"]
    measured_ms = _unprofiled_ms("fsdp_rank1_slowed") - _unprofiled_ms("fsdp_balanced")
    assert s["job_saving_us_per_step"] / 1000 == pytest.approx(measured_ms, rel=0.10)


def _runtime_only_threads(path: Path) -> set[int]:
    """Threads whose every event is a CUDA runtime call, with `cudaEventQuery` among them (ProcessGroupNCCL's
    watchdog polling its collectives' events): stdlib json on the raw file."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    cats: dict[int, set[str]] = {}
    names: dict[int, set[str]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and isinstance(e.get("tid"), int):
            cats.setdefault(e["tid"], set()).add(e.get("cat", ""))
            names.setdefault(e["tid"], set()).add(e.get("name", ""))
    return {t for t, c in cats.items() if c == {"cuda_runtime"} and "cudaEventQuery" in names[t]}


@pytest.mark.parametrize("run", ["fsdp_rank1_slowed", "ddp_rank1_slowed"])
def test_the_nccl_watchdog_is_never_a_join(run: str) -> None:
    """A thread of runtime calls only neither waits for the program nor is waited for (`replay_graph._joins`):
    its polls say when it woke, not when anything could go on. The autograd thread still joins the main thread
    (`loss.backward()` hands it the work)."""
    from traceview.analyses.replay_graph import build
    from traceview.ingest.loader import load_file

    path = sorted((RUNS / run).glob("rank0*.pt.trace.json.gz"))[0]
    watchdog = _runtime_only_threads(path)
    assert len(watchdog) == 1
    g = build(load_file(path))
    joined = np.flatnonzero(g.a_join >= 0)
    pairs = {(int(g.a_tid[j]), int(g.a_tid[g.a_join[j]])) for j in joined}
    assert pairs and not any(a in watchdog or b in watchdog for a, b in pairs)
    assert watchdog <= set(np.unique(g.a_tid).tolist())  # its calls are anchors (program order), only not joins


def test_forget_drops_a_ranks_cached_analyses_only() -> None:
    """A job's ranks keep their frames for the job but not every analysis's cache (`memo.forget`): a cached
    analysis runs again after it, on that trace only."""
    from traceview.analyses.classify import sync_calls
    from traceview.ingest.loader import load_file
    from traceview.memo import forget

    a, b = (load_file(p) for p in sorted((RUNS / "ddp_balanced").glob("*.pt.trace.json.gz")))
    sa, sb = sync_calls(a), sync_calls(b)
    assert sync_calls(a) is sa and sa.height > 0
    forget(a)
    again = sync_calls(a)
    assert again is not sa and again.equals(sa)  # recomputed, the same rows
    assert sync_calls(b) is sb  # the other rank's cache stays


@pytest.mark.parametrize("run", ["ddp_balanced_launch_bound", "ddp_rank1_slowed", "fsdp_rank1_slowed"])
def test_cause_text_never_contradicts_the_ranks_findings(run: str) -> None:
    """"The same ops as the others" is said only of a rank whose findings the other rank has too; the launch-bound
    balanced job's formal straggler runs the same ops slower (profiler), and both ranks' findings agree."""
    rep = analyze([RUNS / run], Options())
    job = rep.jobs[0]
    s = job["nccl"]["straggler"]
    rules = {t["rank"]: {f["rule"] for f in t["findings"]} for t in rep.traces}
    mine, other = rules[s["rank"]], set.union(*(v for r, v in rules.items() if r != s["rank"]))
    text = s["cause"]["text"] + " ".join(f["evidence"].get("note") or "" for f in job["findings"])
    if "the same" in text:
        assert mine <= other, (mine, other)
    if mine - other:
        assert "mechanism_note" in s["cause"] or s["cause"]["mechanism"] != "slower_host_ops"
    if run == "ddp_balanced_launch_bound":
        assert s["cause"]["mechanism"] == "slower_host_ops" and not s["raised"]
        assert "the same host ops, each slower" in text and mine == other
