"""The Streamlit app (app.py), headless through streamlit.testing.v1.AppTest: it shows what the CLI's JSON says."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")  # no network from streamlit

from streamlit.testing.v1 import AppTest  # noqa: E402

from traceview import cli, report  # noqa: E402
from traceview.rules_cli import build_options  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SYNC = ROOT / "sample_traces/gpu_h200/sync_item_nonzero_cpu.json.gz"
RANKS = ROOT / "sample_traces/hta/trace_filter"


def cli_doc(path: Path, step: int | None = None) -> dict:
    """What `traceview analyze PATH [--step N] --format json` prints, as a dict."""
    argv = ["analyze", str(path)] + (["--step", str(step)] if step is not None else [])
    return report.analyze([path], build_options(cli.make_parser().parse_args(argv))).to_dict()


@pytest.fixture(scope="module")
def sync_doc() -> dict:
    return cli_doc(SYNC)


def new_app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert not at.exception
    return at


def upload(at: AppTest, *paths: Path) -> AppTest:
    files = [(p.name, p.read_bytes(), "application/gzip") for p in paths]
    return at.file_uploader(key="upload").set_value(files if len(files) > 1 else files[0]).run()


def goto(at: AppTest, title: str) -> AppTest:
    """Open a page registered by st.navigation. AppTest.switch_page only takes page files, and our
    pages are functions: request the page's script hash (the registry of the last run) directly."""
    hashes = [h for h, info in at._registered_pages.items() if info.get("page_name") == title]
    assert hashes, f"no page {title!r}"
    at._page_hash = hashes[0]
    return at.run()


def chart(at: AppTest, title_start: str) -> dict:
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        if spec["layout"]["title"]["text"].startswith(title_start):
            return spec
    raise AssertionError(f"no chart titled {title_start!r}")


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_upload_overview_matches_cli(sync_doc: dict) -> None:
    at = upload(new_app(), SYNC)
    assert not at.exception and not at.error
    t = sync_doc["traces"][0]
    assert [i.value for i in at.info] == [t["verdict_text"]]
    assert metric(at, "Dominant class") == t["classification"]["dominant"] == "host_sync"
    assert metric(at, "Avg step") == f"{t['summary']['avg_step_us'] / 1000:,.3f} ms"
    spec = chart(at, "Classifier")
    csteps = t["classification"]["steps"]
    assert {d["name"] for d in spec["data"]} == set(csteps[0]["shares"])
    for d in spec["data"]:
        assert d["x"] == [str(s["step"]) for s in csteps]
        assert d["y"] == [s["shares"][d["name"]] for s in csteps]
    bd = chart(at, "Step-time breakdown")
    assert [d["y"] for d in bd["data"]] == [[s["breakdown_us"][d["name"]] for s in t["steps"]] for d in bd["data"]]


def test_findings_and_other_pages(sync_doc: dict) -> None:
    at = goto(upload(new_app(), SYNC), "Findings")
    df = at.dataframe[0].value
    assert "TV102" in set(df["code"])
    want = sync_doc["traces"][0]["findings"]
    assert list(df["code"]) == [f["code"] for f in want]
    assert list(df["savings_us"]) == [f["savings_us"] for f in want]
    assert len(at.expander) == len(want)
    for page in ("Layers", "Kernels", "Raw JSON"):  # render without exceptions
        goto(at, page)
        assert not at.exception, page
    assert at.json  # the raw document


def test_bundled_sample_input_bound() -> None:
    at = new_app()
    box = at.selectbox(key="sample")
    label = next(o for o in box.options if "resnet50_num_workers_0/" in o)
    at = goto(box.select(label).run(), "Findings")
    assert not at.exception
    df = at.dataframe[0].value
    assert df["code"].iloc[0] == "TV401" and df["rule"].iloc[0] == "input-bound"


