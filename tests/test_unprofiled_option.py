"""`--unprofiled-ms`: the step the user measured without the profiler anchors the profiler's cost and every saving.

Ground truth from the bundled twins: sample_traces/ab_traced's labels hold the problem's median step in the ABBA
rounds (CUDA events, no profiler) and the saving its fix measured there; the collector's own wait steps of the same
process (the manifest) ran at another host speed (tools/predictions.py, "anchored to the rounds").
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import SAMPLES, ab_twins

from traceview import report
from traceview.errors import TraceError
from traceview.options import Options

BERT = SAMPLES / "ab_traced/bert_eager_attn_s512"
TINY = SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz"


def _label(name: str) -> dict:
    return ab_twins()[name]


def _entry(path, ms: float | None) -> dict:
    return report.analyze([str(path)], Options(unprofiled_ms=ms)).to_dict()["traces"][0]


def _saving(entry: dict, rule: str) -> float:
    return next(f["savings_us"] for f in entry["projection"]["fixes"] if f["rule"] == rule)


def test_the_users_step_wins_over_the_collectors():
    """The rounds measured the problem at 44.0 ms where the collector's wait steps of the same process took 49.7:
    given the rounds' step, the replay is solved to it (within the 5 % the report tolerates) and says so; the
    attention fix's saving is priced on the faster host, nearer the saving those rounds measured."""
    lab = _label("bert_eager_attn_s512")
    plain, anchored = _entry(BERT, None), _entry(BERT, lab["problem_step_ms"])
    assert plain["profiling"]["method"] == "cuda_event"
    assert plain["projection"]["unprofiled_source"] == "measured"
    assert plain["projection"]["replayed_unprofiled_step_us"] == pytest.approx(
        plain["profiling"]["unprofiled_step_ms"] * 1000, rel=0.01)
    prof, proj = anchored["profiling"], anchored["projection"]
    assert prof["method"] == "user" and prof["unprofiled_step_ms"] == pytest.approx(lab["problem_step_ms"])
    assert prof["command"] == plain["profiling"]["command"] and prof["command"]  # the collector's run, still named
    assert prof["overhead_pct"] == pytest.approx(100 * (prof["traced_step_ms"] / lab["problem_step_ms"] - 1), abs=0.1)
    assert proj["unprofiled_source"] == "user"
    assert proj["replayed_unprofiled_step_us"] == pytest.approx(lab["problem_step_ms"] * 1000, rel=0.05)
    assert not any("--unprofiled-ms" in w for w in anchored["warnings"])
    measured = lab["measured_fix_saving_ms"] * 1000
    a, p = _saving(anchored, "materialized-attention"), _saving(plain, "materialized-attention")
    assert abs(a - measured) < abs(p - measured)
    # every number that prices the fix reads the same anchor: the finding's saving is the projection's
    f = next(f for f in anchored["findings"] if f["rule"] == "materialized-attention")
    assert f["savings_us"] == pytest.approx(a, abs=0.01)
    assert "--unprofiled-ms" in prof["note"]


def test_a_step_the_replay_cannot_reach_is_said():
    """A step longer than the traced one (the profiler never makes a step faster), or shorter than the trace's
    device work: a warning says where the replay got to, and the savings are priced there."""
    traced = _entry(TINY, None)["profiling"]["traced_step_ms"]
    slow = _entry(TINY, traced * 10)
    assert any(w.startswith(f"--unprofiled-ms {traced * 10:g}: more than the traced step") for w in slow["warnings"])
    assert slow["projection"]["replayed_unprofiled_step_us"] == pytest.approx(traced * 1000, rel=0.01)
    busy = slow["profiling"]["gpu_busy_per_step_us"] / 1000
    fast = _entry(TINY, busy / 10)
    assert any("less than the trace's device work" in w for w in fast["warnings"])
    assert fast["projection"]["replayed_unprofiled_step_us"] / 1000 >= busy


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_bad_step_is_refused(bad):
    with pytest.raises(TraceError, match="--unprofiled-ms"):
        Options.build(unprofiled_ms=bad)
    with pytest.raises(TraceError, match="--unprofiled-ms"):  # the Python API's own Options too
        Options(unprofiled_ms=bad)


def test_cli_flag_and_bad_value():
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(TINY), "--unprofiled-ms", "-2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--unprofiled-ms" in r.stderr
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(TINY), "--format", "json",
                        "--unprofiled-ms", "3.1749"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["traces"][0]
    assert t["profiling"]["method"] == "user" and t["projection"]["unprofiled_source"] == "user"
    assert t["projection"]["replayed_unprofiled_step_us"] == pytest.approx(3174.9, rel=0.05)


def test_every_rank_of_a_job_keeps_the_users_step():
    """A job folder: each rank's profiling section is rebuilt from the job's replay, and still says the step the
    user measured (2 x H200 DDP, 38.98 / 38.71 ms measured by the collector; the user's 38 ms wins)."""
    doc = report.analyze([str(SAMPLES / "nccl_h200x2/ddp_balanced")], Options(unprofiled_ms=38.0)).to_dict()
    assert len(doc["traces"]) == 2 and doc["jobs"]
    for t in doc["traces"]:
        assert t["profiling"]["method"] == "user" and t["profiling"]["unprofiled_step_ms"] == 38.0
        assert t["profiling"]["model"]["method"] == "job_replay"
        assert t["projection"]["unprofiled_source"] == "user"
        assert t["projection"]["replayed_unprofiled_step_us"] == pytest.approx(38000, rel=0.05)
