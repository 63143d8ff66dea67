import importlib.util

import pytest
import rulekit as k
from jobkit import job_nccl

import traceview


def test_world1_no_nccl_wait():
    t = k.trace("gpu_h200/nccl_world1_allreduce.json.gz")
    assert t.gpu.filter(t.gpu["kind"] == "comm").height == 0
    assert k.findings("gpu_h200/nccl_world1_allreduce.json.gz", "TV501") == []


def test_exposed_communication_reported():
    c, f, _ = k.run("hta/nccl_parser_config/nccl_data.json.gz", "TV501")
    (x,) = f
    ev = x["evidence"]
    assert x["count"] == 21 and ev["kernels"] == 21  # 15 AllReduce + 6 Broadcast
    assert ev["exposed_us"] == pytest.approx(c["time_us"]["communication"], abs=0.01)
    assert 0 < ev["exposed_us"] < ev["nccl_kernel_us"]
    assert x["severity"] == "warning" and 3 <= x["savings_pct"] < 15


def _job():
    return traceview.load(k.SAMPLES / "hta/trace_filter")


def test_straggler_rank_1():
    job = _job()
    section, found = job_nccl(job)
    assert section["collectives"] == 10 and section["method"].startswith("order")
    assert section["straggler"]["rank"] == 1 and section["straggler"]["times_last"] == 8
    ranks = {r["rank"]: r for r in section["ranks"]}
    assert ranks[1]["total_wait_us"] < ranks[0]["total_wait_us"]
    (f,) = found
    assert f.rule == "nccl-wait" and f.evidence["straggler"] == 1


def test_straggler_agrees_with_hta():
    if importlib.util.find_spec("hta") is None:
        pytest.skip("hta (PyPI: traceinsight) is not installed")
    from hta_ref import _quiet

    with _quiet():
        from hta.trace_analysis import TraceAnalysis

        got = TraceAnalysis(trace_dir=str(k.SAMPLES / "hta/trace_filter")).get_potential_stragglers(num_candidates=1)
    section, _ = job_nccl(_job())
    assert got == [section["straggler"]["rank"]] == [1]