@pytest.mark.parametrize("name,data", [
    ("junk.json", b"this is not a trace"),
    ("cut.json.gz", SYNC.read_bytes()[:100]),  # truncated gzip, nothing recoverable
], ids=["not-a-trace", "truncated-gz"])
def test_bad_input_is_an_error_not_a_traceback(name: str, data: bytes) -> None:
    at = new_app().file_uploader(key="upload").set_value((name, data, "application/octet-stream")).run()
    assert not at.exception
    assert at.error and name in at.error[0].value
    assert "/tmp" not in at.error[0].value  # the staging directory is hidden


def test_step_selector_reanalyzes(sync_doc: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import traceview.loader

    loads: list[str] = []
    real = traceview.loader.load_file

    def counting(p, *a, **k):
        loads.append(str(p))
        return real(p, *a, **k)

    monkeypatch.setattr(traceview.loader, "load_file", counting)  # what app.py imports
    monkeypatch.setattr(report, "load_file", counting)  # report.analyze's default loader
    at = upload(new_app(), SYNC)
    box = next(s for s in at.selectbox if s.label == "Step")
    assert box.options == ["all", *map(str, sync_doc["traces"][0]["summary"]["step_numbers"])]
    before = metric(at, "Avg step")
    n_loads = len(loads)
    at = box.select("2").run()
    assert len(loads) == n_loads  # a new step re-analyzes the trace the app already holds: no re-read
    want = cli_doc(SYNC, step=2)["traces"][0]
    after = metric(at, "Avg step")
    assert after == f"{want['summary']['avg_step_us'] / 1000:,.3f} ms" != before
    assert [i.value for i in at.info] == [want["verdict_text"]]
    assert chart(at, "Classifier")["data"][0]["x"] == ["2"]


def test_rank_files_show_the_job() -> None:
    ranks = sorted(RANKS.glob("*.json.gz"))
    at = upload(new_app(), *ranks)
    assert not at.exception and not at.error
    job = cli_doc(RANKS)["jobs"][0]
    assert metric(at, "Straggler rank") == str(job["nccl"]["straggler"]["rank"])
    waits = next(d.value for d in at.dataframe if "total_wait_us" in d.value.columns)
    assert list(waits["total_wait_us"]) == [r["total_wait_us"] for r in job["nccl"]["ranks"]]


@pytest.mark.parametrize("run", ["ddp_rank1_slowed", "ddp_balanced", "ddp_balanced_launch_bound"])
def test_nccl_job_from_the_sample_picker(run: str) -> None:
    d = ROOT / "sample_traces/nccl_h200x2" / run
    at = new_app()
    box = at.selectbox(key="sample")
    at = box.select(next(o for o in box.options if o.startswith(f"nccl_h200x2/{run}/"))).run()
    assert not at.exception and not at.error
    job = cli_doc(d)["jobs"][0]
    spec = chart(at, "Wait per step in NCCL kernels")
    by_name = {tr["name"]: tr["y"] for tr in spec["data"]}
    assert by_name["exposed (lost)"] == [r["exposed_wait_per_step_us"] / 1000 for r in job["nccl"]["ranks"]]
    cls = next(d.value for d in at.dataframe if "waiting for straggler %" in d.value.columns)
    artifact = [w.value for w in at.warning if "profiling overhead" in w.value]
    assert bool(artifact) == (run == "ddp_balanced_launch_bound")
    if run != "ddp_rank1_slowed":  # balanced, or a wait the profiler's overhead explains: no straggler raised
        assert not [m for m in at.metric if m.label == "Straggler rank"]
        assert cls["waiting for straggler %"].isna().all()
    else:
        assert metric(at, "Straggler rank") == "1"
        assert cls["waiting for straggler %"].iloc[0] == job["classification"][0]["straggler_wait_pct"] > 10
        why = [m.value for m in at.markdown if m.value.startswith("**Why:**")]
        assert why == [f"**Why:** {job['nccl']['straggler']['cause']['text']}"]
