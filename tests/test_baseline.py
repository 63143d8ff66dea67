"""Baselines: `traceview batch --save-baseline / --baseline` on the twins; the noise rule of baseline.py."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import pytest
from conftest import SAMPLES

from traceview import report
from traceview.cli import main

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
    assert t["regressions"][:2] == ["step_time", "gpu_memory"]
    step = next(c for c in t["checks"] if c["metric"] == "step_time")
    assert step["delta_pct"] == pytest.approx(100 * (537.603 - 139.317) / 139.317, abs=0.01)  # +285.9 %
    assert [(f["code"], f["severity"]) for f in t["new_findings"]] == [("TV201", "error")]
    assert "traceview: regression: run: step_time +285.9 % of the baseline step (0.139 → 0.538 ms)" in err
    md = (tmp_path / "s.md").read_text()
    assert "## Regressions against the baseline" in md and "- **step_time**: 0.139 → 0.538 ms" in md

    # the other way round (a renamed lone trace is still paired): the step is 4x faster, yet the gate fails on
    # what appeared: torch.compile's per-call host cost leaves launch gaps (cpu_launch 0 -> 38 µs a step, beyond
    # the per-step noise) and a new TV101 error. A faster run is not waved through when a new bottleneck shows.
    base2 = tmp_path / "base2.json"
    assert batch(capsys, H200 / "elementwise_chain_eager.json.gz", "--save-baseline", base2)[0] == 0
    code, _, err = batch(capsys, H200 / "elementwise_chain_compiled.json.gz", "--baseline", base2,
                         "--out", tmp_path / "r.json")
    assert code == 1, err
    t = json.loads((tmp_path / "r.json").read_text())["baseline"]["traces"][0]
    assert (t["base_key"], t["key"]) == ("elementwise_chain_eager", "elementwise_chain_compiled")
    step = next(c for c in t["checks"] if c["metric"] == "step_time")
    assert step["delta_us"] < 0 and not step["regressed"]
    cpu = next(c for c in t["checks"] if c["metric"] == "cpu_launch")
    assert cpu["regressed"] and cpu["delta_us"] > cpu["noise_us"]
    # an error: the estimated unprofiled step (0.125 ms; measured 0.119) leaves most of the launch gaps to the
    # loop, not to the profiler (the linear model's 0.110 ms made it a warning)
    assert "new error finding TV101" in err
    per_step = {k: [s["time_us"]["cpu_launch"] for s in _doc(H200 / f"elementwise_chain_{k}.json.gz")["classification"]["steps"]]
                for k in ("eager", "compiled")}
    noise = 2 * math.sqrt(statistics.stdev(per_step["eager"]) ** 2 / 3 + statistics.stdev(per_step["compiled"]) ** 2 / 3)
    assert cpu["noise_us"] == pytest.approx(noise, abs=0.002)


def test_noise_rule_and_thresholds(tmp_path, capsys):
    """compile_no_break -> compile_graph_break: the step is 8.5 % longer, beyond 5 %, but well inside the noise of
    its per-step spread; the graph break's host sync (+123.4 µs a step) and its new error finding do fail."""
    base = tmp_path / "base.json"
    assert batch(capsys, COMPILE / "compile_no_break.json.gz", "--save-baseline", base)[0] == 0
    now = COMPILE / "compile_graph_break.json.gz"
    code, _, err = batch(capsys, now, "--baseline", base, "--out", tmp_path / "s.json")
    assert code == 1
    t = json.loads((tmp_path / "s.json").read_text())["baseline"]["traces"][0]
    step = next(c for c in t["checks"] if c["metric"] == "step_time")
    sd = {k: statistics.stdev(s["dur_us"] for s in _doc(COMPILE / f"{k}.json.gz")["steps"])
          for k in ("compile_no_break", "compile_graph_break")}
    noise = 2 * math.sqrt(sd["compile_no_break"] ** 2 / 3 + sd["compile_graph_break"] ** 2 / 3)
    assert step["noise_us"] == pytest.approx(noise, abs=0.002)
    assert step["delta_pct"] == pytest.approx(11.48, abs=0.01) and step["delta_us"] < step["noise_us"]
    assert not step["regressed"] and t["regressions"] == ["host_sync"]
    # the graph break itself (graph-break, TV103) and its host sync (TV102) are the new findings
    assert [f["code"] for f in t["new_findings"]] == ["TV103", "TV102"]
    # a per-metric threshold and ignoring the rule let it pass; from the command line or [tool.traceview.baseline]
    assert batch(capsys, now, "--baseline", base, "--max-regression", "host_sync=50", "--ignore", "TV102,TV103")[0] == 0
    assert batch(capsys, now, "--baseline", base, "--max-regression", "host_sync=20", "--ignore", "TV102,TV103")[0] == 1
    cfg = tmp_path / "tv.toml"
    cfg.write_text("[tool.traceview]\nignore = ['TV102', 'TV103']\n[tool.traceview.baseline]\nmax-regression = 5\nhost_sync = 50\n")
    assert batch(capsys, now, "--baseline", base, "--config", cfg)[0] == 0
    # --exit-zero: report, do not fail
    assert batch(capsys, now, "--baseline", base, "--exit-zero")[0] == 0


@pytest.mark.parametrize("case", ["missing", "not json", "not a baseline", "bad metric", "bad config"])
def test_bad_baseline_input_exit_2(tmp_path, capsys, case):
    trace = H200 / "elementwise_chain_compiled.json.gz"
    args: list = ["--baseline", tmp_path / "b.json"]
    if case == "not json":
        (tmp_path / "b.json").write_text("{")
    elif case == "not a baseline":
        (tmp_path / "b.json").write_text(json.dumps({"traces": []}))
    elif case in ("bad metric", "bad config"):
        assert batch(capsys, trace, "--save-baseline", tmp_path / "b.json")[0] == 0
        if case == "bad metric":
            args += ["--max-regression", "gpu_speed=3"]
        else:
            (tmp_path / "c.toml").write_text("[baseline]\nmax-regression = 'lots'\n")
            args += ["--config", tmp_path / "c.toml"]
    code, out, err = batch(capsys, trace, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("traceview: error:") and "Traceback" not in err
