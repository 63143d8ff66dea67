"""The committed GPU sample runs (sample_traces/collected) are complete and consistent with their manifests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "sample_traces" / "collected"
LABELS = json.loads((ROOT / "labels.json").read_text())
RUNS = sorted(p.name for p in ROOT.iterdir() if p.is_dir())


def test_every_run_is_labelled() -> None:
    assert RUNS == sorted(LABELS)
    assert sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file()) < 4_000_000  # "a few MB"


@pytest.mark.parametrize("run", RUNS)
def test_run_folder(run: str) -> None:
    folder = ROOT / run
    man = json.loads((folder / "manifest.json").read_text())
    assert man["manifest_version"] == 1 and man["exit_code"] == 0 and man["gpu_name"] == "NVIDIA H200"
    assert man["options"]["activities"] == ["cpu", "cuda"]
    (entry,) = man["traces"]
    with gzip.open(folder / entry["file"], "rt") as f:
        trace = json.load(f)
    steps = {
        e["name"]
        for e in trace["traceEvents"]
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    }
    first, last = entry["first_step"], entry["last_step"]
    assert steps == {f"ProfilerStep#{i}" for i in range(first, last + 1)}
    assert len(steps) == man["schedule"]["active"] == LABELS[run]["active_steps"]
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
    has_modules = any(e.get("name", "").startswith("module::") for e in trace["traceEvents"])
    assert has_modules == man["options"]["modules"]
    assert man["step_time"]["unprofiled_ms_median"] > 0 and man["step_time"]["profiled_ms_median"] > 0
