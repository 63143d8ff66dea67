"""traceview.layer_detail: a selected layer's kernels, ops and findings agree with the `layers` section."""

from __future__ import annotations

import pytest
from conftest import SAMPLES, load

from traceview.layer_detail import layer_detail
from traceview.options import Options
from traceview.report import analyze

MODULES = "gpu_h200/train_tinygpt_modules.json.gz"


@pytest.mark.parametrize("step", [None, 2])
def test_every_layer_matches_the_section(step: int | None) -> None:
    t = analyze([SAMPLES / MODULES], Options(step=step)).to_dict()["traces"][0]
    rows = t["layers"]["layers"]
    assert len(rows) == 39
    for r in rows:
        d = layer_detail(load(MODULES), r["layer"], step=step, findings=t["findings"])
        assert d["gpu_us"] == pytest.approx(r["gpu_us"], abs=0.002), r["layer"]
        assert d["kernel_count"] == r["kernels"], r["layer"]
        assert sum(k["count"] for k in d["kernels"]) <= r["kernels"]
        assert {f["code"] for f in d["findings"]} <= set(r["finding_codes"]) | {None}


def test_attention_layer() -> None:
    t = analyze([SAMPLES / MODULES]).to_dict()["traces"][0]
    d = layer_detail(load(MODULES), "TinyGPT_0/Block_0/MultiheadAttention_0", findings=t["findings"])
    assert (d["gpu_us"], d["kernel_count"]) == (3369.496, 120)
    assert d["ops"][0]["op"] == "aten::mm" and d["ops"][0]["kernels"] == 24
    # its FP32 GEMMs and the launch gaps placed in it, in the document's order (what to fix first leads)
    assert sorted(f["code"] for f in d["findings"]) == ["TV101", "TV202"]
    order = [f["code"] for f in t["findings"] if f["layer"] == "TinyGPT_0/Block_0/MultiheadAttention_0"]
    assert [f["code"] for f in d["findings"]] == order
    assert layer_detail(load(MODULES), "TinyGPT_0/Block_1", findings=t["findings"])["findings"] == []
