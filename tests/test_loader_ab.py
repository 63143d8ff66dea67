"""collectors/examples/loader_ab.py under `traceview collect` on a tiny CPU job: both loaders live for the whole
process, only the problem's first steps are captured, the rounds alternate in ABBA order after each side's
settle steps, and a side's step is the mean of its timed steps (a loader short of workers delivers in bursts)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from test_collect import collect, load, step_names, traces_of

pytest.importorskip("torch")


def test_rounds_alternate_on_long_lived_loaders_and_the_result_is_saved(tmp_path: Path) -> None:
    r = collect(
        tmp_path, "lab", ["--wait", "2", "--warmup", "1", "--active", "2"],
        [sys.executable, "-m", "collectors.examples.loader_ab", "--workers-a", "1", "--workers-b", "2",
         "--d", "16", "--batch", "2", "--cpu-ms", "0.1", "--rounds", "2", "--steps", "4", "--trace-steps", "7"],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = tmp_path / "lab"
    traces = traces_of(run, 0)
    assert len(traces) == 1
    assert step_names(load(traces[0])) == ["ProfilerStep#3", "ProfilerStep#4"]
    ab = json.loads((run / "ab_result.json").read_text())
    line = next(x for x in r.stdout.splitlines() if x.startswith("AB_RESULT "))
    assert json.loads(line.removeprefix("AB_RESULT ")) == ab
    assert (ab["problem"], ab["fixed"]) == ("input_workers --workers 1 --cpu-ms 0.1", "input_workers --workers 2 --cpu-ms 0.1")
    assert ab["settle_steps"] == {"problem": 24, "fixed": 24}
    runs = [json.loads(x.removeprefix("STEP_TIME ")) for x in r.stdout.splitlines() if x.startswith("STEP_TIME ")]
    assert [x["name"] for x in runs] == ["traced", "fixed", "problem", "problem", "fixed"]
    assert [x["steps"] for x in runs] == [7, 4, 4, 4, 4]  # every timed step kept (the settle steps are untimed)
    mean = {k: [statistics.fmean(x["step_ms"]) for x in runs[1:] if x["name"] == k] for k in ("problem", "fixed")}
    diffs = [a - b for a, b in zip(mean["problem"], mean["fixed"], strict=True)]
    assert ab["per_round_saving_ms"] == pytest.approx([round(d, 3) for d in diffs], abs=2e-3)
    assert ab["saving_ms"] == pytest.approx(statistics.median(diffs), abs=2e-3)
