"""Issue 13, item 10: property tests (hypothesis) of the loader and timeline invariants on generated traces.

Each example is a small random Kineto trace: steps with ops that launch kernels or copies on one or two
streams (a stream runs one kernel at a time, as on a GPU), random gaps, some work queued behind earlier
work. Derandomized (a fixed example sequence): the suite is reproducible, never flaky.
"""

from __future__ import annotations

import json
import random

import polars as pl
import pytest
from hostile import PATHS, ev, use_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceview
import traceview.cli.main as cli
from traceview import report
from traceview.analyses import layers as L
from traceview.analyses.classify import partition
from traceview.cli.rules import build_options

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
KERNELS = ["sm90_xmma_gemm_bf16bf16_f32", "vectorized_elementwise_kernel", "reduce_kernel", "ncclDevKernel_AllReduce"]
OPS = ["aten::mm", "aten::add", "aten::sum", "c10d::allreduce_", "aten::copy_"]


@st.composite
def traces(draw) -> dict:
    """A random small trace (µs on a 0.5 µs grid, so float formatting never matters)."""
    half = st.integers(0, 80).map(lambda v: v / 2)
    streams = draw(st.lists(st.sampled_from([7, 13, 20]), min_size=1, max_size=2, unique=True))
    free = dict.fromkeys(streams, 0.0)  # when each stream finishes its queued work
    evs: list[dict] = []
    t, corr = 1_000.0, 1
    n_steps = draw(st.integers(1, 4))
    for s in range(n_steps):
        start = t
        cur = start + draw(half)
        # (the last step holds an op: a last span enclosing nothing is the step the profiler stopped in, left out
        # with a warning, and a trace of no op at all is refused)
        for _ in range(draw(st.integers(1 if s == n_steps - 1 else 0, 4))):
            op_dur = 1 + draw(half)
            name = draw(st.sampled_from(OPS))
            evs.append(ev(name=name, ts=cur, dur=op_dur, args={"External id": corr}))
            launch = cur + op_dur / 4
            evs.append(ev(name="cudaLaunchKernel" if name != "aten::copy_" else "cudaMemcpyAsync",
                          cat="cuda_runtime", ts=launch, dur=0.5, args={"correlation": corr, "External id": corr}))
            stream = draw(st.sampled_from(streams))
            k_ts = max(launch + 1 + draw(half), free[stream])
            k_dur = 0.5 + draw(half)
            free[stream] = k_ts + k_dur
            if name == "aten::copy_":
                evs.append(ev(name="Memcpy HtoD (Pageable -> Device)", cat="gpu_memcpy", pid=0, tid=stream, ts=k_ts,
                              dur=k_dur, args={"correlation": corr, "External id": corr, "device": 0, "stream": stream,
                                               "bytes": 4096}))
            else:
                evs.append(ev(name=draw(st.sampled_from(KERNELS)), cat="kernel", pid=0, tid=stream, ts=k_ts,
                              dur=k_dur, args={"correlation": corr, "External id": corr, "device": 0,
                                               "stream": stream, "grid": [4, 1, 1], "block": [128, 1, 1]}))
            corr += 1
            cur += op_dur + draw(half)
        end = max(cur + draw(half), start + 0.5)  # (a profiler's step span is never 0 µs: that one is ignored)
        evs.append(ev(name=f"ProfilerStep#{s}", cat="user_annotation", ts=start, dur=end - start))
        t = end + draw(st.sampled_from([0.0, 0.0, 5.0]))
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": evs}


def _doc(path) -> dict:
    argv = ["analyze", str(path)]
    return report.analyze([path], build_options(cli.make_parser().parse_args(argv))).to_dict()


def _write(tmp_path, d: dict, name: str = "t.json"):
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


@given(d=traces())
@SETTINGS
def test_class_shares_sum_to_100_and_time_adds_up(tmp_path_factory, d):
    doc = _doc(_write(tmp_path_factory.mktemp("p"), d))
    assert not doc["errors"], doc["errors"]
    c = doc["traces"][0]["classification"]
    if not c.get("shares"):
        return  # no GPU work in the analyzed steps
    for entry in [c, *c["steps"]]:
        assert all(v >= 0 for v in entry["shares"].values())
        assert abs(sum(entry["shares"].values()) - 100) < 0.1, entry["shares"]
        assert abs(sum(entry["time_us"].values()) - entry["window_us"]) < 0.01


