"""`traceview diff` on the twins of sample_traces/: the class shift and the step-time change match what the
twins were built to show (labels.json, MANIFEST.md); kernel tables are cross-checked with the raw events."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest
from conftest import SAMPLES, raw_events

from traceview.ci.compare import diff_paths

H200 = SAMPLES / "gpu_h200"
COMPILE = SAMPLES / "gpu_h200_compile"
KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@functools.cache
def _diff(a: str, b: str) -> dict:
    return diff_paths(str(SAMPLES / a), str(SAMPLES / b))


def _one(a: str, b: str) -> dict:
    d = _diff(a, b)
    assert not d["errors"] and not d["unmatched_a"] and not d["unmatched_b"]
    assert len(d["pairs"]) == 1
    return d["pairs"][0]


def _cls(p: dict) -> dict[str, dict]:
    return {c["class"]: c for c in p["classes"]}


def _labels(folder: str) -> dict:
    return json.loads((SAMPLES / folder / "labels.json").read_text())


def _raw_kernels(rel: str) -> list[dict]:
    return [e for e in raw_events(rel) if e.get("cat") in KERNEL_CATS]


def _check_sums(p: dict) -> None:
    """Class shifts add up to the step-time change (both are per-step means over the analyzed steps)."""
    s = p["step"]
    assert s["delta_us"] == pytest.approx(s["b_us"] - s["a_us"], abs=0.002)
    assert sum(c["delta_us"] for c in p["classes"]) == pytest.approx(s["delta_us"], abs=0.01)


def test_elementwise_chain_eager_vs_compiled():
    lab = _labels("gpu_h200")
    p = _one("gpu_h200/elementwise_chain_eager.json.gz", "gpu_h200/elementwise_chain_compiled.json.gz")
    _check_sums(p)
    # labels: 8 memory-bound elementwise kernels fused into one; 5.2x faster by CUDA events
    s = p["step"]
    assert s["b_us"] < s["a_us"] and s["beyond_noise"]
    assert (s["a_us"], s["b_us"]) == (pytest.approx(537.603, abs=0.01), pytest.approx(139.317, abs=0.01))
    top = p["classes"][0]
    assert top["class"] == "gpu_memory" and top["delta_us"] < 0  # the largest shift: less memory-bound time
    # the gpu_memory time saved per step is the eager - compiled time the recorder measured without profiler
    saved_ms = lab["elementwise_chain_eager"]["timing"]["eager_ms"] - lab["elementwise_chain_eager"]["timing"]["compiled_ms"]
    assert -top["delta_us"] / 1000 == pytest.approx(saved_ms, rel=0.05)  # 0.426 vs 0.436 ms
    assert p["shift_text"].startswith("−426.0 µs gpu_memory, +38.1 µs cpu_launch")
    # what to fix first: the compiled step's fused kernel takes 0.103 of its 0.119 ms unprofiled (labels), so its
    # launch gaps are not worth a fix and both sides are limited by memory bandwidth
    lc = lab["elementwise_chain_compiled"]
    assert lc["timing"]["compiled_ms"] / lc["step_ms_cuda_events"] > 0.85
    assert p["primary"] == {"a": "gpu_memory", "b": "gpu_memory"}
    # kernels: the 8 eager kernels are gone (matched by name and launching op), one fused triton kernel came
    ks = p["kernels"]
    assert p["kernels_source"] == "all"
    removed = [k for k in ks if k["status"] == "removed"]
    added = [k for k in ks if k["status"] == "added"]
    assert sum(k["a_calls"] for k in removed) == lab["elementwise_chain_eager"]["chain_len"] and len(added) == 1
    assert len(removed) == 7  # two of the 8 ops are the same kernel launched by aten::mul
    assert added[0]["name"].startswith("triton_poi_fused_") and added[0]["b_calls"] == 1
    # per-step kernel time = the raw kernels' durations over the 3 analyzed steps (all kernels lie in them)
    for rel, side in (("gpu_h200/elementwise_chain_eager.json.gz", "a_us"),
                      ("gpu_h200/elementwise_chain_compiled.json.gz", "b_us")):
        assert sum(k[side] or 0 for k in ks) == pytest.approx(sum(e["dur"] for e in _raw_kernels(rel)) / 3, abs=0.01)
    # findings: the fusable chain disappeared
    gone = [f["rule"] for f in p["findings"]["disappeared"]]
    assert "elementwise-chain" in gone
    assert not [f for f in p["findings"]["appeared"] if f["rule"] == "elementwise-chain"]


def test_launch_bound_vs_cuda_graph():
    p = _one("gpu_h200/launch_bound_tiny_ops.json.gz", "gpu_h200/cudagraph_reduce_overhead.json.gz")
    _check_sums(p)
    lab = _labels("gpu_h200")
    # both labelled CPU/launch-bound: the graph removes launch gaps but the host still cannot keep up
    assert lab["launch_bound_tiny_ops"]["dominant"] == "cpu_launch_bound"
    assert lab["cudagraph_reduce_overhead"]["dominant"] == "cpu_overhead_bound"
    assert p["primary"] == {"a": "cpu_launch", "b": "cpu_launch"}
    top = p["classes"][0]
    assert top["class"] == "cpu_launch" and top["delta_us"] < 0
    assert -top["delta_us"] > 0.9 * -p["step"]["delta_us"]  # nearly all of the gain is launch time
    assert p["step"]["a_us"] / p["step"]["b_us"] > 5


def test_graph_break_vs_no_break():
    p = _one("gpu_h200_compile/compile_graph_break.json.gz", "gpu_h200_compile/compile_no_break.json.gz")
    _check_sums(p)
    c = _cls(p)
    # labels: `if h.sum() > 0` forces a host sync in the graph break; torch.where removes it
    assert c["host_sync"]["a_us"] == pytest.approx(123.361, abs=0.1) and c["host_sync"]["b_us"] == 0
    assert p["classes"][0]["class"] == "host_sync"
    gone = [(f["rule"], f["severity"]) for f in p["findings"]["disappeared"]]
    # the replay gives the break's time to graph-break's fix (its sync included); the host-sync finding stays
    # info: the twin's step is 39 µs shorter (noise), closer to info than to the old error
    assert ("graph-break", "error") in gone and "host-sync" in {r for r, _ in gone}
    # two compiled graphs per call become one (layers are the CompiledFxGraph annotations)
    graphs = {side: [lay for lay in p["layers"] if lay["layer"].startswith("## Call CompiledFxGraph")
                     and lay[f"{side}_us"]] for side in ("a", "b")}
    assert len(graphs["a"]) == _labels("gpu_h200_compile")["compile_graph_break"]["graphs_per_call"] == 2
    assert len(graphs["b"]) == 1
    # the step is 33 µs shorter, which the per-step spread (±0.21 ms) cannot tell from noise
    assert p["step"]["delta_us"] == pytest.approx(-39.29, abs=0.01) and not p["step"]["beyond_noise"]


def test_fp32_vs_tf32_gemm():
    p = _one("gpu_h200_compile/fp32_gemm_no_tf32.json.gz", "gpu_h200_compile/fp32_gemm_tf32.json.gz")
    _check_sums(p)
    top = p["classes"][0]
    assert top["class"] == "gpu_compute" and top["delta_us"] < 0 and p["primary"] == {"a": "gpu_compute", "b": "gpu_compute"}
    ks = {(k["name"], k["op"]): k for k in p["kernels"] if k["kind"] == "compute"}
    removed = [k for k in ks.values() if k["status"] == "removed"]
    added = [k for k in ks.values() if k["status"] == "added"]
    assert len(removed) == len(added) == 1 and removed[0]["op"] == added[0]["op"] == "aten::mm"
    assert "f32f32_f32f32" in removed[0]["name"] and "tf32" in added[0]["name"]  # CUDA cores -> tensor cores
    for rel, k, side in (("gpu_h200_compile/fp32_gemm_no_tf32.json.gz", removed[0], "a_us"),
                         ("gpu_h200_compile/fp32_gemm_tf32.json.gz", added[0], "b_us")):
        raw = [e["dur"] for e in _raw_kernels(rel) if e["name"] == k["name"]]
        assert k[side] == pytest.approx(sum(raw) / 3, abs=0.01)
    assert removed[0]["a_us"] / added[0]["b_us"] > 7  # 21.55 ms vs 2.66 ms per step


def test_optimizer_single_tensor_vs_fused():
    p = _one("gpu_h200_compile/optimizer_single_tensor.json.gz", "gpu_h200_compile/optimizer_fused.json.gz")
    _check_sums(p)
    assert p["classes"][0]["class"] == "cpu_launch" and p["classes"][0]["delta_us"] < 0
    assert p["step"]["delta_us"] < 0 and p["step"]["beyond_noise"]
    # kernels per step, against the raw kernel count (all kernels lie in the 3 steps)
    for rel, side in (("gpu_h200_compile/optimizer_single_tensor.json.gz", "a_calls"),
                      ("gpu_h200_compile/optimizer_fused.json.gz", "b_calls")):
        assert sum(k[side] or 0 for k in p["kernels"]) == pytest.approx(len(_raw_kernels(rel)) / 3)
    fused = [k for k in p["kernels"] if k["op"] == "aten::_fused_adamw_"]
    assert fused and all(k["status"] == "added" for k in fused)
    opt = next(lay for lay in p["layers"] if lay["layer"] == "Optimizer.step#AdamW.step")
    assert opt["status"] == "faster" and opt["b_us"] < opt["a_us"] / 5


def test_run_folders_pair_ranks():
    d = _diff("nccl_h200x2/ddp_balanced", "nccl_h200x2/ddp_rank1_slowed")
    assert [p["key"] for p in d["pairs"]] == ["rank0", "rank1"] and not d["unmatched_a"]
    r0, r1 = d["pairs"]
    for p in d["pairs"]:
        _check_sums(p)
    # MANIFEST.md: rank 1 spins 100 ms of CPU before backward; step +97.7 ms by CUDA events
    assert r1["step"]["delta_us"] / 1000 == pytest.approx(97.7, rel=0.03)
    assert r1["classes"][0]["class"] == "cpu_launch" and r1["classes"][0]["delta_us"] / 1000 == pytest.approx(100, rel=0.03)
    # rank 0 waits for it in NCCL: its largest shift is communication
    assert r0["classes"][0]["class"] == "communication" and r0["classes"][0]["delta_us"] / 1000 == pytest.approx(100, rel=0.10)
    assert r0["primary"]["b"] == "communication"
    # the job's nccl-wait finding (the straggler) goes from info to error
    assert [(f["code"], f["a_severity"], f["b_severity"]) for f in d["job_findings"]["changed"]] == [("TV501", "info", "error")]


@pytest.mark.parametrize(("problem", "fixed", "cls"), [
    ("fp32_gemm_highest", "fp32_gemm_tf32", "gpu_compute"),
    ("elementwise_chain_eager", "elementwise_chain_compiled", "gpu_memory"),
    ("cnn_input_nw0", "cnn_input_nw8", "input"),
])
def test_collected_twins_shift_equals_the_measured_fix(problem, fixed, cls):
    """collected2's twins were timed without the profiler (CUDA events) and their GPU time counted with plain
    json: the class the fix targets shrinks by what the fix saved on the GPU, and both primaries are labelled."""
    lab = _labels("collected2")
    p = _one(f"collected2/{problem}", f"collected2/{fixed}")
    _check_sums(p)
    assert p["classes"][0]["class"] == cls and p["classes"][0]["delta_us"] < 0
    shift_ms = -p["classes"][0]["delta_us"] / 1000
    a, b = lab[problem], lab[fixed]
    if cls == "input":  # GPU work is the same; the fix removes the wait for data
        assert shift_ms == pytest.approx(a["measured_fix_saving_ms"], rel=0.03)  # 262.6 vs 266.7 ms
        assert -p["step"]["delta_us"] / 1000 == pytest.approx(a["measured_fix_saving_ms"], rel=0.01)
    else:  # the fix makes the GPU work itself shorter
        gpu_saved = a["gpu_ms_per_recorded_step"] - b["gpu_ms_per_recorded_step"]
        assert shift_ms == pytest.approx(gpu_saved, rel=0.01)  # 18.88 vs 18.88 ms, 0.438 vs 0.438 ms
    for side, name in (("a", problem), ("b", fixed)):
        assert p["primary"][side] in lab[name].get("primary_acceptable", [lab[name]["primary"]])


def run(*args):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_cli_formats_and_errors(tmp_path):
    a, b = H200 / "elementwise_chain_eager.json.gz", H200 / "elementwise_chain_compiled.json.gz"
    r = run("diff", a, b, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 2 and doc["kind"] == "traceview-diff"
    assert doc["pairs"][0]["classes"] == _one("gpu_h200/elementwise_chain_eager.json.gz",
                                              "gpu_h200/elementwise_chain_compiled.json.gz")["classes"]
    out = tmp_path / "d.md"
    r = run("diff", a, b, "--format", "markdown", "-o", out)
    assert r.returncode == 0 and r.stdout == ""
    md = out.read_text()
    assert "**Class shift:** −426.0 µs gpu_memory" in md and "| gpu_memory | 0.527 | 0.101 |" in md
    r = run("diff", a, b)
    assert r.returncode == 0 and "class shift: −426.0 µs gpu_memory" in r.stdout
    r = run("diff", a, tmp_path / "nope.json.gz")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
    (tmp_path / "cut.json.gz").write_bytes(b.read_bytes()[:300])
    r = run("diff", a, tmp_path / "cut.json.gz")
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("traceview: error:")


def test_cpu_only_traces_compare_their_host_split():
    """Two traces without GPU activity (torch.compile on the CPU, stable vs recompiling every step) compare by the
    host's split (`cpu`): each class's time per step is its share of each step, as the analyze documents hold it."""
    from traceview.report import analyze

    a, b = "cpu_compile/compiled_stable.json.gz", "cpu_compile/recompile_every_step.json.gz"
    p = _one(a, b)
    docs = [analyze([str(SAMPLES / r)]).to_dict()["traces"][0]["cpu"] for r in (a, b)]
    got = _cls(p)
    assert set(got) == {"input", "cpu_ops", "communication", "outside_ops"}
    for side, cpu in zip(("a_us", "b_us"), docs, strict=True):
        per_step = [r["dur_us"] * r["cpu_ops_pct"] / 100 for r in cpu["split_by_step"]]
        assert got["cpu_ops"][side] == pytest.approx(sum(per_step) / len(per_step), rel=1e-3)
    assert p["primary"] == {"a": docs[0]["dominant"], "b": docs[1]["dominant"]} == {"a": "cpu_ops", "b": "cpu_ops"}
    assert abs(sum(c["delta_us"] for c in got.values()) - p["step"]["delta_us"]) < 0.01 * p["step"]["b_us"]
    assert not [w for w in p["warnings"] if "no bottleneck classes" in w]
    assert [f["rule"] for f in p["findings"]["appeared"]] == ["recompile"]
