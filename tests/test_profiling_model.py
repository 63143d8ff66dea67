"""The profiler-overhead model (analyses.overhead) against the collector's measured step times.

The per-event costs were calibrated on sample_traces/collected2's `calibration` runs (profiled vs unprofiled
CUDA-event step, 10 runs); every other run with a manifest is held out: collected2's twins and labelled runs,
collected/ and each rank of nccl_h200x2/ (44 traces). The estimate must beat the traced step as a guess of the
unprofiled step, and GPU-bound runs must come out within 5 %."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import SAMPLES

from traceview.ingest.manifest import rank_step_times
from traceview.options import Options
from traceview.report import analyze

LABELS2 = json.loads((SAMPLES / "collected2/labels.json").read_text())


def _runs() -> list[tuple[str, Path]]:
    out = []
    # collected3 (recorded later, never fitted on) is scored on its own below
    found = [*SAMPLES.glob("collected*/*/manifest.json"), *SAMPLES.glob("nccl_h200x2/*/manifest.json")]
    for m in sorted(p for p in found if p.parent.parent.name != "collected3"):
        group = LABELS2.get(m.parent.name, {}).get("group") if m.parent.parent.name == "collected2" else None
        for f in sorted(m.parent.glob("*.pt.trace.json.gz")):
            out.append(("calibration" if group == "calibration" else "held-out", f))
    return out


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    out = []
    for group, f in _runs():
        (t,) = analyze([f], Options(codes=("TV101",))).to_dict()["traces"]
        unprof, prof, _ = rank_step_times(
            json.loads((f.parent / "manifest.json").read_text()), f.name, t["rank"]
        )
        p = t["profiling"]
        out.append(
            {
                "group": group,
                "path": f,
                "unprof": unprof * 1000,
                "prof": prof * 1000,
                "est": p["estimated_unprofiled_step_us"],
                "traced": t["summary"]["avg_step_us"],
                "gpu": p["gpu_busy_per_step_us"],
                "findings": t["findings"],
                "dominant": t["classification"]["dominant"],
            }
        )
    return out


def _err(r: dict, key: str) -> float:
    return abs(r[key] / r["unprof"] - 1)


def test_every_collected_trace_is_used(rows):
    assert sum(r["group"] == "calibration" for r in rows) == 10
    assert sum(r["group"] == "held-out" for r in rows) == 44


def test_calibration_error(rows):
    cal = [r for r in rows if r["group"] == "calibration"]
    assert statistics.median(_err(r, "est") for r in cal) < 0.06
    assert statistics.median(_err(r, "traced") for r in cal) > 0.5  # what the model corrects: +69 % median


def test_held_out_error(rows):
    held = [r for r in rows if r["group"] == "held-out"]
    est = sorted(_err(r, "est") for r in held)
    raw = sorted(_err(r, "traced") for r in held)
    p90 = int(0.9 * len(held))
    assert statistics.median(est) < 0.10  # 5.4 % with the replay (6.7 % with the linear model it replaced)
    assert est[p90] < raw[p90]  # 68 % vs 97 % for the traced step


@pytest.mark.xfail(strict=True, reason="the replayed estimate's 90th-percentile error on the held-out runs is 68 % "
                                       "(the linear model it replaced: 54 %): a constant cost per recorded event "
                                       "misses compiled, CUDA-graph and tiny-op steps (docs/replay.md)")
def test_held_out_p90_error(rows):
    held = [r for r in rows if r["group"] == "held-out"]
    est = sorted(_err(r, "est") for r in held)
    raw = sorted(_err(r, "traced") for r in held)
    p90 = int(0.9 * len(held))
    assert est[p90] < 0.6 and est[p90] < raw[p90] * 0.7


def test_gpu_bound_runs_estimated_within_5_pct(rows):
    # GPU-bound runs (GPU busy >= 80 % of the traced step, the profiler added < 5 %): the GPU hides the host, and
    # the estimate keeps the step — no phantom saving
    gpu_bound = [r for r in rows if r["prof"] < 1.05 * r["unprof"] and r["gpu"] >= 0.8 * r["traced"]]
    assert len(gpu_bound) >= 12
    bad = {str(r["path"].parent.name): round(_err(r, "est"), 3) for r in gpu_bound if _err(r, "est") > 0.05}
    assert bad == {}


@pytest.mark.parametrize(
    "run", ["tinygpt_b32_stack", "tiny_ops_n64_reduce_overhead", "gemm_bf16_n4096", "tinygpt_b32"]
)
def test_launch_bound_that_does_not_survive_is_info(rows, run):
    """Runs that are GPU-bound unprofiled (labels) but show launch gaps under the profiler: the launch-bound
    finding is info, with the profiler note, never a warning."""
    assert LABELS2[run]["primary"] != "cpu_launch"
    (r,) = [r for r in rows if r["path"].parent.name == run and r["path"].parent.parent.name == "collected2"]
    lb = [f for f in r["findings"] if f["rule"] == "launch-bound"]
    assert all(f["severity"] == "info" for f in lb), [
        (f["severity"], f["evidence"].get("profiler")) for f in lb
    ]
    for f in lb:
        assert (
            f["evidence"]["profiler"]["source"] == "manifest"
            and "profiler's own cost" in f["evidence"]["profiler"]["note"]
        )


@pytest.mark.xfail(
    strict=True,
    reason="the linear per-event model misses collected3's held-out runs (compiled, "
    "--modules, --stack, real models): median 20 %, worst 71 %; issue 25 replaces it",
)
def test_held_out_collected3_error():
    labels = json.loads((SAMPLES / "collected3/labels.json").read_text())["runs"]
    errs = []
    for name, r in labels.items():
        if r["unprofiled_step_ms"] is None:
            continue
        (t,) = analyze([SAMPLES / "collected3" / name / r["trace"]], Options(codes=("TV101",))).to_dict()[
            "traces"
        ]
        errs.append(
            abs(t["profiling"]["estimated_unprofiled_step_us"] / (r["unprofiled_step_ms"] * 1000) - 1)
        )
    assert statistics.median(errs) <= 0.10 and max(errs) <= 0.30
