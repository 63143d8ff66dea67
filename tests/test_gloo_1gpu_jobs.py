"""Real two-rank DDP jobs with a known straggler cause (sample_traces/gloo_h200_1gpu, recorded on one H200 with
gloo: two ranks share the GPU, `collectors/examples/record_gloo1gpu.sh`).

Ground truth is independent of traceview: the cause is the run's recorded command line (`--cause`), and each job's
unprofiled step is the collector's CUDA-event median per rank (manifest.json); the job's measured cost of the
straggler is its step minus the balanced job's. What traceview must get right on every job whose injected cause
measurably slows it: the straggler rank and the cause's class and mechanism; and a job the cause does not slow
unprofiled (per-block `.item()` syncs on a lightly loaded GPU) and the balanced job raise nothing above info.
"""

from __future__ import annotations

import gzip
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


def test_syncs_that_cost_nothing_unprofiled_raise_nothing() -> None:
    # the job replay joins the ranks at gloo's exchanges and prices rank 1's syncs unprofiled: the job saving of
    # removing them is within the step-to-step noise (measured unprofiled: the syncs cost nothing, −1.1 ms)
    job = _job(RUNS / "gloo1_rank1_syncs")
    assert set(_job_level(job)) <= {"info"}
    assert job["replay"]["collectives"] == 6  # 2 DDP buckets x 3 steps, joined at their exchanges


def _saving_ms(job: dict) -> float:
    (f,) = [f for f in job["findings"] if f["rule"] == "nccl-wait"]
    return f["evidence"]["job_saving_us_per_step"] / 1000  # the replayed job saving, unprofiled


def test_the_job_replay_reproduces_the_unprofiled_job() -> None:
    # each rank's profiler cost off (solved to its measured unprofiled step), the joined replay runs the job's
    # measured unprofiled step (the slowest rank's CUDA-event median), and the recording as it ran when profiled
    for run in [BALANCED, *SLOWED]:
        rep = _job(run)["replay"]
        assert rep["unprofiled_job_step_us"] / 1000 == pytest.approx(_step_ms(run), rel=0.05), run.name
        if "kernels" not in run.name:  # (see the shared-GPU xfail below)
            assert rep["fidelity"]["max_error_pct"] <= 6.0, run.name


def test_delay_job_saving_matches_the_measured_fix() -> None:
    # rank 1's 20 ms busy loop: the replayed unprofiled job saving of removing it against the measured cost
    # (its job step minus the balanced job's, unprofiled CUDA events: 46.9 − 29.9 = 17.0 ms)
    run = RUNS / "gloo1_rank1_delay20"
    assert _saving_ms(_job(run)) == pytest.approx(_measured_saving_ms(run), rel=0.20)


SHARED_GPU = ("both ranks share one GPU: their kernels time-slice it, so the balanced job's kernels run slower "
              "(9.3 and 8.4 ms a step) than those of a job whose straggler holds its rank off the device "
              "(6.2 ms a step in the copy and delay jobs); each rank's replay holds its own kernels' recorded times "
              "and no device shared with the other rank, so the fixed job replays faster than the balanced job runs")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=SHARED_GPU)
@pytest.mark.parametrize("run", [RUNS / "gloo1_rank1_copy", RUNS / "gloo1_rank1_kernels"], ids=lambda p: p.name)
def test_job_saving_matches_the_measured_fix(run: Path) -> None:
    assert _saving_ms(_job(run)) == pytest.approx(_measured_saving_ms(run), rel=0.20)


def _kernel_ms_per_step(run: Path, rank: int) -> float:
    """GPU kernel time per profiled step of one rank, from the raw trace (stdlib json: `kernel` events, over the
    `ProfilerStep#N` annotations counted)."""
    (f,) = run.glob(f"rank{rank}.*.pt.trace.json.gz")
    ev = json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
    steps = {e["name"] for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sum(e.get("dur", 0) for e in ev if e.get("cat") == "kernel") / 1000 / len(steps)


def test_the_shared_gpu_reason_holds() -> None:
    # what the SHARED_GPU xfail says, checked on the traces and the labels: the same kernels take ~1.4x longer a
    # step in the balanced job (the two ranks' kernels share the device) than in the copy job (rank 1 held off it)
    bal = [_kernel_ms_per_step(BALANCED, r) for r in (0, 1)]
    cpy = [_kernel_ms_per_step(RUNS / "gloo1_rank1_copy", r) for r in (0, 1)]
    assert min(bal) > 1.25 * max(cpy), (bal, cpy)
    # and the copy job with its straggler fixed replays well below the balanced job's measured unprofiled step
    fixed_ms = _job(RUNS / "gloo1_rank1_copy")["projection"]["straggler_fixed"]["job_step_us"] / 1000
    assert fixed_ms < _step_ms(BALANCED) - 0.5 * (max(bal) - max(cpy)), fixed_ms
