"""Issue 33, item 5 (structure) and the value checks left from the second pass: each odd structure or unusable value
in a small generated trace gives a warning saying what was done, and where an event is left out the results are
those of the same trace without it (computed independently: the trace is edited and analyzed again)."""

from __future__ import annotations

import copy
import json

import pytest
from hostile import PATHS, analyze_json, error_lines, mini_trace, run_cli, use_path, write


@pytest.fixture(params=PATHS)
def path_kind(request, monkeypatch):
    use_path(request.param, monkeypatch)
    return request.param


def _results(t: dict) -> tuple:
    """Steps, their periods, mean step, GPU busy, kernel count and time: what an odd structure must not move
    silently."""
    s = t["summary"]
    return (s["step_numbers"], [x["dur_us"] for x in t["steps"]], s["avg_step_us"], s["gpu_busy_pct"],
            sum(k["count"] for k in t["top_kernels"]), sum(k["total_us"] for k in t["top_kernels"]))


def _analyze(capsys, tmp_path, doc, name="t.json") -> dict:
    rc, out, err = analyze_json(capsys, write(tmp_path / name, doc))
    assert rc == 0 and "internal error" not in err, err
    return out["traces"][0]


def _warned(t: dict, text: str) -> None:
    assert any(text in w for w in t["warnings"]), t["warnings"]


CLEAN = ([0, 1, 2], [100.0, 100.0, 100.0], 100.0, 60.0, 3, 180.0)


def test_the_clean_trace_has_known_numbers_and_no_warning(tmp_path, capsys, path_kind):
    t = _analyze(capsys, tmp_path, mini_trace())
    assert _results(t) == CLEAN
    assert not any(w for w in t["warnings"] if "ProfilerStep" in w or "GPU" in w or "traceEvents" in w), t["warnings"]


# ---- duplicate top-level keys -----------------------------------------------------------------------------


def test_two_trace_events_arrays_are_both_read(tmp_path, capsys, path_kind):
    """The events split between two `traceEvents` keys (steps 0-1, then step 2): both are read, as one array; the
    numbers are the clean trace's (msgspec used to keep the last array: one step; the C scanner refused the file)."""
    evs = mini_trace()["traceEvents"]
    head = json.dumps({"schemaVersion": 1, "traceEvents": evs[:8]})
    text = head[:-1] + ', "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": ' \
        + json.dumps(evs[8:]) + "}"
    t = _analyze(capsys, tmp_path, text.encode())
    assert _results(t) == CLEAN and t["metadata"]["device"] == "NVIDIA H200"
    _warned(t, "the document has 2 top-level 'traceEvents' keys (JSON readers keep only one), with 8 and 4 events: "
               "both analyzed as one, in file order")


def test_an_identical_second_array_is_read_once(tmp_path, capsys, path_kind):
    doc = mini_trace()
    text = json.dumps(doc)
    text = text[:-1] + ', "traceEvents": ' + json.dumps(doc["traceEvents"]) + "}"
    t = _analyze(capsys, tmp_path, text.encode())
    assert _results(t) == CLEAN
    _warned(t, "with 12 and 12 events: both read once (identical copies)")


def test_the_key_inside_an_event_is_not_an_array(tmp_path, capsys, path_kind):
    """`"traceEvents"` as a name or an args key is data: the document reads as it is, without the warning."""
    doc = mini_trace()
    doc["traceEvents"][1]["args"]["traceEvents"] = [1]
    doc["traceEvents"][1]["name"] = "traceEvents"
    t = _analyze(capsys, tmp_path, doc)
    assert _results(t) == CLEAN and not any("top-level" in w for w in t["warnings"])


# ---- step spans ---------------------------------------------------------------------------------------------


def _without(doc: dict, k: int) -> dict:
    out = copy.deepcopy(doc)
    del out["traceEvents"][k]
    return out


