"""Traces a profiler used the common wrong ways writes (sample_traces/profiler_misuse, recorded with torch 2.13 on the
CPU by collectors/examples/profiler_misuse.py): what holds the loop's work is analyzed without the step the profiler
stopped in, and a trace that holds none of it is one error line that says why."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import SAMPLES, load, raw_events
from hostile import PATHS, analyze_json, error_lines, ev, mini_trace, use_path, write

MISUSE = "profiler_misuse/"


def _spans_us(rel: str) -> dict[int, float]:
    """ProfilerStep number -> its span's duration (µs), from the JSON itself."""
    return {int(e["name"].split("#")[1]): e["dur"] for e in raw_events(rel) if e.get("name", "").startswith("ProfilerStep#")}


@pytest.mark.parametrize("name", ["schedule_exit_midcycle", "schedule_exit_midcycle_stack"])
def test_step_the_profiler_stopped_in_is_not_a_step(capsys, name):
    rel = MISUSE + name + ".json.gz"
    spans = _spans_us(rel)
    assert sorted(spans) == [7, 8, 9] and spans[9] < 0.1 * min(spans[7], spans[8])  # #9: opened by the last step()
    (last,) = [e for e in raw_events(rel) if e.get("name") == "ProfilerStep#9"]
    inside = {e.get("cat") for e in raw_events(rel) if e.get("ph") == "X" and e is not last
              and last["ts"] <= e["ts"] < last["ts"] + last["dur"]}
    # nothing of the loop inside #9; with stacks, the Python frames of the profiler's own stop
    assert inside == ({"python_function"} if name.endswith("stack") else set())
    t = load(rel)
    assert t.steps["step"].to_list() == [7, 8]
    assert any("ignored the last step, 'ProfilerStep#9'" in w for w in t.meta.warnings)
    got = (t.steps["cpu_end"] - t.steps["cpu_ts"]).to_list()
    assert got == pytest.approx([spans[7] * 1000, spans[8] * 1000], abs=1)
    rc, doc, _err = analyze_json(capsys, SAMPLES / rel)
    tr = doc["traces"][0]
    assert rc == 0 and tr["summary"]["step_numbers"] == [7, 8]
    # each step's period runs to the next one's start (or its own end): at least its span, and no diluted mean
    per = {s["step"]: s["dur_us"] for s in tr["steps"]}
    assert per[7] >= spans[7] - 1 and per[8] >= spans[8] - 1
    assert tr["summary"]["avg_step_us"] == pytest.approx((per[7] + per[8]) / 2, abs=0.01)
    assert tr["summary"]["avg_step_us"] < 1.1 * max(spans[7], spans[8])


def test_rocm_trace_drops_its_empty_last_step():
    """A GPU trace (HTA's MI250 sample) ends the same way: ProfilerStep#2 encloses nothing of the loop."""
    rel = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    spans = _spans_us(rel)
    assert sorted(spans) == [1, 2]
    t = load(rel)
    assert t.steps["step"].to_list() == [1]
    assert any("'ProfilerStep#2'" in w and "encloses no op" in w for w in t.meta.warnings)


@pytest.mark.parametrize("path_kind", PATHS)
def test_last_step_kept_when_another_thread_works_in_it(tmp_path, capsys, monkeypatch, path_kind):
    """An empty span on the loop's thread while another thread (autograd's, a pin-memory thread) runs inside it is
    a step that happened: it stays."""
    use_path(path_kind, monkeypatch)
    doc = mini_trace(steps=3)
    last = [e for e in doc["traceEvents"] if e["name"] == "ProfilerStep#2"][0]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e["ts"] >= last["ts"] and e["name"] != "ProfilerStep#2")]
    other = ev(name="aten::copy_", tid=2, ts=last["ts"] + 10, dur=30)
    rc, got, _ = analyze_json(capsys, write(tmp_path / "other.json", {**doc, "traceEvents": [*doc["traceEvents"], other]}))
    assert rc == 0 and got["traces"][0]["summary"]["step_numbers"] == [0, 1, 2]
    rc, got, _ = analyze_json(capsys, write(tmp_path / "alone.json", doc))
    assert rc == 0 and got["traces"][0]["summary"]["step_numbers"] == [0, 1]


