"""tools/fit_overhead.py: the committed profiler model (analyses.overhead.HOST_SHARE and COST_US) is the fit's
optimum on the calibration runs of tools/overhead_split.json — no single grid step of one parameter lowers the
fitting loss — and the split keeps calibration and held-out runs apart."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import ROOT

from traceview.analyses import overhead

spec = importlib.util.spec_from_file_location("fit_overhead", ROOT / "tools/fit_overhead.py")
fit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fit)


@pytest.fixture(scope="module")
def cal() -> list[dict]:
    return [r for r in fit.runs() if r["group"] == "calibration"]


def test_split_is_disjoint_and_complete(cal):
    assert {r["run"] for r in cal} == set(fit.SPLIT["calibration"])  # every calibration run has a manifest and steps
    assert not any(r["run"].startswith(fit.SPLIT["held_out"] + "/") for r in cal)


def test_committed_costs_are_the_fit(cal):
    committed = {**overhead.COST_US, "host_share": overhead.HOST_SHARE}
    assert committed == fit.COMMITTED
    best = fit.loss(cal, committed)
    for k, grid in fit.GRID.items():
        step = float(grid[1] - grid[0])
        for v in (committed[k] - step, committed[k] + step):
            if grid.min() - 1e-9 <= v <= grid.max() + 1e-9:
                assert fit.loss(cal, {**committed, k: v}) >= best - 1e-9, (k, v)
    # the fitted model beats doing nothing (the traced step as the guess) on the calibration runs
    t = fit.table(cal, committed)["calibration"]
    assert t["median"] < 0.1 < t["baseline_median"]