@pytest.mark.parametrize("k,field,value,warning", [
    (4, "dur", 0, "ignored 1 zero-length ProfilerStep annotations ('dur' 0, e.g. 'ProfilerStep#1'): a 0 µs span holds no "
                  "step; their time belongs to the step around them"),
    (4, "ts", 0, "ignored 1 ProfilerStep annotations that enclose no other event, away from their work (e.g. "
                 "'ProfilerStep#1' at 0.0 µs into the trace: a corrupt or zero 'ts' or 'dur'): its time belongs to "
                 "the steps around it"),
    (8, "ts", 0, "ignored 1 ProfilerStep annotations that enclose no other event, away from their work (e.g. "
                 "'ProfilerStep#2' at 0.0 µs"),
    (0, "ts", 0, "ignored 1 ProfilerStep annotations that enclose no other event, away from their work (e.g. "
                 "'ProfilerStep#0' at 0.0 µs"),
    (0, "ts", 1.5, "ignored 1 ProfilerStep annotations that enclose no other event, away from their work (e.g. "
                   "'ProfilerStep#0' at 0.0 µs"),
])
def test_a_step_span_that_holds_nothing_is_dropped_and_said(tmp_path, capsys, path_kind, k, field, value, warning):
    """A zero-length step, or a step whose `ts` is 0 (away from its work, in or out of the numbers' time order):
    ignored, said, and the results are exactly those of the trace without that annotation (a `ts` of 0 used to make
    a 433 µs mean step of the clean 100 µs)."""
    doc = mini_trace()
    doc["traceEvents"][k][field] = value
    t = _analyze(capsys, tmp_path, doc)
    _warned(t, warning)
    ref = _analyze(capsys, tmp_path, _without(mini_trace(), k), "ref.json")
    assert _results(t) == _results(ref) and t["summary"]["step_numbers"] == [s for s in (0, 1, 2) if s != k // 4]


def test_all_zero_length_steps_are_one_whole_trace_step(tmp_path, capsys, path_kind):
    doc = mini_trace()
    for k in (0, 4, 8):
        doc["traceEvents"][k]["dur"] = 0
    t = _analyze(capsys, tmp_path, doc)  # (used to be an internal error in the replay)
    _warned(t, "ignored 3 zero-length ProfilerStep annotations")
    _warned(t, "or to one step of the whole trace when none is left")
    # the whole trace as one step (the annotations are no steps but still events): from the first event, step 0's
    # annotation at 1000 µs, to the last kernel's end at 1280 µs; all three kernels in it (180 µs)
    assert t["summary"]["step_numbers"] == [0] and t["summary"]["avg_step_us"] == 280.0
    assert _results(t)[4:] == (3, 180.0) and t["summary"]["gpu_busy_pct"] == round(100 * 180 / 280, 2)


def test_overlapping_step_spans_are_said_and_partition_time(tmp_path, capsys, path_kind):
    doc = mini_trace()
    doc["traceEvents"][4]["ts"] = 1050  # step 1 opens 50 µs before step 0 ends
    t = _analyze(capsys, tmp_path, doc)
    _warned(t, "1 ProfilerStep spans start before the previous step's span ends (e.g. 'ProfilerStep#1', 50.0 µs "
               "early): each step is taken from its start to the next step's start, so no time counts in two steps")
    periods = [x["dur_us"] for x in t["steps"]]
    assert sum(periods) == 300.0 and t["summary"]["step_numbers"] == [0, 1, 2]


def test_a_kernel_before_its_launch_bounds_no_step(tmp_path, capsys, path_kind):
    """A kernel 500 µs before the runtime call that launched it (used to open step 0 500 µs early: a 263 µs mean
    step): the steps keep their clean windows; the kernel is kept, outside every step, and said."""
    doc = mini_trace()
    doc["traceEvents"][3]["ts"] = 1010 - 500
    t = _analyze(capsys, tmp_path, doc)
    _warned(t, "1 GPU activities start before the runtime call that launched them (up to 500.0 µs before: corrupt "
               "timestamps or clocks): their time is kept, but they bound no step window")
    assert [x["dur_us"] for x in t["steps"]] == [100.0, 100.0, 100.0] and t["summary"]["avg_step_us"] == 100.0
    # the two kernels left in the steps: 120 µs of GPU time in the 300 µs of steps
    assert t["summary"]["gpu_busy_pct"] == 40.0 and t["top_kernels"][0]["count"] == 2


# ---- unusable values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("field,value,said", [
    ("device", -1, "device x1 (the event's pid is used)"), ("device", "gpu0", "device x1 (the event's pid is used)"),
    ("device", 2**40, "device x1"), ("stream", -5, "stream x1 (its tid)"), ("stream", -2, "stream x1 (its tid)"), ("stream", "s", "stream x1 (its tid)"),
    ("bytes", -100, "bytes x1 (no size)"), ("bytes", "many", "bytes x1 (no size)")])
def test_unusable_gpu_args_are_named(tmp_path, capsys, path_kind, field, value, said):
    doc = mini_trace()
    doc["traceEvents"][3]["args"][field] = value
    t = _analyze(capsys, tmp_path, doc)
    assert _results(t) == CLEAN
    _warned(t, "ignored GPU args values that are not a whole number in range (>= 0; a stream -1 is none): " + said)


