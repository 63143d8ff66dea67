"""`traceview annotate`: the trace written back with the class per instant and each finding as slices.

No registry package ships Perfetto's trace_processor_shell (PyPI `perfetto` downloads it at run time; Debian and
npm have none), so the file is checked against the Trace Event Format's rules with the standard library, its
times against the trace's own raw events, and by loading it back with traceview."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import SAMPLES

from traceview.cli.annotate import CLASS_CAT, FINDING_CAT, TRACK_PROCESS
from traceview.cli.main import main

SRC = SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz"


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    d = tmp_path_factory.mktemp("ann")
    out = d / "a.json.gz"
    assert main(["annotate", str(SRC), "-o", str(out)]) == 0
    rep = d / "r.json"
    main(["analyze", str(SRC), "--format", "json", "-o", str(rep)])
    with gzip.open(SRC) as fh:
        raw = json.load(fh)
    with gzip.open(out) as fh:
        ann = json.load(fh)
    return raw, ann, json.loads(rep.read_text())["traces"][0], out


def test_original_events_unchanged_and_tracks_well_formed(annotated):
    raw, ann, _, _ = annotated
    n = len(raw["traceEvents"])
    assert ann["traceEvents"][:n] == raw["traceEvents"]
    assert {k: v for k, v in ann.items() if k != "traceEvents"} == {
        k: v for k, v in raw.items() if k != "traceEvents"
    }
    added = ann["traceEvents"][n:]
    pids = {e["pid"] for e in added}
    assert len(pids) == 1 and pids.isdisjoint({e.get("pid") for e in raw["traceEvents"]})
    names = {
        (e["tid"], e["name"]): e["args"]["name"] for e in added if e["ph"] == "M" and "name" in e["args"]
    }
    assert names[(0, "process_name")] == TRACK_PROCESS
    by_tid = defaultdict(list)
    for e in added:
        assert e["ph"] in ("M", "X")
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            assert (e["tid"], "thread_name") in names  # every slice on a named track
            by_tid[e["tid"]].append(e)
    # slices of one thread never overlap (they would mis-nest in Perfetto); 2 ns: the float precision of µs
    # timestamps near 5e12
    for evs in by_tid.values():
        evs.sort(key=lambda e: e["ts"])
        assert all(b["ts"] >= a["ts"] + a["dur"] - 2e-3 for a, b in zip(evs, evs[1:], strict=False))


def test_class_slices_match_the_kernels_and_the_classification(annotated):
    raw, ann, rep, _ = annotated
    cls = [e for e in ann["traceEvents"] if e.get("cat") == CLASS_CAT]
    tot = defaultdict(float)
    for e in cls:
        tot[e["name"]] += e["dur"]
    for c, us in rep["classification"]["time_us"].items():
        assert tot.get(c, 0.0) == pytest.approx(us, abs=0.01 * len(cls) + 0.01)
    # independent: GPU time (compute + memory classes) = the raw kernels' time inside the class slices' span
    lo = min(e["ts"] for e in cls)
    hi = max(e["ts"] + e["dur"] for e in cls)
    kern = sum(
        min(k["ts"] + k["dur"], hi) - max(k["ts"], lo)
        for k in raw["traceEvents"]
        if k.get("cat") == "kernel" and k["ts"] < hi and k["ts"] + k["dur"] > lo
    )
    assert tot["gpu_memory"] + tot["gpu_compute"] == pytest.approx(kern, rel=0.02)
    # on the trace's own clock: each step's slices start within 1 ms of its raw ProfilerStep#N annotation
    steps = {
        int(e["name"].split("#")[1]): e
        for e in raw["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    for n, s in steps.items():
        first = min(e["ts"] for e in cls if e["args"]["step"] == n)
        assert abs(first - s["ts"]) < 1000, (n, first, s["ts"])


def test_finding_slices_carry_rule_severity_saving_and_fix(annotated):
    _, ann, rep, _ = annotated
    fs = [e for e in ann["traceEvents"] if e.get("cat") == FINDING_CAT]
    assert [(e["args"]["code"], e["args"]["severity"]) for e in fs] == [
        (f["code"], f["severity"]) for f in rep["findings"]
    ]
    cls = [e for e in ann["traceEvents"] if e.get("cat") == CLASS_CAT]
    for e, f in zip(fs, rep["findings"], strict=True):
        assert (
            e["args"]["savings_us"] == f["savings_us"]
            and e["args"]["fix"] == f["fix"]
            and e["args"]["rule"] == f["rule"]
        )
        # a finding over steps 1-3 spans exactly the class slices of those steps
        mine = [c for c in cls if c["args"]["step"] in f["steps"]]
        assert e["ts"] == pytest.approx(min(c["ts"] for c in mine), abs=0.002)
        assert e["ts"] + e["dur"] == pytest.approx(max(c["ts"] + c["dur"] for c in mine), abs=0.002)


def test_annotated_trace_loads_back_with_the_same_analysis(annotated, tmp_path):
    _, _, rep, out = annotated
    again = tmp_path / "again.json"
    main(["analyze", str(out), "--format", "json", "-o", str(again)])
    t = json.loads(again.read_text())["traces"][0]
    assert t["steps"] == rep["steps"] and t["classification"]["time_us"] == rep["classification"]["time_us"]
    assert [(f["code"], f["savings_us"]) for f in t["findings"]] == [
        (f["code"], f["savings_us"]) for f in rep["findings"]
    ]


def test_bad_input_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["annotate", str(bad), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0]