@given(d=traces())
@SETTINGS
def test_idle_is_never_negative(tmp_path_factory, d):
    doc = _doc(_write(tmp_path_factory.mktemp("p"), d))
    t = doc["traces"][0]
    for s in t["steps"]:
        assert s["dur_us"] >= 0 and (s["gpu_busy_pct"] is None or 0 <= s["gpu_busy_pct"] <= 100)  # None: 0-µs step
        assert all(v >= 0 for v in s["breakdown_us"].values())
    for dev in t["devices"]:
        tp = dev["temporal"]
        assert tp["idle_us"] >= 0 and tp["compute_us"] >= 0 and tp["non_compute_us"] >= 0
        assert abs(tp["idle_us"] + tp["compute_us"] + tp["non_compute_us"] - tp["span_us"]) < 0.01
        for r in dev["idle_by_stream"]:
            parts = (r["host_wait_us"], r["kernel_wait_us"], r["other_us"])
            assert min(parts) >= 0 and abs(sum(parts) - r["idle_us"]) < 0.01


@given(d=traces())
@SETTINGS
def test_each_kernel_attributed_at_most_once(tmp_path_factory, d):
    t = traceview.load_file(_write(tmp_path_factory.mktemp("p"), d))
    gl = L.gpu_layers(t)
    assert not gl["i"].is_duplicated().any()  # one layer per kernel
    table = L.layer_table(t)
    total = int(t.gpu.filter(pl.col("kind") != "sync")["dur"].sum())
    assert int(table["self_gpu_ns"].sum()) == total  # self times (with the unattributed row) tile the GPU time
    part = partition(t, t.steps)
    per = part.with_columns(d=pl.col("end") - pl.col("ts")).group_by("step").agg(pl.col("d").sum(),
                                                                                  pl.col("ts").min(), pl.col("end").max())
    for r in per.iter_rows(named=True):  # the classifier's segments tile each step: nothing counted twice
        assert r["d"] == r["end"] - r["ts"]
    assert part.filter(pl.col("end") < pl.col("ts")).height == 0


@given(d=traces(), seed=st.integers(0, 2**32 - 1))
@SETTINGS
def test_results_do_not_depend_on_event_order(tmp_path_factory, d, seed):
    tmp = tmp_path_factory.mktemp("p")
    a = _doc(_write(tmp, d, "a.json"))
    shuffled = dict(d, traceEvents=random.Random(seed).sample(d["traceEvents"], len(d["traceEvents"])))
    b = _doc(_write(tmp, shuffled, "b.json"))
    for doc in (a, b):
        for t in doc["traces"]:
            t.pop("path")
    assert a == b


FRAMES = ("host", "gpu", "gpu_annotations", "memory", "flows", "steps", "threads")


@given(d=traces(), style=st.sampled_from(["compact", "indented", "string-ids", "escaped-names"]))
@SETTINGS
def test_c_scanner_and_python_path_give_identical_frames(tmp_path_factory, monkeypatch, d, style):
    if style == "string-ids":
        for e in d["traceEvents"]:
            if e["cat"] == "kernel":
                e["tid"] = f"stream {e['tid']}"
    elif style == "escaped-names":
        for e in d["traceEvents"]:
            e["name"] = e["name"] + ' "q" \u00e9\U0001f600'
    text = json.dumps(d, indent=1 if style == "indented" else None, ensure_ascii=style != "escaped-names")
    p = tmp_path_factory.mktemp("p") / "t.json"
    p.write_text(text, encoding="utf-8")
    got = {}
    for kind in PATHS:
        use_path(kind, monkeypatch)
        got[kind] = traceview.load_file(p)
    for f in FRAMES:
        assert_frame_equal(getattr(got["c"], f), getattr(got["py"], f))
    assert got["c"].meta == got["py"].meta


@pytest.mark.parametrize("kind", PATHS)
def test_generator_makes_valid_traces(tmp_path, monkeypatch, kind):
    """The strategy's traces load on both paths without a warning (a guard for the properties above)."""
    use_path(kind, monkeypatch)

    @given(d=traces())
    @settings(max_examples=5, deadline=None, derandomize=True, database=None)
    def check(d):
        p = tmp_path / "g.json"
        p.write_text(json.dumps(d))
        t = traceview.load_file(p)
        assert t.meta.warnings == []
        assert t.steps.height >= 1

    check()
