"""`traceview batch`: grouping inputs into jobs, one row per trace/run, outputs, failures, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter

import polars as pl
import pytest
from conftest import SAMPLES

from traceview import report
from traceview.ci import batch, batch_out
from traceview.ci.discover import discover
from traceview.cli.ci import _progress, batch_exit_code
from traceview.cli.main import main

H200 = SAMPLES / "gpu_h200"
DDP = SAMPLES / "nccl_h200x2/ddp_balanced"
SLOWED = SAMPLES / "nccl_h200x2/ddp_rank1_slowed"


def run(*args):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _analyze(path) -> dict:
    return report.analyze([path]).to_dict()


def test_discover_groups_runs_and_separates_unrelated_traces():
    d = discover([H200, DDP])
    traces = sorted(p.name for p in H200.glob("*.json.gz"))
    assert len(d.jobs) == len(traces) + 1 == 15 and not d.errors
    assert [j.files for j in d.jobs[:-1]] == [(str(H200 / n),) for n in traces]  # each trace its own job
    assert d.jobs[0].label == "compute_bound_gemm"
    assert [s["path"] for s in d.skipped] == [str(H200 / "labels.json")]  # not a trace: skipped, not failed
    run_ = d.jobs[-1]
    assert run_.label == "ddp_balanced" and run_.whole_folder and len(run_.files) == 2
    # collector runs (one folder each, manifest.json, rank0.<stamp>.pt.trace.json.gz): one job per run folder
    c2 = discover([SAMPLES / "collected2"])
    runs = sorted(p.name for p in (SAMPLES / "collected2").iterdir() if p.is_dir())
    assert sorted(j.label for j in c2.jobs) == runs and len(runs) == 34
    assert [s["path"] for s in c2.skipped] == [str(SAMPLES / "collected2/labels.json")]
    # a run folder is labelled by the folder whichever level the input names
    assert [j.label for j in discover([SAMPLES / "nccl_h200x2"]).jobs][:2] == ["ddp_balanced", "ddp_balanced_launch_bound"]


def test_batch_rows_and_outputs(tmp_path):
    outs = [tmp_path / f"s.{x}" for x in ("json", "csv", "parquet", "md")]
    args = [H200, DDP, "--sarif", tmp_path / "s.sarif", "--junit", tmp_path / "s.xml"]
    for o in outs:
        args += ["--out", o]
    r = run("batch", *args)
    assert r.returncode == 0, r.stderr
    # piped stderr: no progress bar, only the note about the skipped labels.json
    assert r.stderr == "traceview: skipped 1 JSON file(s) that are not traces: labels.json\n"
    doc = json.loads(outs[0].read_text())
    assert doc["kind"] == "traceview-batch" and doc["exit_code"] == 0
    rows = {row["input"]: row for row in doc["rows"]}
    assert len(rows) == 15 and {row["status"] for row in rows.values()} == {"ok"}
    # a single trace's row carries what `traceview analyze` says of it
    t = _analyze(H200 / "sync_item_nonzero_cpu.json.gz")["traces"][0]
    row = rows["sync_item_nonzero_cpu"]
    assert row["shares"] == t["classification"]["shares"] and row["primary"] == t["classification"]["dominant"] == "host_sync"
    assert row["findings"] == {s: sum(f["severity"] == s for f in t["findings"]) for s in ("error", "warning", "info")}
    assert row["top_findings"][0]["code"] == t["findings"][0]["code"]
    # the DDP run: one row for both ranks; step of the slower rank; findings of every rank and of the job
    job = _analyze(DDP)
    row = rows["ddp_balanced"]
    assert row["kind"] == "run" and row["ranks"] == 2 and row["keys"] == ["ddp_balanced/rank0", "ddp_balanced/rank1"]
    steps = [tr["classification"]["window_us"] / len(tr["classification"]["analyzed_steps"]) for tr in job["traces"]]
    assert row["step_ms"] == pytest.approx(max(steps) / 1000, abs=1e-4)
    fs = [f for tr in job["traces"] for f in tr["findings"]] + [f for j in job["jobs"] for f in j["findings"]]
    assert row["findings"] == {s: Counter(f["severity"] for f in fs)[s] for s in ("error", "warning", "info")}
    # CSV and Parquet hold the same flat rows
    flat = pl.DataFrame([batch_out.flat(x) for x in doc["rows"]])
    csv = pl.read_csv(outs[1])
    assert csv["input"].to_list() == flat["input"].to_list()
    assert csv["step_ms"].to_list() == flat["step_ms"].to_list()
    assert pl.read_parquet(outs[2]).equals(batch_out._frame(doc["rows"]))
    md = outs[3].read_text()
    assert "| `ddp_balanced` | ok |" in md and "15 trace(s)/run(s): 15 ok" in md
    # SARIF: one result per finding of every row; JUnit: one suite per trace and per job
    sarif = json.loads((tmp_path / "s.sarif").read_text())
    assert len(sarif["runs"][0]["results"]) == sum(sum(x["findings"].values()) for x in doc["rows"])
    xml = (tmp_path / "s.xml").read_text()
    assert xml.count("<testsuite ") == 14 + 2 + 1


def test_bad_file_is_one_failed_row(tmp_path):
    good = shutil.copy(H200 / "compute_bound_gemm.json.gz", tmp_path / "good.json.gz")
    (tmp_path / "cut.json.gz").write_bytes((H200 / "launch_bound_tiny_ops.json.gz").read_bytes()[:400])
    r = run("batch", tmp_path, SAMPLES / "nope", "--out", tmp_path / "s.json", "--junit", tmp_path / "j.xml")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    rows = {x["input"]: x for x in json.loads((tmp_path / "s.json").read_text())["rows"]}
    assert rows["good"]["status"] == "ok" and rows["good"]["step_ms"] > 0 and good.exists()
    assert rows["cut"]["status"] == "failed" and "truncated gzip" in rows["cut"]["error"]
    assert rows[str(SAMPLES / "nope")]["status"] == "failed"
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("traceview: error:")]
    assert len(errs) == 2 and len(r.stderr.splitlines()) == 2
    assert '<testsuite name="inputs" tests="2" failures="0" errors="2">' in (tmp_path / "j.xml").read_text()


def test_runs_sharing_a_folder(tmp_path, capsys):
    """Two runs' rank files and an unrelated trace in one folder: the k-th file of each rank is the k-th run,
    the unrelated trace its own job; the numbers equal those of the runs analyzed from their own folders."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for src in (DDP, SLOWED):
        for f in src.glob("rank*.pt.trace.json.gz"):
            shutil.copy(f, mixed / f.name)
    shutil.copy(H200 / "compute_bound_gemm.json.gz", mixed / "other.json.gz")  # no .pt.trace name: not listed
    shutil.copy(H200 / "compute_bound_gemm.json.gz", mixed / "other.pt.trace.json.gz")
    d = discover([mixed])
    assert [(j.label, len(j.files), j.whole_folder) for j in d.jobs] == [
        ("mixed", 2, False), ("mixed#2", 2, False), ("other", 1, False)]
    capsys.readouterr()
    assert main(["batch", str(mixed), str(DDP), str(SLOWED), "--jobs", "1", "--out", str(tmp_path / "s.json")]) == 0
    rows = {x["input"]: x for x in json.loads((tmp_path / "s.json").read_text())["rows"]}
    for a, b in (("mixed", "ddp_balanced"), ("mixed#2", "ddp_rank1_slowed")):
        assert rows[a]["kind"] == "run" and rows[a]["ranks"] == 2
        for k in ("step_ms", "step_sd_ms", "primary", "shares"):
            assert rows[a][k] == rows[b][k], k
        # savings are priced against the collector's measured unprofiled step where the run folder has its
        # manifest (not in `mixed`): the job's straggler error is the same, the grades of the rest may move
        assert rows[a]["findings"]["error"] == rows[b]["findings"]["error"]
        assert sum(rows[a]["findings"].values()) == sum(rows[b]["findings"].values())
    # the straggler run's job-level finding (nccl-wait naming rank 1) is in its row, ranked as in the run analyzed
    # from its own folder (there with the collector's measured profiler cost, here with the estimate)
    assert "TV501" in [f["code"] for f in rows["mixed#2"]["top_findings"]]
    assert [f["code"] for f in rows["mixed#2"]["top_findings"][:2]] == [f["code"] for f in rows["ddp_rank1_slowed"]["top_findings"][:2]]


