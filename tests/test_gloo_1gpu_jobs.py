"""Real two-rank DDP jobs with a known straggler cause (sample_traces/gloo_h200_1gpu, recorded on one H200 with
gloo: two ranks share the GPU, `collectors/examples/record_gloo1gpu.sh`).

Ground truth is independent of traceview: the cause is the run's recorded command line (`--cause`), and each job's
unprofiled step is the collector's CUDA-event median per rank (manifest.json); the job's measured cost of the
straggler is its step minus the balanced job's. What traceview must get right on every job whose injected cause
measurably slows it: the straggler rank and the cause's class and mechanism; and a job the cause does not slow
unprofiled (per-block `.item()` syncs on a lightly loaded GPU) and the balanced job raise nothing above info.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceview.report import analyze

RUNS = Path(__file__).resolve().parents[1] / "sample_traces" / "gloo_h200_1gpu"
#: --cause of dist_gpt.py -> the job answer's (class, mechanism) for it
CAUSES = {"delay": ("cpu_launch", "host_code"), "copy": ("gpu_memory", "data_copy"),
          "kernels": ("gpu_compute", "extra_kernels")}


def _argv(run: Path) -> list[str]:
    return json.loads((run / "manifest.json").read_text())["ranks"][0]["argv"]


def _step_ms(run: Path) -> float:
    """The job's unprofiled step: the slowest rank's CUDA-event median (the ranks wait for each other)."""
    return max(r["unprofiled_step_ms_median"] for r in json.loads((run / "manifest.json").read_text())["ranks"])


def _noise_ms(run: Path) -> float:
    """Step-to-step spread of the balanced job's unprofiled steps (max − min over ranks and steps, first aside)."""
    ms = [x for r in json.loads((run / "manifest.json").read_text())["ranks"] for x in r["unprofiled_step_ms"][1:]]
    return max(ms) - min(ms)


BALANCED = RUNS / "gloo1_balanced"
SLOWED = sorted(p for p in RUNS.glob("gloo1_rank1_*") if p.is_dir())


def _job(run: Path) -> dict:
    (job,) = analyze([run]).to_dict()["jobs"]
    return job


def _measured_saving_ms(run: Path) -> float:
    return _step_ms(run) - _step_ms(BALANCED)


def test_the_recordings_are_what_the_labels_say() -> None:
    assert len(SLOWED) == 4
    for run in SLOWED:
        argv = _argv(run)
        assert argv[argv.index("--slow-rank") + 1] == "1" and argv[argv.index("--backend") + 1] == "gloo"
    # the causes that slow the job unprofiled do so well above the balanced job's own spread; the syncs do not
    noise = _noise_ms(BALANCED)
    slow = {run.name: _measured_saving_ms(run) for run in SLOWED}
    assert {k for k, v in slow.items() if v > noise} == {"gloo1_rank1_delay20", "gloo1_rank1_copy", "gloo1_rank1_kernels"}
    assert slow["gloo1_rank1_syncs"] < noise


@pytest.mark.parametrize("run", [r for r in SLOWED if "syncs" not in r.name], ids=lambda p: p.name)
def test_straggler_and_cause(run: Path) -> None:
    argv = _argv(run)
    cls, mech = CAUSES[argv[argv.index("--cause") + 1]]
    strag = _job(run)["nccl"]["straggler"]
    assert strag["rank"] == 1
    assert (strag["cause"]["class"], strag["cause"]["mechanism"]) == (cls, mech)


def _job_level(job: dict) -> list[str]:
    return [f["severity"] for f in job["findings"]]


def test_balanced_job_raises_nothing() -> None:
    assert set(_job_level(_job(BALANCED))) <= {"info"}


@pytest.mark.xfail(strict=True, reason="host-side (gloo) collectives are not in the job replay: the rank's extra "
                   "syncs are judged on the profiled wait (the profiler slows its host), not on the unprofiled job")
def test_syncs_that_cost_nothing_unprofiled_raise_nothing() -> None:
    assert set(_job_level(_job(RUNS / "gloo1_rank1_syncs"))) <= {"info"}


@pytest.mark.xfail(strict=True, reason="host-side (gloo) collectives are not in the job replay: the job finding "
                   "prices the traced (profiled) wait, not the unprofiled job's saving")
@pytest.mark.parametrize("run", [r for r in SLOWED if "syncs" not in r.name], ids=lambda p: p.name)
def test_job_saving_matches_the_measured_fix(run: Path) -> None:
    job = _job(run)
    (f,) = [f for f in job["findings"] if f["severity"] != "info" or f["savings_us"]]
    ev = f["evidence"]  # the replayed job saving, else what the other ranks wait per step
    per_step_ms = ev.get("job_saving_us_per_step", ev["exposed_wait_per_step_us"]) / 1000
    assert per_step_ms == pytest.approx(_measured_saving_ms(run), rel=0.25)
