"""The app's pages added or changed for issues 24/30/31 (traceview/app/pages/), headless through AppTest: the
Job page leads a folder of ranks, the Memory chart, the findings table's columns, the Diff page without module
information in B, the projection waterfall and its table, and the Trends page over a history database — every
number checked against the CLI's JSON (and the raw trace where one can be read independently)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")  # no network from streamlit

from test_app import ROOT, chart, cli_doc, goto, new_app, plain, upload  # noqa: E402

SAMPLES = ROOT / "sample_traces"
MEMORY = SAMPLES / "gpu_h200_memory/memory_pressure_empty_cache.json.gz"
MODULES = SAMPLES / "gpu_h200/train_tinygpt_modules.json.gz"
NO_MODULES = SAMPLES / "gpu_h200/train_tinygpt_input_bound.json.gz"
EAGER = SAMPLES / "gpu_h200/elementwise_chain_eager.json.gz"
COMPILED = SAMPLES / "gpu_h200/elementwise_chain_compiled.json.gz"


def pick(at, prefix: str):  # noqa: ANN001, ANN201 - AppTest
    box = at.selectbox(key="sample")
    return box.select(next(o for o in box.options if o.startswith(prefix))).run()


def test_a_job_folder_lands_on_the_job_page() -> None:
    at = pick(new_app(), "nccl_h200x2/ddp_rank1_slowed/ (all ranks)")
    assert not at.exception and not at.error
    assert [h.value for h in at.header] == ["Job"]  # the landing page: the job, before any rank
    titles = [info["page_name"] for info in at._registered_pages.values()]
    assert titles[:2] == ["Job", "Overview"]
    job = cli_doc(SAMPLES / "nccl_h200x2/ddp_rank1_slowed")["jobs"][0]
    strag = job["nccl"]["straggler"]
    assert next(m.value for m in at.metric if m.label == "Straggler rank") == str(strag["rank"]) == "1"
    spec = chart(at, "Wait per step in NCCL kernels")
    by_name = {tr["name"]: tr["y"] for tr in spec["data"]}
    assert by_name["wait"] == [r["wait_per_step_us"] / 1000 for r in job["nccl"]["ranks"]]
    # the rank's Overview is a page of its own, with the verdict of the selected rank
    at = goto(at, "Overview")
    assert (
        plain(at.info[0].value)
        == cli_doc(SAMPLES / "nccl_h200x2/ddp_rank1_slowed")["traces"][0]["verdict_text"]
    )
    # one trace still lands on its Overview
    at = upload(new_app(), COMPILED)
    assert [h.value for h in at.header] == ["Overview"]
    assert "Job" not in [info["page_name"] for info in at._registered_pages.values()]


def _raw_memory_peak_gib(path: Path) -> float:
    """The largest `Total Allocated` of the trace's [memory] instant events, read with the stdlib."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]") / 2**30


def test_memory_page_plots_allocated_and_reserved_with_peak_and_capacity() -> None:
    t = cli_doc(MEMORY)["traces"][0]
    mem = t["memory"]
    (dev,) = mem["devices"]
    at = goto(upload(new_app(), MEMORY), "Memory")
    assert not at.exception and not at.error
    spec = chart(at, "GPU 0 memory over the steps")
    by = {tr["name"]: tr for tr in spec["data"]}
    assert by["allocated"]["y"] == dev["timeline"]["allocated_gib"]
    assert by["reserved"]["y"] == dev["timeline"]["reserved_gib"]
    assert by["allocated"]["x"] == [x / 1000 for x in dev["timeline"]["ts_us"]]
    assert set(by["capacity"]["y"]) == {dev["capacity_gib"]} == {139.801}  # the H200's totalGlobalMem
    assert by["peak"]["y"] == [mem["peak"]["allocated_gib"]] and by["peak"]["x"] == [
        mem["peak"]["ts_us"] / 1000
    ]
    # the peak is the raw trace's: recomputed from the [memory] events
    assert mem["peak"]["allocated_gib"] == pytest.approx(_raw_memory_peak_gib(MEMORY), abs=1e-3)
    assert max(by["allocated"]["y"]) == pytest.approx(mem["peak"]["allocated_gib"], abs=1e-3)
    # a dotted line at each step's start
    lines = [s["x0"] for s in spec["layout"]["shapes"]]
    assert lines == [s["start_us"] / 1000 for s in t["steps"]]
    steps = next(d.value for d in at.dataframe if "peak allocated gib" in d.value.columns)
    assert list(steps["peak allocated gib"]) == [s["peak_allocated_gib"] for s in dev["steps"]]


