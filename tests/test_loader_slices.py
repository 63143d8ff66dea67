"""The loader's cut of the event table into frames (`loader._slices`): events with several defects at once are
skipped once, counted under the first reason that skips them, and the kept events' times match a plain-Python
reading of the same events (an independent reference: one loop over the event list)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.hostile import ev, mini_trace
from traceview.ingest import fastscan, loader

WEEK_US = 7 * 24 * 3600 * 1e6


def _defective() -> dict:
    d = mini_trace(t0=1_700_000_000_000.0)  # epoch µs, as real traces have
    t = 1_700_000_000_000.0
    d["traceEvents"] += [
        ev(name="aten::no_ts_and_huge_dur", ts=None, dur=1e300),  # skipped for its ts only
        ev(name="aten::far_and_huge_dur", ts=t + 30 * 86400e6, dur=1e300),  # skipped as far only
        ev(name="huge_kernel", cat="kernel", pid=0, tid=7, ts=t + 50, dur=1e300),  # skipped as corrupt
        ev(name="aten::negative_dur", ts=t + 60, dur=-5),
        ev(name="aten::no_dur", ts=t + 70, dur=None),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": t - 30 * 86400e6},  # far flow
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 0, "tid": 7, "ts": t + 25, "bp": "e"},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": t + 80,
         "args": {"Bytes": 256, "Total Allocated": 1024, "Total Reserved": 2048, "Device Id": 0, "Device Type": 1}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "main"}},  # ts 0: kept
    ]
    return d


def _reference(evs: list[dict]) -> tuple[list[dict], Counter, float]:
    """Kept events, skip reasons and t0 (µs), by the rules the loader documents, one event at a time."""
    spans = [e for e in evs if e["ph"] in ("X", "i") and isinstance(e.get("ts"), float | int)]
    stamps = sorted(e["ts"] for e in spans if e.get("cat") != "Trace")
    med = stamps[(len(stamps) - 1) // 2]
    why: Counter = Counter()
    kept = []
    for e in evs:
        ts, dur = e.get("ts"), e.get("dur")
        if e["ph"] in ("X", "i") and ts is None:
            why["no_ts"] += 1
        elif e["ph"] in ("X", "i", "s", "f") and ts is not None and abs(ts - med) > WEEK_US:
            why["far"] += 1
        elif dur is not None and dur > WEEK_US:
            why["corrupt"] += 1
        else:
            kept.append(e)
    t0 = min(e["ts"] for e in kept if e["ph"] in ("X", "i") and e.get("cat") != "Trace")
    return kept, why, t0


@pytest.fixture(params=["scanner", "msgspec"])
def reader(request, monkeypatch):
    if request.param == "msgspec":
        monkeypatch.setattr(fastscan, "available", lambda: False)
    elif not fastscan.available():
        pytest.skip("C scanner not built")
    return request.param


def test_defects_are_counted_once_and_times_match_a_plain_reading(tmp_path, reader):
    d = _defective()
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    t = loader.load_file(p)
    kept, why, t0 = _reference(d["traceEvents"])
    assert why == {"no_ts": 1, "far": 2, "corrupt": 1}
    w = t.meta.warnings
    assert "skipped 1 events (ph X or i) without a usable 'ts' (missing, null or not a finite number)" in w
    assert ("skipped 2 events whose timestamp lies over 7 days from the rest of the trace (corrupt clock)") in w
    assert "skipped 1 events with a duration over 7 days (corrupt profiler records)" in w
    assert "1 complete events (ph X) with a negative 'dur': taken as 0 µs" in w
    assert "1 complete events (ph X) without a usable 'dur': taken as 0 µs" in w
    assert t.meta.t0_us == t0 == 1_700_000_000_000.0
    # every kept event is counted under its category; the skipped ones under none
    assert t.meta.event_counts == dict(Counter(e.get("cat", "") for e in kept))
    host = [e for e in kept if e["ph"] == "X" and e["cat"] in ("cpu_op", "user_annotation", "cuda_runtime")]
    got = t.host.sort("i").select("name", "ts", "dur", "end").rows()
    want = [(e["name"], round((e["ts"] - t0) * 1000), max(0, round((e.get("dur") or 0) * 1000))) for e in host]
    assert got == [(n, s, u, s + u) for n, s, u in want]
    assert t.gpu["name"].to_list().count("huge_kernel") == 0 and t.gpu.height == 3
    assert t.flows.select("ph", "ts").rows() == [("f", round((d["traceEvents"][-3]["ts"] - t0) * 1000))]
    assert t.memory.select("ts", "bytes", "total_allocated").rows() == [(80_000, 256, 1024)]
    assert t.threads.rows() == [(1, 1, "main")]


def test_a_clean_trace_has_no_warning_about_times(tmp_path, reader):
    d = mini_trace()
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    t = loader.load_file(p)
    assert not [w for w in t.meta.warnings if "ts" in w or "dur" in w or "7 days" in w]
    kept, why, t0 = _reference(d["traceEvents"])
    assert not why and t.meta.t0_us == t0 == 1000.0
    assert t.host.height + t.gpu.height == len(kept) == 12
    assert t.meta.event_counts == {"cpu_op": 3, "cuda_runtime": 3, "kernel": 3, "user_annotation": 3}


def test_kernels_without_a_launch_take_the_op_their_external_id_names(tmp_path, reader):
    """No runtime row for a kernel (launched before the window, or a format without launches): its External id
    names the cpu op, unless it is merely a copy of the correlation (pre-2.4 traces); the first op of an id wins."""
    d = mini_trace()
    evs = d["traceEvents"]
    evs += [
        ev(name="aten::early", ts=1400, dur=10, args={"External id": 77}),
        ev(name="aten::early_again", ts=1420, dur=10, args={"External id": 77}),
        ev(name="early_kernel", cat="kernel", pid=0, tid=7, ts=1450, dur=5,
           args={"correlation": 900, "External id": 77, "device": 0, "stream": 7}),
        ev(name="copied_id_kernel", cat="kernel", pid=0, tid=7, ts=1460, dur=5,
           args={"correlation": 78, "External id": 78, "device": 0, "stream": 7}),
        ev(name="aten::copied", ts=1430, dur=5, args={"External id": 78}),
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    t = loader.load_file(p)
    row = {e["name"]: i for i, e in enumerate(evs)}  # row id `i` = position in traceEvents
    ops = dict(t.gpu.select("name", "op").rows())
    assert ops["early_kernel"] == row["aten::early"]
    assert ops["copied_id_kernel"] is None
    # launched kernels: the op enclosing their runtime call
    launched = t.gpu.filter(t.gpu["name"] == "gemm_kernel").select("op", "launch").rows()
    mm = [i for i, e in enumerate(evs) if e["name"] == "aten::mm"]
    rt = [i for i, e in enumerate(evs) if e["name"] == "cudaLaunchKernel"]
    assert sorted(launched) == list(zip(mm, rt, strict=True))