def test_a_stream_of_minus_one_is_no_stream(tmp_path, capsys, path_kind):
    """Kineto writes `"stream": -1` on device-wide syncs (the bundled HTA event-sync traces): kept, not warned."""
    doc = mini_trace()
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_sync", "name": "Device Synchronize", "pid": 0, "tid": 7,
                               "ts": 1085, "dur": 1, "args": {"device": 0, "stream": -1}})
    t = _analyze(capsys, tmp_path, doc)
    assert not any("GPU args" in w for w in t["warnings"]), t["warnings"]


def test_unusable_memcpy_bytes_are_no_size(tmp_path, capsys, path_kind):
    doc, good = mini_trace(), mini_trace()
    cp = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
          "ts": 1090, "dur": 5, "args": {"device": 0, "stream": 7, "bytes": -4096}}
    doc["traceEvents"].append(cp)
    good["traceEvents"].append({**cp, "args": {"device": 0, "stream": 7}})
    t = _analyze(capsys, tmp_path, doc)
    _warned(t, "bytes x1 (no size)")
    ref = _analyze(capsys, tmp_path, good, "ref.json")  # the copy without a size: what the bad value reads as
    assert _results(t) == _results(ref) and t.get("memory") == ref.get("memory")


@pytest.mark.parametrize("field,value", [("numSms", 0), ("numSms", -3), ("numSms", "x"), ("totalGlobalMem", 0),
                                         ("id", -1), ("id", 1.5), ("name", 5)])
def test_unusable_device_properties_are_named(tmp_path, capsys, field, value):
    doc = mini_trace()
    doc["deviceProperties"][0][field] = value
    t = _analyze(capsys, tmp_path, doc)
    assert _results(t) == CLEAN
    _warned(t, f"ignored unusable deviceProperties fields: {field} (")
    assert field not in t["metadata"]["devices"][0]


# ---- diff against a CPU-only trace --------------------------------------------------------------------------


def _cpu_only() -> dict:
    doc = mini_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] in ("cpu_op", "user_annotation")]
    del doc["deviceProperties"]
    return doc


def test_diff_says_when_class_shifts_do_not_add_up(tmp_path, capsys):
    gpu, cpu = write(tmp_path / "gpu.json", mini_trace()), write(tmp_path / "cpu.json", _cpu_only())
    rc, out, err = run_cli(capsys, "diff", gpu, cpu, "--format", "json")
    assert rc == 0, err
    p = json.loads(out)["pairs"][0]
    # the CPU side's classes are its host split (cpu_ops, outside_ops, …), the GPU side's the classifier's
    assert {c["class"] for c in p["classes"] if c["b_us"]} <= {"input", "cpu_ops", "communication", "outside_ops"}
    assert p["warnings"] == ["A's classes are the GPU classifier's and B's the host split of a trace without GPU "
                             "activity (input, cpu_ops, communication, outside_ops): they do not compare; compare "
                             "classes only between traces of the same kind"]
    rc, text, _ = run_cli(capsys, "diff", gpu, cpu)
    assert "warning: A's classes are the GPU classifier's and B's the host split" in " ".join(text.split())
    # two GPU traces, one 2x slower: the shifts add up to the change, no warning
    slow = mini_trace()
    for e in slow["traceEvents"]:
        e["ts"], e["dur"] = 1000 + (e["ts"] - 1000) * 2, e["dur"] * 2
    rc, out, _ = run_cli(capsys, "diff", gpu, write(tmp_path / "slow.json", slow), "--format", "json")
    p = json.loads(out)["pairs"][0]
    assert abs(sum(c["delta_us"] for c in p["classes"]) - p["step"]["delta_us"]) < 1 and p["warnings"] == []


# ---- the CI commands' JSON inputs: one reader, one line -------------------------------------------------------


@pytest.mark.parametrize("content,message", [(None, "no such file"), (b"{not json", "not a JSON file ("),
                                             (b"\xff\xfe\x00", "not a JSON file (")])
def test_baseline_and_rows_files_fail_in_the_same_line(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    (tmp_path / "in").mkdir()
    write(tmp_path / "in" / "run.json", mini_trace())
    rc, _, err = run_cli(capsys, "batch", tmp_path / "in", "--baseline", bad, "-j", "1")
    assert rc == 2 and len(error_lines(err)) == 1, err
    assert error_lines(err)[0].startswith(f"traceview: error: baseline {bad}: {message}"), err
    rc, _, err = run_cli(capsys, "history", "add", bad, "--db", tmp_path / "h.duckdb")
    assert rc == 2 and len(error_lines(err)) == 1, err
    assert error_lines(err)[0].startswith(f"traceview: error: batch rows {bad}: {message}"), err
