import polars as pl
import pytest
import rulekit as k

from traceview.options import Options
from traceview.ruleapi import RuleContext
from traceview.sections.findings import run_rules
from traceview.sections.memory import memory_section

TINY = "gpu_h200/train_tinygpt_modules.json.gz"  # recorded with profile_memory=True
GIB = 2**30


def _run(rel: str, **opts) -> list[dict]:
    t = k.trace(rel)
    ctx, _ = RuleContext.prepare(t, t.steps)
    return run_rules(ctx, Options(codes=("TV302",), rule_options={"memory-pressure": opts}))[0]


def test_memory_section_reads_the_memory_events():
    t = k.trace(TINY)
    m = memory_section(t, t.steps)
    (d,) = m["devices"]
    # independent: the CUDA events' own totals inside the steps' host spans, and deviceProperties
    ev = t.memory.filter(pl.col("device_type") == 1)
    inside = pl.any_horizontal([ev["ts"].is_between(s["cpu_ts"], s["cpu_end"] - 1) for s in t.steps.iter_rows(named=True)])
    ev = ev.filter(inside)
    assert d["peak_allocated_gib"] == round(int(ev["total_allocated"].max()) / GIB, 3) == 1.801
    assert d["peak_reserved_gib"] == round(int(ev["total_reserved"].max()) / GIB, 3)
    assert d["capacity_gib"] == round(t.meta.device_properties[0]["totalGlobalMem"] / GIB, 3)
    assert [s["allocs"] for s in d["steps"]] == [344, 344, 344]
    assert sum(s["allocs"] + s["frees"] for s in d["steps"]) == ev.height
    # the timeline keeps the peak and has at most 50 points per step
    assert max(d["timeline"]["allocated_gib"]) == d["peak_allocated_gib"] and len(d["timeline"]["ts_us"]) <= 150
    assert m["peak"]["op"] == "aten::_log_softmax_backward_data"


def test_silent_on_a_small_model():
    assert _run(TINY) == []


def test_fires_at_its_threshold():
    # the same real trace judged against a lower threshold: 2.07 GiB reserved is 1.48 % of the H200 (fragmentation
    # and the allocator's driver calls are TV303 allocator-churn's, tests/test_rules_allocator_loader_ddp.py)
    (f,) = _run(TINY, near_capacity_pct=1.0)
    ev = f["evidence"]
    assert ev["cases"] == ["near_capacity"] and f["savings_us"] == 0
    assert ev["devices"][0]["peak_pct_of_capacity"] == pytest.approx(1.48, abs=0.01)
    assert "checkpoint" in f["fix"]
    assert _run(TINY, near_capacity_pct=1.5) == []


def test_old_traces_without_reserved_totals():
    t = k.trace("kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    (d,) = memory_section(t, t.steps)["devices"]
    assert d["peak_reserved_gib"] is None and d["peak_allocated_gib"] > 0
    assert _run("kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz") == []


PRESSURE = "gpu_h200_memory/memory_pressure_empty_cache.json.gz"  # 90 % held + empty_cache() every step


def test_fires_near_capacity():
    (f,) = _run(PRESSURE)
    ev = f["evidence"]
    # a risk, not a measured cost: no saving, info (the driver calls are TV303 allocator-churn's finding)
    assert ev["cases"] == ["near_capacity"] and f["severity"] == "info" and f["savings_us"] == 0
    t = k.trace(PRESSURE)
    # independent: the allocator's own totals and deviceProperties; make_trace.py printed max reserved 126.13 GiB
    cap = t.meta.device_properties[0]["totalGlobalMem"]
    (d,) = ev["devices"]
    assert d["peak_reserved_gib"] == pytest.approx(126.13, abs=0.01)
    assert d["peak_pct_of_capacity"] == pytest.approx(100 * 126.13 * GIB / cap, abs=0.05)
    assert "checkpoint" in f["fix"]