def test_findings_table_leads_with_the_saving() -> None:
    t = cli_doc(MEMORY)["traces"][0]
    at = goto(upload(new_app(), MEMORY), "Findings")
    df = at.dataframe[0]
    assert list(df.value.columns)[:3] == ["code", "severity", "save ms/step"]
    assert list(df.value.columns)[-1] == "title"  # the long text last: the numbers stay on screen
    want = [f for f in t["findings"] if f["savings_us"]]
    assert list(df.value["code"]) == [f["code"] for f in want]
    assert list(df.value["save ms/step"]) == [round(f["savings_us"] / 1000, 3) for f in want]
    cfg = json.loads(df.proto.columns)
    assert cfg["code"]["pinned"] and cfg["save ms/step"]["pinned"]
    assert cfg["title"]["width"] == "medium"


def test_diff_says_no_module_information_in_b() -> None:
    from traceview.ci.diff import diff

    a, b = cli_doc(MODULES), cli_doc(NO_MODULES)
    assert (a["traces"][0]["layers"]["source"], b["traces"][0]["layers"]["source"]) == ("modules", "ops")
    (p,) = diff(a, b)["pairs"]
    removed = [r for r in p["layers"] if r["status"] == "removed"]
    modules = {r["layer"] for r in a["traces"][0]["layers"]["layers"] if r["layer"].startswith("TinyGPT_0")}
    assert len(modules) == 35 and modules <= {r["layer"] for r in removed}  # what the table used to list
    at = goto(upload(new_app(), MODULES), "Diff")
    at = at.selectbox(key="sample_b").select("gpu_h200/train_tinygpt_input_bound.json.gz").run()
    assert not at.exception and not at.error
    warn = [plain(w.value) for w in at.warning if "module information" in w.value]
    assert len(warn) == 1 and warn[0].startswith("No module information in B (layer source: ops)")
    tables = [d.value for d in at.dataframe if "status" in d.value.columns and "layer" in d.value.columns]
    assert tables == []  # no layer listed as "removed"
    kernels = next(d.value for d in at.dataframe if "status" in d.value.columns and "name" in d.value.columns)
    assert list(kernels["name"]) == [k["name"] for k in p["kernels"][:30]]  # kernels are still compared
    # both with modules: the layer table is there
    at = at.selectbox(key="sample_b").select("gpu_h200/train_tinygpt_modules.json.gz").run()
    assert not [w for w in at.warning if "module information" in w.value]
    assert [d for d in at.dataframe if "layer" in d.value.columns and "status" in d.value.columns]