def test_fail_on_and_exit_codes(tmp_path):
    r = run("batch", H200 / "elementwise_chain_eager.json.gz", H200 / "compute_bound_gemm.json.gz", "--fail-on", "error",
            "--out", tmp_path / "s.json")
    assert r.returncode == 1
    st = {x["input"]: x["status"] for x in json.loads((tmp_path / "s.json").read_text())["rows"]}
    assert st == {"elementwise_chain_eager": "findings", "compute_bound_gemm": "ok"}
    assert run("batch", H200 / "compute_bound_gemm.json.gz", "--out", tmp_path / "s.txt").returncode == 2
    only = tmp_path / "only_labels"
    only.mkdir()
    shutil.copy(H200 / "labels.json", only / "labels.json")
    r = run("batch", only)
    assert r.returncode == 2 and r.stderr.splitlines()[-1].endswith("directory holds no trace files (*.json, *.json.gz)")
    ok, fnd, reg, bad = ({"status": s} for s in ("ok", "findings", "regressed", "failed"))
    assert batch_exit_code([ok], False, False) == 0
    assert batch_exit_code([ok, fnd], False, False) == 1 and batch_exit_code([reg], True, False) == 1
    assert batch_exit_code([fnd, reg], True, True) == 0 and batch_exit_code([ok, bad], False, True) == 2


def test_progress_only_on_a_terminal(monkeypatch):
    class Tty:
        def isatty(self):
            return True

        def write(self, s):
            return len(s)

        def flush(self):
            pass

    tick, stop = _progress(3)
    assert tick is None  # pytest's stderr is not a terminal
    monkeypatch.setattr(sys, "stderr", Tty())
    tick, stop = _progress(3)
    assert callable(tick)
    tick({"spec": {"label": "x"}})
    stop()


def test_rows_of_a_failed_job_keep_input_order():
    specs = discover([H200 / "compute_bound_gemm.json.gz", H200 / "labels.json", H200 / "seed_relu_linear_m8.json.gz"]).jobs
    res = batch.run(specs, jobs=1)
    assert [r["spec"]["label"] for r in res] == ["compute_bound_gemm", "labels", "seed_relu_linear_m8"]
    assert res[1]["error"] and "traceEvents" in res[1]["error"] and not res[1]["digests"]  # named explicitly: a failure
    assert [batch.row(r)["status"] for r in res] == ["ok", "failed", "ok"]
