"""Baselines: `traceview batch --save-baseline / --baseline` on the twins; the noise rule of baseline.py."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import pytest
from conftest import SAMPLES

from traceview import report
from traceview.cli.main import main

H200 = SAMPLES / "gpu_h200"
COMPILE = SAMPLES / "gpu_h200_compile"


def batch(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["batch", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def _doc(path) -> dict:
    return report.analyze([path]).to_dict()["traces"][0]


def _copy(src, dst):
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    return dst


def test_own_baseline_passes(tmp_path, capsys):
    base = tmp_path / "base.json"
    code, _, err = batch(capsys, COMPILE, "--save-baseline", base, "--jobs", "2")
    assert code == 0, err
    saved = json.loads(base.read_text())
    assert saved["kind"] == "traceview-baseline" and saved["schema_version"] == 1
    keys = sorted(t["key"] for t in saved["traces"])
    assert keys == sorted(p.name.removesuffix(".json.gz") for p in COMPILE.glob("*.json.gz"))
    # a digest's step time is the classifier's window over its analyzed steps, its spread that of the steps
    d = next(t for t in saved["traces"] if t["key"] == "fp32_gemm_no_tf32")
    t = _doc(COMPILE / "fp32_gemm_no_tf32.json.gz")
    c = t["classification"]
    assert d["step_us"] == pytest.approx(c["window_us"] / len(c["analyzed_steps"]), abs=0.002)
    assert d["step_sd_us"] == pytest.approx(statistics.stdev(s["dur_us"] for s in t["steps"]), abs=0.002)
    assert d["classes"]["gpu_compute"]["us"] == pytest.approx(c["time_us"]["gpu_compute"] / 3, abs=0.002)
    code, out, err = batch(capsys, COMPILE, "--baseline", base, "--out", tmp_path / "s.json")
    assert code == 0, err
    doc = json.loads((tmp_path / "s.json").read_text())
    assert {r["status"] for r in doc["rows"]} == {"ok"} and not doc["baseline"]["missing"]
    assert all(c["delta_us"] == 0 for t in doc["baseline"]["traces"] for c in t["checks"])
    assert "regression" not in err


def test_slower_twin_fails_faster_twin_passes(tmp_path, capsys):
    fast = _copy(H200 / "elementwise_chain_compiled.json.gz", tmp_path / "before" / "run.json.gz")
    slow = _copy(H200 / "elementwise_chain_eager.json.gz", tmp_path / "after" / "run.json.gz")
    base = tmp_path / "base.json"
    assert batch(capsys, fast, "--save-baseline", base)[0] == 0
    code, _, err = batch(capsys, slow, "--baseline", base, "--out", tmp_path / "s.json", "--out", tmp_path / "s.md")
    assert code == 1
    t = json.loads((tmp_path / "s.json").read_text())["baseline"]["traces"][0]
    assert t["key"] == t["base_key"] == "run" and t["status"] == "regressed"
    assert t["regressions"] == ["step_time"]  # classes gate only with --gate-classes; they are notes here
    assert next(c for c in t["checks"] if c["metric"] == "gpu_memory")["regressed"]
    step = next(c for c in t["checks"] if c["metric"] == "step_time")
    assert step["delta_pct"] == pytest.approx(100 * (537.603 - 139.317) / 139.317, abs=0.01)  # +285.9 %
    assert [(f["code"], f["severity"]) for f in t["new_findings"]] == [("TV201", "error")]
    assert not t["new_findings_gated"] and "note: run: new error finding TV201" in err
    assert "traceview: regression: run: step_time +285.9 % of the baseline step (0.139 → 0.538 ms)" in err
    md = (tmp_path / "s.md").read_text()
    assert "## Regressions against the baseline" in md and "- **step_time**: 0.139 → 0.538 ms" in md

    # the other way round (a renamed lone trace is still paired): the step is 4x faster and the gate passes.
    # What grew is shown, not failed: torch.compile's per-call host cost leaves launch gaps (cpu_launch 0 -> 38 µs
    # a step, beyond the per-step noise); --gate-classes fails on it. No new finding: labels.json measured the fused
    # kernel at 0.103 ms of the 0.119 ms unprofiled step, so one kernel a step leaves no launch chain worth a warning.
    base2 = tmp_path / "base2.json"
    assert batch(capsys, H200 / "elementwise_chain_eager.json.gz", "--save-baseline", base2)[0] == 0
    now = H200 / "elementwise_chain_compiled.json.gz"
    code, _, err = batch(capsys, now, "--baseline", base2, "--out", tmp_path / "r.json", "--out", tmp_path / "r.md")
    assert code == 0, err
    t = json.loads((tmp_path / "r.json").read_text())["baseline"]["traces"][0]
    assert (t["base_key"], t["key"], t["status"]) == ("elementwise_chain_eager", "elementwise_chain_compiled", "ok")
    step = next(c for c in t["checks"] if c["metric"] == "step_time")
    assert step["delta_us"] < 0 and not step["regressed"] and step["gated"]
    cpu = next(c for c in t["checks"] if c["metric"] == "cpu_launch")
    assert cpu["regressed"] and not cpu["gated"] and cpu["delta_us"] > cpu["noise_us"]
    assert t["regressions"] == [] and t["new_findings"] == []
    lab = json.loads((H200 / "labels.json").read_text())["elementwise_chain_compiled"]
    assert lab["timing"]["compiled_ms"] / lab["step_ms_cuda_events"] > 0.85
    per_step = {k: [s["time_us"]["cpu_launch"] for s in _doc(H200 / f"elementwise_chain_{k}.json.gz")["classification"]["steps"]]
                for k in ("eager", "compiled")}
    noise = 2 * math.sqrt(statistics.stdev(per_step["eager"]) ** 2 / 3 + statistics.stdev(per_step["compiled"]) ** 2 / 3)
    assert cpu["noise_us"] == pytest.approx(noise, abs=0.002)
    assert "regression" not in err
    assert "traceview: note: elementwise_chain_compiled: cpu_launch grew +" in err and "(--gate-classes" in err
    md = (tmp_path / "r.md").read_text()
    assert "## Regressions" not in md and "## Notes against the baseline (not gated)" in md
    assert "class shift: −" in md and "gpu\\_memory" in md
    code, _, err = batch(capsys, now, "--baseline", base2, "--gate-classes")
    assert code == 1 and "traceview: regression: elementwise_chain_compiled: cpu_launch +" in err
    code, _, err = batch(capsys, now, "--baseline", base2, "--gate-new-findings")
    assert code == 0 and "new warning finding" not in err


def test_noise_rule_and_thresholds(tmp_path, capsys):
    """compile_no_break -> compile_graph_break: the step is 11.5 % longer, beyond 5 %, but well inside the noise
    of its per-step spread: the gate passes. The graph break's host sync (+123.4 µs a step) and its new error
    findings are notes, and fail the gate where asked (--gate-classes, --gate-new-findings or the config)."""
    base = tmp_path / "base.json"
    assert batch(capsys, COMPILE / "compile_no_break.json.gz", "--save-baseline", base)[0] == 0
    now = COMPILE / "compile_graph_break.json.gz"
    code, _, err = batch(capsys, now, "--baseline", base, "--out", tmp_path / "s.json")
    assert code == 0, err
    t = json.loads((tmp_path / "s.json").read_text())["baseline"]["traces"][0]
    step = next(c for c in t["checks"] if c["metric"] == "step_time")
    sd = {k: statistics.stdev(s["dur_us"] for s in _doc(COMPILE / f"{k}.json.gz")["steps"])
          for k in ("compile_no_break", "compile_graph_break")}
    noise = 2 * math.sqrt(sd["compile_no_break"] ** 2 / 3 + sd["compile_graph_break"] ** 2 / 3)
    assert step["noise_us"] == pytest.approx(noise, abs=0.002)
    assert step["delta_pct"] == pytest.approx(11.48, abs=0.01) and step["delta_us"] < step["noise_us"]
    assert not step["regressed"] and t["regressions"] == [] and t["status"] == "ok"
    assert [c["metric"] for c in t["checks"] if c["regressed"]] == ["host_sync"]
    # the graph break itself (graph-break, TV103) is the new finding. Its host sync is the break's own (labels.json:
    # `if h.sum() > 0` syncs and splits the graph), so removing the sync alone leaves the break: TV102 is info, not new
    assert [f["code"] for f in t["new_findings"]] == ["TV103"]
    gated = ["--gate-classes", "--gate-new-findings"]
    code, _, err = batch(capsys, now, "--baseline", base, *gated, "--out", tmp_path / "g.json")
    assert code == 1
    t = json.loads((tmp_path / "g.json").read_text())["baseline"]["traces"][0]
    assert t["regressions"] == ["host_sync"] and t["status"] == "regressed" and t["new_findings_gated"]
    # a per-metric threshold and ignoring the rule let it pass; from the command line or [tool.traceview.baseline]
    assert batch(capsys, now, "--baseline", base, *gated, "--max-regression", "host_sync=50", "--ignore", "TV102,TV103")[0] == 0
    assert batch(capsys, now, "--baseline", base, *gated, "--max-regression", "host_sync=20", "--ignore", "TV102,TV103")[0] == 1
    cfg = tmp_path / "tv.toml"
    cfg.write_text("[tool.traceview.baseline]\ngate-classes = true\ngate-new-findings = true\n")
    assert batch(capsys, now, "--baseline", base, "--config", cfg)[0] == 1
    cfg.write_text("[tool.traceview]\nignore = ['TV102', 'TV103']\n[tool.traceview.baseline]\nmax-regression = 5\n"
                   "host_sync = 50\ngate-classes = true\ngate-new-findings = true\n")
    assert batch(capsys, now, "--baseline", base, "--config", cfg)[0] == 0
    # --exit-zero: report, do not fail
    assert batch(capsys, now, "--baseline", base, *gated, "--exit-zero")[0] == 0


@pytest.mark.parametrize("case", ["missing", "not json", "not a baseline", "bad metric", "bad config", "bad flag"])
def test_bad_baseline_input_exit_2(tmp_path, capsys, case):
    trace = H200 / "elementwise_chain_compiled.json.gz"
    args: list = ["--baseline", tmp_path / "b.json"]
    if case == "not json":
        (tmp_path / "b.json").write_text("{")
    elif case == "not a baseline":
        (tmp_path / "b.json").write_text(json.dumps({"traces": []}))
    elif case in ("bad metric", "bad config", "bad flag"):
        assert batch(capsys, trace, "--save-baseline", tmp_path / "b.json")[0] == 0
        if case == "bad metric":
            args += ["--max-regression", "gpu_speed=3"]
        else:
            bad = "max-regression = 'lots'" if case == "bad config" else "gate-classes = 'yes'"
            (tmp_path / "c.toml").write_text(f"[baseline]\n{bad}\n")
            args += ["--config", tmp_path / "c.toml"]
    code, out, err = batch(capsys, trace, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("traceview: error:") and "Traceback" not in err


# The twins of sample_traces/collected2 (labels.json `twin`) whose traces are small enough for a quick test
TWIN_DIR = SAMPLES / "collected2"
TWIN_LABELS = json.loads((TWIN_DIR / "labels.json").read_text())
TWINS = sorted({tuple(sorted((k, v["twin"]))) for k, v in TWIN_LABELS.items()
                if v.get("twin") and all(sum(f.stat().st_size for f in (TWIN_DIR / n).iterdir()) < 120_000
                                         for n in (k, v["twin"]))})


@pytest.fixture(scope="module")
def twin_digests() -> dict[str, dict]:
    from traceview.ci import batch as tv_batch
    from traceview.ci.discover import discover

    names = sorted({n for p in TWINS for n in p})
    res = tv_batch.run(discover([TWIN_DIR / n for n in names]).jobs, jobs=2)
    return {r["spec"]["label"]: r["digests"][0] for r in res}


def _events_regressed(base: str, now: str) -> bool:
    """The gate's step rule applied to the collector's own CUDA-event step times of the profiled steps
    (labels.json `profiled_samples_ms`), independent of the trace."""
    a, b = TWIN_LABELS[base]["profiled_samples_ms"], TWIN_LABELS[now]["profiled_samples_ms"]
    ma, mb = statistics.mean(a), statistics.mean(b)
    noise = 2 * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return mb - ma > max(0.05 * ma, noise)


def test_twins_both_ways_match_cuda_events(twin_digests):
    """Every twin pair, each way round: the gate fails exactly when the collector's CUDA-event step times say
    the step regressed beyond 5 % and their noise; a faster twin always passes, whatever class grew."""
    from traceview.ci import baseline

    assert len(TWINS) >= 5
    th = baseline.thresholds({})
    verdicts, passed_with_growth = [], []
    for a, b in TWINS:
        for base, now in ((a, b), (b, a)):
            got = baseline.compare({"traces": [twin_digests[base]]}, [twin_digests[now]], th)["traces"][0]
            assert got["base_key"] == base
            verdicts.append((base, now, got["status"] == "regressed", _events_regressed(base, now)))
            grew = [c["metric"] for c in got["checks"] if c["regressed"] and not c["gated"]]
            if got["status"] == "ok" and grew:
                passed_with_growth.append((now, grew))
            if got["status"] == "ok" and got["notes"]:
                assert got["notes"][0].startswith("step ")
    assert [v[:3] for v in verdicts] == [(*v[:2], v[3]) for v in verdicts]
    # both outcomes occur: the problem twin regresses against its fix, the fix passes against the problem
    assert {v[2] for v in verdicts} == {True, False}
    # the case: the compiled chain is faster while its host launch time grew; it passes, with a note
    assert ("elementwise_chain_compiled", ["cpu_launch"]) in passed_with_growth