def test_waterfall_and_its_table_show_the_same_numbers() -> None:
    t = cli_doc(MEMORY)["traces"][0]
    p = t["projection"]
    at = upload(new_app(), MEMORY)
    wf = chart(at, "Replayed step time")["data"][0]
    fixes = [f for f in p["fixes"] if f["savings_us"]]
    assert wf["x"][1:-2] == [f"{f['code']} {f['rule']}" for f in fixes]
    assert wf["y"][0] == p["replayed_unprofiled_step_us"] / 1000
    assert wf["y"][1:-2] == [-f["savings_us"] / 1000 for f in fixes]
    # each fix's bar is its findings' savings together (docs/json-schema.md: the same number)
    for f in fixes:
        assert sum(x["savings_us"] for x in t["findings"] if x["code"] == f["code"]) == pytest.approx(
            f["savings_us"], abs=0.01
        )
    # the bars add up to the step with every fix (plotly's total bar)
    assert sum(wf["y"][:-1]) == pytest.approx(p["all_fixed_unprofiled_step_us"] / 1000, abs=1e-6)
    table = next(d.value for d in at.dataframe if "bar" in d.value.columns)
    assert list(table["bar"]) == wf["x"]
    shown = list(table["change (ms)"])
    assert shown[:-1] == [round(y, 3) for y in wf["y"][:-1]]
    assert shown[-1] == round(p["all_fixed_unprofiled_step_us"] / 1000, 3)
    # every fix together never lengthens the step, and leaves some of it
    assert 0 < p["all_fixed_unprofiled_step_us"] <= p["replayed_unprofiled_step_us"]


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A history of six CI runs of one job `train`: the compiled elementwise chain four times, then the eager one
    twice (a change that undid the fusion): `traceview batch` rows stored with `traceview history add`."""
    from traceview.cli.main import main

    base = tmp_path_factory.mktemp("history")
    db = base / "h.duckdb"
    for name, src in (("fast", COMPILED), ("slow", EAGER)):
        (base / name / "train").mkdir(parents=True)
        (base / name / "train" / "trace.json.gz").write_bytes(src.read_bytes())
    cwd = Path.cwd()
    try:
        for name in ("fast", "slow"):
            os.chdir(base / name)
            assert main(["batch", "train", "--out", "rows.json"]) in (0, 1)
        for day, name in enumerate(["fast"] * 4 + ["slow"] * 2, start=1):
            assert (
                main(
                    [
                        "history",
                        "add",
                        "--db",
                        str(db),
                        str(base / name / "rows.json"),
                        "--label",
                        f"date=2026-01-0{day}",
                        "--label",
                        f"commit=c{day}",
                    ]
                )
                == 0
            )
    finally:
        os.chdir(cwd)
    return db


def test_trends_page_plots_the_history(history_db: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from traceview.cli.main import main

    capsys.readouterr()
    assert main(["history", "show", "--db", str(history_db), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)  # what the CLI prints
    step = next(s for s in shown["series"] if s["job"] == "train" and s["metric"] == "step_ms")
    assert step["label"] == "regression" and step["violations"] == [5, 6]
    # the stored step times are the analyze documents' average steps (batch rows round to 0.1 µs)
    fast = cli_doc(COMPILED)["traces"][0]["summary"]["avg_step_us"] / 1000
    slow = cli_doc(EAGER)["traces"][0]["summary"]["avg_step_us"] / 1000
    assert [p["value"] for p in step["points"]] == pytest.approx([fast] * 4 + [slow] * 2, abs=1e-4)

    at = goto(new_app(), "Trends")
    at = at.text_input(key="history_db").set_value(str(history_db)).run()
    assert not at.exception and not at.error
    spec = chart(at, "train: step time per run")
    by = {tr["name"]: tr for tr in spec["data"]}
    assert by["step_ms"]["y"] == [p["value"] for p in step["points"]]
    assert by["step_ms"]["x"] == [p["date"] for p in step["points"]]
    flagged = by["beyond the threshold (regression)"]
    assert flagged["x"] == [p["date"] for p in step["points"][4:]]  # runs 5 and 6
    assert flagged["y"] == [p["value"] for p in step["points"][4:]]
    mem = next(s for s in shown["series"] if s["job"] == "train" and s["metric"] == "gpu_memory_ms")
    assert by["gpu_memory"]["y"] == [p["value"] for p in mem["points"]]
    table = at.dataframe[0].value
    assert list(table["step trend"]) == ["regression"]
    assert list(table["last ms"]) == [step["last"]]


def test_trends_page_with_a_foreign_file_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "not.duckdb"
    bad.write_bytes(b"SQLite format 3\0" + bytes(100))
    at = goto(new_app(), "Trends")
    at = at.text_input(key="history_db").set_value(str(bad)).run()
    assert not at.exception
    assert len(at.error) == 1 and "not a DuckDB database" in plain(at.error[0].value)
    at = at.text_input(key="history_db").set_value(str(tmp_path / "none.duckdb")).run()
    assert not at.exception and not at.error and "No history at" in plain(at.info[0].value)
