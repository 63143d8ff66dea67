"""The classifier: every instant of each step gets exactly one class; verdicts on the labelled traces."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import SAMPLES, load

from traceview.analyses import classify, specs, timeline

LABELS = json.loads((SAMPLES / "gpu_h200/labels.json").read_text())


@pytest.mark.parametrize("rel", ["gpu_h200/sync_item_nonzero_cpu.json.gz", "gpu_h200/train_tinygpt_input_bound.json.gz",
                                 "hta/nccl_parser_config/nccl_data.json.gz"])
def test_partition_tiles_every_step(rel):
    t = load(rel)
    part = classify.partition(t, t.steps)
    assert set(part["cls"].unique()) <= set(classify.CLASSES)
    got = part.group_by("step").agg((pl.col("end") - pl.col("ts")).sum().alias("d"), pl.col("ts").min(),
                                    pl.col("end").max()).sort("step")
    want = t.steps.select("step", (pl.col("end") - pl.col("ts")).alias("d"), "ts", "end").sort("step")
    assert got.equals(want)  # segments cover each window exactly, no overlap (sum == length, same bounds)
    s = part.sort("ts")
    assert (s["ts"].shift(-1).drop_nulls() >= s["end"].head(s.height - 1)).all()


@pytest.mark.parametrize("name,dominant", [
    ("launch_bound_tiny_ops", "cpu_launch"), ("seed_relu_linear_m8", "cpu_launch"),
    ("compute_bound_gemm", "gpu_compute"), ("elementwise_chain_eager", "gpu_memory"),
    ("sync_item_nonzero_cpu", "host_sync"), ("train_tinygpt_input_bound", "input"),
    ("nccl_world1_allreduce", "gpu_compute"), ("seed_single_gemm_eager", "gpu_compute"),
])
def test_verdicts_match_labels(name, dominant):
    t = load(f"gpu_h200/{name}.json.gz")
    c = classify.classification(t, t.steps)
    assert c["dominant"] == dominant, (LABELS[name]["dominant"], c["shares"])
    assert sum(c["shares"].values()) == pytest.approx(100, abs=0.05)
    assert [s["step"] for s in c["steps"]] == [1, 2, 3]


def test_gemm_share_matches_busy():
    # README: compute_bound_gemm GPU busy 96.4 % of the active-step span, which starts with the wait for GEMMs
    # queued before the recording; the step periods leave that out, so the back-to-back GEMMs fill them
    t = load("gpu_h200/compute_bound_gemm.json.gz")
    c = classify.classification(t, t.steps)
    busy = timeline.busy_per_window(t.gpu, t.steps)["busy"].sum()
    assert c["shares"]["gpu_compute"] == pytest.approx(100 * busy / (t.steps["end"] - t.steps["ts"]).sum(), abs=0.2)
    assert c["shares"]["gpu_compute"] > 99
    tb = t.steps.select(ts="tb_ts", end="tb_end", step="step")
    tb_busy = timeline.busy_per_window(t.gpu, tb)["busy"].sum()
    assert 100 * tb_busy / (tb["end"] - tb["ts"]).sum() == pytest.approx(96.4, abs=1.0)  # the README's span
    assert all(s["dominant"] == "gpu_compute" for s in c["steps"])


def test_real_resnet_input_dominant():
    t = load("gpu_h200_real/tv_resnet50_train_dataloader_nw0.json.gz")
    c = classify.classification(t, t.steps)
    assert c["dominant"] == "input" and c["shares"]["input"] > 80  # labels: GPU busy ~5 %


def test_kineto_input_share_equals_tb_plugin_dataloader():
    t = load("kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    # over tb_plugin's own step windows the input share is the plugin's DataLoader share
    tb = t.steps.with_columns(ts=pl.col("tb_ts"), end=pl.col("tb_end"))
    assert classify.classification(t, tb)["shares"]["input"] == pytest.approx(33.4, abs=0.2)  # tb_plugin 33.4 %
    # over the step periods the first step keeps only the idle the other steps open with, so slightly less
    c = classify.classification(t, t.steps)
    assert 31.0 < c["shares"]["input"] < 33.4


def test_roofline_bounds():
    gemm = classify.kernel_bound(load("gpu_h200/compute_bound_gemm.json.gz"))
    mm = gemm.filter(pl.col("op_name") == "aten::mm")
    assert mm.height == 12 and (mm["bound"] == "compute").all() and (mm["source"] == "shapes").all()
    # 8192^3 bf16 GEMM: 2*8192^3 FLOPs per kernel; 4 per step (labels: 4.398e12 FLOP per step)
    assert mm["flops"].sum() / 3 == pytest.approx(LABELS["compute_bound_gemm"]["flops_per_step"], rel=1e-9)
    m8 = classify.kernel_bound(load("gpu_h200/seed_relu_linear_m8.json.gz"))
    assert (m8.filter(pl.col("op_name") == "aten::mm")["bound"] == "memory").all()  # M = 8: weight-read bound
    no_op = gemm.filter(pl.col("op").is_null())
    assert (no_op["source"] == "name").all()  # kernel-name fallback


def test_conv_flops_use_stride_and_padding():
    """ResNet-50 forward conv FLOPs from the trace's shapes + Concrete Inputs (stride, padding, dilation) equal
    torchvision's published cost of the model: 4.089 GMACs per 224x224 image (ResNet50_Weights.IMAGENET1K_V1
    `_ops`, which also counts the 2048x1000 classifier: 2.048 MMACs), i.e. 2 FLOPs per MAC."""
    from traceview.analyses import roofline

    t = load("gpu_h200_real/tv_resnet50_train_dataloader_nw0.json.gz")
    costs = roofline.op_costs(t)
    fwd = costs.filter(pl.col("op_name") == "aten::cudnn_convolution")
    nsteps, batch = t.steps.height, 64  # Input Dims of the stem conv: [64, 3, 224, 224]
    assert fwd.height == 53 * nsteps and (fwd["category"] == "conv").all()
    per_image = fwd["flops"].sum() / nsteps / batch
    assert per_image == pytest.approx(2 * (4.089e9 - 2.048e6), rel=2e-3)
    # the old stride-1 "same" approximation (no Concrete Inputs) overcounts the strided convs by ~57 %
    dims = t.host.filter(pl.col("name") == "aten::cudnn_convolution").select("input_dims", "input_type")
    same = sum(roofline.op_cost("aten::cudnn_convolution", json.loads(d), json.loads(ty))[1] for d, ty in dims.rows())
    assert same / nsteps / batch > 1.5 * per_image


def test_spec_table():
    assert specs.lookup({"name": "NVIDIA H200"}).hbm_tbps == 4.8
    assert specs.lookup({"name": "NVIDIA A100-SXM4-80GB"}).name == "A100 80GB"
    assert specs.lookup({"name": "Tesla V100-DGXS-32GB"}).name == "V100"
    assert specs.lookup({"name": "AMD Radeon Graphics", "numSms": 104}).name.startswith("MI250")
    assert specs.lookup({"name": "AMD Instinct MI300X"}).name == "MI300X"
    unknown = specs.lookup({"name": "Mystery GPU"})
    assert not unknown.known and "assumed A100" in unknown.name
