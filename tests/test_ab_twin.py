"""collectors/examples/ab_twin.py under `traceview collect` on a tiny CPU job: the problem's first run is the only
one captured (one trace, exactly the active steps), later runs are not profiled, and the result (rounds in ABBA
order, the saving as the median of the rounds' differences) is written next to the trace for tools/ab_labels.py."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from test_collect import collect, load, step_names, traces_of

pytest.importorskip("torch")

SMALL = "--batch 2 --layers 1 --d 32 --heads 2 --seq 8 --vocab 64"


def test_only_the_first_problem_run_is_traced_and_the_result_is_saved(tmp_path: Path) -> None:
    problem, fixed = f"train_syncs {SMALL}", f"train_syncs --deferred {SMALL}"
    r = collect(
        tmp_path, "ab", ["--wait", "2", "--warmup", "1", "--active", "2"],
        [sys.executable, "-m", "collectors.examples.ab_twin", "--rounds", "2", "--steps", "4", "--trace-steps", "7",
         problem, fixed],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = tmp_path / "ab"
    traces = traces_of(run, 0)
    assert len(traces) == 1  # the later runs (4 of them) were not profiled
    assert step_names(load(traces[0])) == ["ProfilerStep#3", "ProfilerStep#4"]
    man = json.loads((run / "manifest.json").read_text())
    assert man["ranks"][0]["steps_seen"] <= 7  # the collector followed the first run's optimizer only
    ab = json.loads((run / "ab_result.json").read_text())
    line = next(x for x in r.stdout.splitlines() if x.startswith("AB_RESULT "))
    assert json.loads(line.removeprefix("AB_RESULT ")) == ab
    assert (ab["problem"], ab["fixed"], ab["rounds"]) == (problem, fixed, 2)
    # each run printed its step times: 1 traced + 2 rounds x 2 sides, in the order traced, B A, A B
    runs = [json.loads(x.removeprefix("STEP_TIME ")) for x in r.stdout.splitlines() if x.startswith("STEP_TIME ")]
    assert [x["name"] for x in runs] == ["train_syncs_item", "train_syncs_deferred", "train_syncs_item",
                                         "train_syncs_item", "train_syncs_deferred"]  # fmt: skip
    assert [x["steps"] for x in runs] == [6, 3, 3, 3, 3]  # each run's first step left out
    med = {k: [statistics.median(x["step_ms"]) for x in runs[1:] if x["name"] == k] for k in
           ("train_syncs_item", "train_syncs_deferred")}  # fmt: skip
    diffs = [a - b for a, b in zip(med["train_syncs_item"], med["train_syncs_deferred"], strict=True)]
    assert ab["per_round_saving_ms"] == [round(d, 3) for d in diffs]
    assert ab["saving_ms"] == pytest.approx(statistics.median(diffs), abs=1e-3)


def test_ddp_accumulation_rounds_on_the_traced_model(tmp_path: Path) -> None:
    """collectors/examples/ddp_accum.py --ab-rounds under `traceview collect` (gloo, one CPU rank): the loop the
    collector traced, then ABBA rounds of all-reduce vs no_sync() on the same DDP model, written next to the trace."""
    small = ["--backend", "gloo", "--layers", "1", "--dim", "32", "--seq", "8", "--batch", "2", "--accum", "2"]
    r = collect(
        tmp_path, "ddp", ["--wait", "1", "--warmup", "1", "--active", "1"],
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m",
         "collectors.examples.ddp_accum", *small, "--steps", "4", "--ab-rounds", "2", "--ab-steps", "2"],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = tmp_path / "ddp"
    assert len(traces_of(run, 0)) == 1
    ab = json.loads((run / "ab_result.json").read_text())
    assert ab["problem"].startswith("ddp_accum ") and "--no-sync" not in ab["problem"]
    assert ab["fixed"].endswith(" --no-sync") and ab["rounds"] == 2 and len(ab["traced_run_step_ms"]) == 3
    # each side of a round: its median over --ab-steps timed steps, after one left out (fixed first, then ABBA)
    sides = [json.loads(x.removeprefix("STEP_TIME ")) for x in r.stdout.splitlines() if x.startswith("STEP_TIME ")]
    sides = [x for x in sides if x["name"].startswith("ab_")]
    assert [x["name"] for x in sides] == ["ab_fixed", "ab_problem", "ab_problem", "ab_fixed"]
    assert all(x["steps"] == 2 for x in sides)
    med = [statistics.median(x["step_ms"]) for x in sides]
    diffs = [med[1] - med[0], med[2] - med[3]]  # (from step times printed to 3 decimals)
    assert ab["per_round_saving_ms"] == pytest.approx(diffs, abs=2e-3)
    assert ab["saving_ms"] == pytest.approx(statistics.median(diffs), abs=2e-3)
