import pytest
import rulekit as k


@pytest.mark.parametrize("rel", ["kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                                 "kineto_resnet50/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"])
def test_kineto_pageable_h2d(rel):
    _, f, _ = k.run(rel, "TV301")
    (x,) = f
    ev = x["evidence"]
    # SOURCES.md: a 19,267,584-byte Memcpy HtoD (Pageable -> Device) per step (the 32x3x224x224 fp32 images)
    # plus the 256-byte labels (32 int64), 6 steps
    assert ev["memcpy"] == "Memcpy HtoD (Pageable -> Device)" and ev["direction"] == "HtoD"
    assert x["count"] == 12 and ev["bytes"] == 6 * (19_267_584 + 32 * 8)
    assert ev["worst"]["bytes"] == 19_267_584
    assert 0 < x["savings_us"] <= x["cost_us"]


def test_no_pageable_copy_in_gemm():
    assert k.findings("gpu_h200/compute_bound_gemm.json.gz", "TV301") == []