@pytest.mark.parametrize(("name", "holds"), [
    ("handler_overwritten", "only 1 Python-function or annotation event"),
    ("exported_after_schedule", "Python-function or annotation events"),
    ("threads_not_recorded", "only the profiler's own window span"),
])
@pytest.mark.parametrize("path_kind", PATHS)
def test_trace_without_the_programs_work_is_one_error(capsys, monkeypatch, path_kind, name, holds):
    rel = MISUSE + name + ".json.gz"
    cats = {e.get("cat") for e in raw_events(rel) if e.get("ph") == "X"}
    assert not cats & {"cpu_op", "cuda_runtime", "kernel"}  # the JSON holds no op, call or kernel
    use_path(path_kind, monkeypatch)
    rc, doc, err = analyze_json(capsys, SAMPLES / rel)
    lines = error_lines(err)
    assert rc == 2 and len(lines) == 1 and "internal error" not in err, err
    assert holds in lines[0] and "recorded none of the program's work" in lines[0]
    assert "on_trace_ready" in lines[0] and "not a PyTorch profiler trace" not in lines[0]


def test_execution_trace_is_named(capsys):
    rel = MISUSE + "execution_trace.json.gz"
    with gzip.open(SAMPLES / rel, "rt") as fh:
        et = json.load(fh)
    assert "nodes" in et and "traceEvents" not in et and et["schema"].endswith(tuple("0123456789"))
    rc, doc, err = analyze_json(capsys, SAMPLES / rel)
    lines = error_lines(err)
    assert rc == 2 and len(lines) == 1 and "an execution trace" in lines[0] and "export_chrome_trace" in lines[0]


def test_no_schedule_training_steps_from_the_optimizer(capsys):
    """Without a schedule there is no ProfilerStep: the training loop's own optimizer.step() spans bound its steps,
    read here from the JSON: step k from the end of the (k-1)-th to the end of the k-th."""
    rel = MISUSE + "no_schedule_train.json.gz"
    ev = raw_events(rel)
    assert not any(e.get("name", "").startswith("ProfilerStep#") for e in ev)
    ends = sorted(e["ts"] + e["dur"] for e in ev if e.get("name", "").startswith("Optimizer.step#"))
    assert len(ends) == 6
    t = load(rel)
    t0 = t.meta.t0_us
    assert t.steps["step"].to_list() == [1, 2, 3, 4, 5] and not t.meta.has_steps
    assert t.steps["cpu_ts"].to_list() == pytest.approx([(e - t0) * 1000 for e in ends[:-1]], abs=1)
    assert t.steps["cpu_end"].to_list() == pytest.approx([(e - t0) * 1000 for e in ends[1:]], abs=1)
    assert any("the 5 periods between the ends of the 6 optimizer steps" in w for w in t.meta.warnings)
    rc, doc, _ = analyze_json(capsys, SAMPLES / rel)
    tr = doc["traces"][0]
    assert rc == 0 and tr["summary"]["steps"] == 5
    # the 5 steps hold the loop's AdamW steps: its per-parameter ops are counted per step, not over the trace
    assert tr["summary"]["avg_step_us"] == pytest.approx((ends[-1] - ends[0]) / 5, rel=0.02)


