"""traceview.sections.timeline.timeline: the data the app's Timeline page draws, checked against the raw events
(stdlib json) and against the report's own per-step classification and findings."""

from __future__ import annotations

import pytest
from conftest import SAMPLES, load, raw_events

from traceview.options import Options
from traceview.report import analyze
from traceview.sections.timeline import timeline

SYNC = "gpu_h200/sync_item_nonzero_cpu.json.gz"
GPT2 = "gpu_h200_real/hf_gpt2_train_bf16.json.gz"
RANK0 = next((SAMPLES / "nccl_h200x2/ddp_rank1_slowed").glob("rank0.*.pt.trace.json.gz")).relative_to(SAMPLES).as_posix()
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def step_doc(rel: str, step: int) -> dict:
    return analyze([SAMPLES / rel], Options(step=step)).to_dict()["traces"][0]


def raw_window(rel: str, tl: dict) -> tuple[float, float]:
    """The step window in the file's own µs (the trace model's times are relative to its first event)."""
    t0 = load(rel).meta.t0_us
    return t0 + tl["start_us"], t0 + tl["start_us"] + tl["dur_us"]


def assert_tiles(tl: dict) -> None:
    seg = tl["segments"]
    assert seg[0]["ts_us"] == 0 and seg[-1]["end_us"] == tl["dur_us"]
    assert all(a["end_us"] == b["ts_us"] for a, b in zip(seg, seg[1:], strict=False))
    assert all(a["cls"] != b["cls"] for a, b in zip(seg, seg[1:], strict=False))  # runs are merged


@pytest.mark.parametrize("rel,step", [(SYNC, 2), (RANK0, 7), (GPT2, 2)])
def test_segments_tile_the_step_and_match_the_classification(rel: str, step: int) -> None:
    tl = timeline(load(rel), step)
    assert_tiles(tl)
    want = step_doc(rel, step)["classification"]["steps"][0]["time_us"]
    assert {c: v for c, v in want.items() if v} == pytest.approx(tl["class_us"], abs=0.002)
    per = {}
    for s in tl["segments"]:
        per[s["cls"]] = per.get(s["cls"], 0) + s["end_us"] - s["ts_us"]
    assert per == pytest.approx(tl["class_us"], abs=0.01)


def test_sync_trace_counts_against_raw_events() -> None:
    tl = timeline(load(SYNC), 2)
    lo, hi = raw_window(SYNC, tl)
    ev = raw_events(SYNC)
    gpu = [e for e in ev if e.get("cat") in GPU_CATS and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    drawn = [i for i in tl["items"] if i["lane"].startswith("gpu:")]
    assert len(drawn) == len(gpu) == 72  # every GPU slice of the step on its one stream
    assert {i["lane"] for i in drawn} == {"gpu:0:7"}
    assert {i["launch_thread"] for i in drawn} == {"thread 584"}  # every launch link leads to the main thread
    assert all(i["launch_us"] <= i["ts_us"] for i in drawn if i["launch_us"] is not None)
    assert sum(i["kind"] == "memcpy" for i in drawn) == sum(e["cat"] == "gpu_memcpy" for e in gpu)
    runtime = [e for e in ev if e.get("cat") == "cuda_runtime" and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    assert sum(i["kind"] == "runtime" for i in tl["items"]) == len(runtime) == 132  # one runtime row, none nested
    syncs = [e for e in ev if e.get("name") == "cudaStreamSynchronize" and lo <= e["ts"] < hi]
    assert len(tl["syncs"]) == len(syncs) == 18
    # the three host-sync findings of step 2 count the same 18 syncs and cost what their idle windows do
    doc = step_doc(SYNC, 2)
    hs = [f for f in doc["findings"] if f["code"] == "TV102"]
    assert sum(f["count"] for f in hs) == 18
    assert sum(s["idle_us"] for s in tl["syncs"]) == pytest.approx(sum(f["cost_us"] for f in hs), abs=0.01)
    assert sum(s["idle_us"] for s in tl["syncs"]) < tl["class_us"]["host_sync"]  # + the previous step's last sync
    assert {s["cause"] for s in tl["syncs"]} == {f["evidence"]["cause"] for f in hs}
    lanes = {lane["id"] for lane in tl["lanes"]}
    assert all(s["lane"] in lanes for s in tl["syncs"])  # each drawn on its thread's runtime row
    assert all(c["lane"] == "gpu:0:7" and c["kernels"] == len(c["names"]) >= 2 for c in tl["chains"])
    win = {w["code"]: w for w in tl["windows"]}
    # a window for every finding (TV201 too: chains below its savings bar); rules without a model of their own
    # get the longest stretch of their CLASS in the step
    assert {f["code"] for f in doc["findings"]} | {"TV201"} <= set(win)
    assert all(0 <= w["ts_us"] <= w["end_us"] <= tl["dur_us"] for w in tl["windows"])
    worst = max(tl["syncs"], key=lambda s: s["idle_us"])
    # clipped to the step: the step's last sync waits into the next step's period
    assert (win["TV102"]["ts_us"], win["TV102"]["end_us"]) == (worst["ts_us"], min(worst["next_gpu_us"], tl["dur_us"]))


def test_host_rows_do_not_overlap() -> None:
    tl = timeline(load(GPT2), 2)
    by_lane: dict[str, list[dict]] = {}
    for i in tl["items"]:
        by_lane.setdefault(i["lane"], []).append(i)
    for lane, items in by_lane.items():
        if lane.startswith("cpu:"):
            items.sort(key=lambda i: i["ts_us"])
            assert all(a["ts_us"] + a["dur_us"] <= b["ts_us"] + 0.002 for a, b in zip(items, items[1:], strict=False)), lane


def test_downsampling_keeps_the_longest_slices() -> None:
    full = timeline(load(GPT2), 2)
    small = timeline(load(GPT2), 2, max_items=500)
    assert full["counts"]["shortest_dropped"] == 0
    assert full["counts"]["slices"] == small["counts"]["slices"] == 13560
    assert small["counts"]["drawn"] == len(small["items"]) == 500
    assert small["counts"]["shortest_dropped"] == full["counts"]["drawn"] - 500
    durs = sorted((i["dur_us"] for i in full["items"]), reverse=True)
    assert sorted((i["dur_us"] for i in small["items"]), reverse=True) == durs[:500]
    assert small["segments"] == full["segments"]  # the classes are never downsampled


def test_nccl_waits_are_the_exposed_communication() -> None:
    tl = timeline(load(RANK0), 7)
    waits = sum(w["end_us"] - w["ts_us"] for w in tl["nccl_waits"])
    assert waits == pytest.approx(tl["class_us"]["communication"], abs=0.01)
    assert 85_000 < waits < 95_000  # rank 0 waits ~91.6 ms a step for the slowed rank 1 (MANIFEST.md)
    comm = [i for i in tl["items"] if i["cls"] == "communication"]
    lo, hi = raw_window(RANK0, tl)
    raw = [e for e in raw_events(RANK0) if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
           and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    assert len(comm) == len(raw) > 0
    w = next(w for w in tl["windows"] if w["code"] == "TV501")
    assert w["end_us"] - w["ts_us"] == pytest.approx(max(x["end_us"] - x["ts_us"] for x in tl["nccl_waits"]), abs=0.002)
    assert 0 <= w["ts_us"] < w["end_us"] <= tl["dur_us"]


def test_unknown_step_is_an_error() -> None:
    from traceview.errors import TraceError

    with pytest.raises(TraceError, match="no step 99 in this trace \\(steps: 1, 2, 3\\)"):
        timeline(load(SYNC), 99)
