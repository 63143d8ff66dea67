import pytest
import rulekit as k

NW0 = "kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NW4 = "kineto_resnet50/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"


def test_tinygpt_input_bound():
    c, f, _ = k.run("gpu_h200/train_tinygpt_input_bound.json.gz", "TV401")
    assert c["dominant"] == "input" and c["shares"]["input"] > 50
    (x,) = f
    assert x["severity"] == "error" and x["count"] == 3 and x["steps"] == [1, 2, 3]
    # ~40 ms of Dataset CPU work per batch (labels.json)
    assert 35_000 < x["cost_us"] / 3 < 50_000


def test_kineto_nw0_matches_tb_plugin():
    _, f, _ = k.run(NW0, "TV401")
    (x,) = f
    assert x["evidence"]["dataloader_pct"] == pytest.approx(33.4, abs=0.1)  # tb_plugin's own number
    assert x["evidence"]["op"] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert x["count"] == 6


def test_kineto_nw4_not_input_bound():
    c, f, _ = k.run(NW4, "TV401")
    assert f == [] and c["shares"]["input"] < 5  # tb_plugin: DataLoader 0.8 %


def test_real_resnet_dataloader_nw0():
    c, f, _ = k.run("gpu_h200_real/tv_resnet50_train_dataloader_nw0.json.gz", "TV401")
    assert c["dominant"] == "input" and c["shares"]["input"] > 80
    assert f and f[0]["severity"] == "error"