def test_no_schedule_inference_steps_from_its_annotations():
    rel = MISUSE + "no_schedule_annotated.json.gz"
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in raw_events(rel) if e.get("cat") == "user_annotation"
                   and e.get("name", "").startswith("batch_"))
    assert len(spans) == 5
    t = load(rel)
    t0 = t.meta.t0_us
    assert t.steps["step"].to_list() == [0, 1, 2, 3, 4]
    assert t.steps["cpu_ts"].to_list() == pytest.approx([(a - t0) * 1000 for a, _ in spans], abs=1)
    assert t.steps["cpu_end"].to_list() == pytest.approx([(b - t0) * 1000 for _, b in spans], abs=1)
    assert any("the 5 spans of the annotation 'batch'" in w for w in t.meta.warnings)


@pytest.mark.parametrize("path_kind", PATHS)
def test_annotations_that_are_not_the_loop_leave_one_step(tmp_path, capsys, monkeypatch, path_kind):
    """Repeated annotations covering little of the trace (a marker inside each iteration) are not steps: the whole
    trace stays one step, as it is said."""
    use_path(path_kind, monkeypatch)
    evs = [ev(name="aten::mm", ts=1000 + 100 * k, dur=90) for k in range(10)]
    evs += [ev(name=f"mark_{k}", cat="user_annotation", ts=1000 + 100 * k + 95, dur=2) for k in range(10)]
    rc, got, err = analyze_json(capsys, write(tmp_path / "marks.json", {"traceEvents": evs}))
    tr = got["traces"][0]
    assert rc == 0 and tr["summary"]["steps"] == 1
    assert any("the whole trace is analyzed as one step" in w for w in tr["warnings"])


def test_successive_captures_of_one_process_are_not_a_job(capsys):
    """`schedule(repeat=2)` with tensorboard_trace_handler writes a file per cycle of one process: analyzed one by
    one, not as two ranks (the JSON: one pid, windows one after the other, no distributedInfo)."""
    folder = SAMPLES / MISUSE / "repeat_cycles"
    files = sorted(folder.glob("*.pt.trace.json.gz"))
    assert len(files) == 2
    pids, windows = set(), []
    for f in files:
        with gzip.open(f, "rt") as fh:
            d = json.load(fh)
        assert "distributedInfo" not in d
        xs = [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        pids |= {e["pid"] for e in xs}
        windows.append((min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)))
    windows.sort()
    assert len(pids) == 1 and windows[0][1] <= windows[1][0]
    rc, doc, _ = analyze_json(capsys, folder)
    assert rc == 0 and doc["jobs"] == [] and len(doc["traces"]) == 2
    for tr in doc["traces"]:
        assert any("one of 2 traces recorded one after the other, no ranks named" in w for w in tr["warnings"])
    assert sorted(tr["summary"]["step_numbers"] for tr in doc["traces"]) == [[2, 3], [6, 7]]


@pytest.mark.parametrize("path_kind", PATHS)
def test_two_optimizers_a_step_bound_it_by_the_last(tmp_path, capsys, monkeypatch, path_kind):
    """A GAN-like loop steps two optimizers per step (`Optimizer.step#Adam.step`, then `#SGD.step`), no schedule:
    its steps end with the second, one step per pair, not two."""
    use_path(path_kind, monkeypatch)
    evs = []
    for k in range(5):
        t = 1000 + 1000 * k
        evs += [ev(name="aten::mm", ts=t, dur=400),
                ev(name="Optimizer.step#Adam.step", cat="user_annotation", ts=t + 450, dur=100),
                ev(name="aten::mm", ts=t + 600, dur=200),
                ev(name="Optimizer.step#SGD.step", cat="user_annotation", ts=t + 850, dur=100)]
    rc, got, _ = analyze_json(capsys, write(tmp_path / "gan.json", {"traceEvents": evs}))
    tr = got["traces"][0]
    assert rc == 0 and tr["summary"]["steps"] == 4 and tr["summary"]["step_numbers"] == [1, 2, 3, 4]
    assert tr["summary"]["avg_step_us"] == pytest.approx(1000, abs=1)
    assert any("'Optimizer.step#SGD.step'" in w for w in tr["warnings"])
