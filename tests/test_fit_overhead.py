"""tools/fit_overhead.py: the committed profiler costs (analyses.overhead.COST_US) are the fit's optimum on the
calibration runs of tools/overhead_split.json — no single grid step of one cost lowers the fitting loss — and the
split keeps calibration and evaluation runs apart."""

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


def test_committed_costs_are_the_fit(cal):
    best = fit.loss(cal, overhead.COST_US)
    for k, grid in fit.GRID.items():
        step = float(grid[1] - grid[0])
        for v in (overhead.COST_US[k] - step, overhead.COST_US[k] + step):
            if grid.min() <= v <= grid.max():
                assert fit.loss(cal, {**overhead.COST_US, k: v}) >= best - 1e-9, (k, v)
    # the fitted model beats doing nothing (the traced step as the guess) on the calibration runs
    t = fit.table(cal, overhead.COST_US)["calibration"]
    assert t["median"] < 0.1 < t["baseline_median"]
