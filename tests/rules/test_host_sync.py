import rulekit as k

SYNC = "gpu_h200/sync_item_nonzero_cpu.json.gz"


def test_18_syncs_per_step_attributed():
    _, f, _ = k.run(SYNC, "TV102")
    by = {x["evidence"]["cause"]: x for x in f}
    assert set(by) == {".item()", "torch.nonzero", ".cpu() / .tolist() / .numpy()"}
    assert sum(x["count"] for x in f) == 54  # 3 active steps x 18
    for x in f:
        assert x["count"] == 18 and x["evidence"]["syncs_per_step"] == 6.0 and x["steps"] == [1, 2, 3]
        assert x["evidence"]["sync_calls"] == {"cudaStreamSynchronize": 18}
        # source line: nearest python frame outside torch/ (with_stack)
        assert x["evidence"]["source"] == "collect_labelled.py(114): step"
        assert x["cost_us"] > 100
    assert by[".item()"]["evidence"]["op"] == "aten::item"
    assert by[".item()"]["evidence"]["python_api"].startswith("<built-in method item of Tensor")
    assert by["torch.nonzero"]["evidence"]["op"] == "aten::nonzero"
    assert by[".cpu() / .tolist() / .numpy()"]["evidence"]["op"] == "aten::to"
    assert by[".cpu() / .tolist() / .numpy()"]["evidence"]["python_api"].startswith("<built-in method cpu of Tensor")


def test_cost_equals_host_sync_class():
    c, f, _ = k.run(SYNC, "TV102")
    assert c["dominant"] == "host_sync"
    assert sum(x["cost_us"] for x in f) == __import__("pytest").approx(c["time_us"]["host_sync"], abs=0.01)


def test_cpu_side_item_is_not_a_sync():
    # AdamW calls .item() on CPU step tensors: 306 aten::item ops but no blocking call under them
    t = k.trace("gpu_h200/train_tinygpt_modules.json.gz")
    assert t.host.filter(t.host["name"] == "aten::item").height == 306
    assert k.findings("gpu_h200/train_tinygpt_modules.json.gz", "TV102") == []


def test_kineto_pageable_copy_sync():
    _, f, _ = k.run("kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", "TV102")
    by = {x["evidence"]["cause"]: x for x in f}
    # 2 cudaStreamSynchronize per step after the pageable H2D batch copy (SOURCES.md), 6 steps
    assert by[".to(device) from pageable memory"]["count"] == 12
    assert by[".to(device) from pageable memory"]["evidence"]["op"] == "aten::to"
