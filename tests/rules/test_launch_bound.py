import json

import pytest
import rulekit as k

LABELS = json.loads((k.SAMPLES / "gpu_h200/labels.json").read_text())


@pytest.mark.parametrize("name", ["launch_bound_tiny_ops", "seed_relu_linear_m8"])
def test_cpu_launch_dominant_and_finding(name):
    assert LABELS[name]["dominant"] == "cpu_launch_bound"
    c, f, _ = k.run(f"gpu_h200/{name}.json.gz", "TV101")
    assert c["dominant"] == "cpu_launch" and c["shares"]["cpu_launch"] > 85
    (x,) = f
    assert x["rule"] == "launch-bound" and x["severity"] == "error" and x["steps"] == [1, 2, 3]
    ev = x["evidence"]
    # the diagnosis: kernels far shorter than the CPU time of the ops that launch them
    assert ev["median_kernel_us"] * 4 < ev["median_launching_op_cpu_us"]
    # the cost is the classifier's cpu_launch time; the savings leave out the profiler's own cost (estimated
    # from the recorded events: analyses.overhead), which the unprofiled run does not pay
    assert x["cost_us"] == pytest.approx(c["time_us"]["cpu_launch"], abs=0.01)
    prof = ev["profiler"]
    assert prof["source"] == "estimate" and prof["overhead_per_step_us"] > 0
    want = x["cost_us"] - 3 * prof["overhead_per_step_us"]
    assert x["savings_us"] == pytest.approx(want, rel=0.01) and x["savings_us"] < x["cost_us"]


def test_tiny_ops_numbers():
    _, f, _ = k.run("gpu_h200/launch_bound_tiny_ops.json.gz", "TV101")
    ev = f[0]["evidence"]
    # 60 x (add, relu, mul, mm) per step = 240 kernels, 3 steps; every op kind follows a late gap 180 times
    assert ev["kernels"] == 720
    assert {o["op"]: o["count"] for o in ev["ops_after_late_gaps"]} == {
        "aten::add": 180, "aten::clamp_min": 180, "aten::mm": 180, "aten::mul": 180}
    assert 700 <= f[0]["count"] <= 722
    assert 11000 < f[0]["cost_us"] < 12500  # ~92 % of the 12.9 ms analysed window


def test_compute_bound_gemm_not_launch_bound():
    c, f, _ = k.run("gpu_h200/compute_bound_gemm.json.gz", "TV101")
    assert f == [] and c["shares"]["cpu_launch"] < 3
