"""The Streamlit app (app.py), headless through streamlit.testing.v1.AppTest: it shows what the CLI's JSON says."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")  # no network from streamlit

from streamlit.testing.v1 import AppTest  # noqa: E402

import traceview.cli.main as cli  # noqa: E402
from traceview import report
from traceview.app.pages.overview import waterfall_rows  # noqa: E402
from traceview.cli.rules import build_options  # noqa: E402

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
    # a bound for one script run on a loaded 2-core box (a 2-rank job's timeline), not a measurement
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
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


def plain(s: str) -> str:
    """Markdown text as shown: the app escapes every trace-derived string."""
    return re.sub(r"\\(.)", r"\1", s)


def ms_value(text: str) -> float:
    """'2.26 ms' / '354.9 µs' -> µs."""
    num, unit = text.replace(",", "").split()
    return float(num) * (1000 if unit == "ms" else 1)


def test_upload_overview_matches_cli(sync_doc: dict) -> None:
    at = upload(new_app(), SYNC)
    assert not at.exception and not at.error
    t = sync_doc["traces"][0]
    assert [plain(i.value) for i in at.info] == [t["verdict_text"]]
    assert metric(at, "Dominant class") == t["classification"]["dominant"] == "host_sync"
    avg = metric(at, "Avg step")  # 2.26 ms: two decimals between 1 and 100 ms
    assert avg.endswith(" ms") and ms_value(avg) == pytest.approx(t["summary"]["avg_step_us"], abs=5)
    spec = chart(at, "Classifier")
    csteps = t["classification"]["steps"]
    assert {d["name"] for d in spec["data"]} == set(csteps[0]["shares"])
    for d in spec["data"]:
        assert d["x"] == [str(s["step"]) for s in csteps]
        assert d["y"] == [s["shares"][d["name"]] for s in csteps]
    bd = chart(at, "Step-time breakdown")
    assert [d["y"] for d in bd["data"]] == [[s["breakdown_us"][d["name"]] / 1000 for s in t["steps"]] for d in bd["data"]]


def test_findings_and_other_pages(sync_doc: dict) -> None:
    at = goto(upload(new_app(), SYNC), "Findings")
    df = at.dataframe[0].value
    assert "TV102" in set(df["code"])
    found = sync_doc["traces"][0]["findings"]
    want = [f for f in found if f["savings_us"] > 0]
    # every finding here has a replayed saving (TV101's CUDA-graph replay keeps 0.40 ms/step once the
    # profiler's cost is removed: it used to be the profiler's own and folded)
    zero = [f for f in found if not f["savings_us"]]
    assert zero == [] and [f["code"] for f in found if f["code"] == "TV101"] == ["TV101"]
    assert list(df["code"]) == [f["code"] for f in want]
    assert list(df["save ms/step"]) == [round(f["savings_us"] / 1000, 3) for f in want]
    # one expander per finding with savings, and one folding those without
    assert len(at.expander) == len(want)
    for page in ("Timeline", "Layers", "Kernels", "Raw JSON"):  # render without exceptions
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
    # the app's findings are the document's, in its order (what to fix first leads); the in-process DataLoader
    # is found (tb_plugin: 33.4 % of the step). Its saving is what is left once the larger fixes are made
    # (fixrunner.marginal_savings, in order of saving alone), and the table lists what still saves
    doc = cli_doc(ROOT / "sample_traces/kineto_resnet50/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    assert list(df["code"]) == [f["code"] for f in doc["traces"][0]["findings"]][: len(df)]
    loader = next(f for f in doc["traces"][0]["findings"] if f["rule"] == "input-bound")
    assert loader["evidence"]["dataloader_pct"] == pytest.approx(33.4, abs=0.1)
    after = loader["evidence"]["after_larger_fixes"]
    assert after["alone_savings_us"] > 0 and after["fixes"]
    assert ("TV401" in set(df["code"])) == (loader["savings_us"] > 0)


@pytest.mark.parametrize("name,data", [
    ("junk.json", b"this is not a trace"),
    ("cut.json.gz", SYNC.read_bytes()[:100]),  # truncated gzip, nothing recoverable
], ids=["not-a-trace", "truncated-gz"])
def test_bad_input_is_an_error_not_a_traceback(name: str, data: bytes) -> None:
    at = new_app().file_uploader(key="upload").set_value((name, data, "application/octet-stream")).run()
    assert not at.exception
    assert at.error and name in plain(at.error[0].value)
    assert "/tmp" not in at.error[0].value  # the staging directory is hidden
    assert "\n" not in at.error[0].value  # one line


def test_trace_strings_are_escaped_for_markdown() -> None:
    """A file name is trace-derived text: shown literally, never as a link, HTML or emphasis."""
    name = "**x**[link](example.com)<b>$y$:red[z].json"
    at = new_app().file_uploader(key="upload").set_value((name, b"not a trace", "application/json")).run()
    assert not at.exception
    shown = at.error[0].value
    assert plain(shown).startswith(name + ": ")
    for raw in ("**x**", "[link](", "<b>", "$y$", ":red["):
        assert raw not in shown


def test_step_selector_reanalyzes(sync_doc: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import traceview.ingest.loader

    loads: list[str] = []
    real = traceview.ingest.loader.load_file

    def counting(p, *a, **k):
        loads.append(str(p))
        return real(p, *a, **k)

    monkeypatch.setattr(traceview.ingest.loader, "load_file", counting)  # what app.py imports
    monkeypatch.setattr(report, "load_file", counting)  # report.analyze's default loader
    import streamlit as st

    st.cache_data.clear()  # analyzed documents are shared between sessions: make this session load the trace
    at = upload(new_app(), SYNC)
    box = next(s for s in at.selectbox if s.label == "Step")
    assert box.options == ["all", *map(str, sync_doc["traces"][0]["summary"]["step_numbers"])]
    before = metric(at, "Avg step")
    n_loads = len(loads)
    at = box.select("2").run()
    assert len(loads) == n_loads  # a new step re-analyzes the trace the app already holds: no re-read
    want = cli_doc(SYNC, step=2)["traces"][0]
    after = metric(at, "Avg step")
    assert ms_value(after) == pytest.approx(want["summary"]["avg_step_us"], abs=5) and after != before
    assert [plain(i.value) for i in at.info] == [want["verdict_text"]]
    assert chart(at, "Classifier")["data"][0]["x"] == ["2"]


def test_measured_unprofiled_step_reprices(sync_doc: dict) -> None:
    """The sidebar's "Step without the profiler" is `--unprofiled-ms`: the overview's note and the projection's
    waterfall become the CLI's with that step; a new input goes back to the estimate."""
    at = upload(new_app(), SYNC)
    at = at.number_input(key="unprofiled_ms").set_value(2.0).run()
    assert not at.exception and not at.error
    argv = ["analyze", str(SYNC), "--unprofiled-ms", "2.0"]
    want = report.analyze([SYNC], build_options(cli.make_parser().parse_args(argv))).to_dict()["traces"][0]
    assert want["projection"]["unprofiled_source"] == "user"
    assert any("as you measured it" in plain(c.value) for c in at.caption)
    rows = waterfall_rows(want["projection"])
    assert chart(at, "Replayed step time")["data"][0]["y"] == [
        r["change_us"] / 1000 if r["measure"] != "total" else 0 for r in rows]
    assert rows[0]["change_us"] != waterfall_rows(sync_doc["traces"][0]["projection"])[0]["change_us"]
    at = new_app().selectbox(key="sample").select("gpu_h200/elementwise_chain_eager.json.gz").run()
    at = at.number_input(key="unprofiled_ms").set_value(0.3).run()
    at = at.selectbox(key="sample").select("gpu_h200/elementwise_chain_compiled.json.gz").run()
    assert at.number_input(key="unprofiled_ms").value == 0.0 and not at.exception


def test_rank_files_show_the_job() -> None:
    ranks = sorted(RANKS.glob("*.json.gz"))
    at = upload(new_app(), *ranks)
    assert not at.exception and not at.error
    job = cli_doc(RANKS)["jobs"][0]
    assert metric(at, "Straggler rank") == str(job["nccl"]["straggler"]["rank"])
    waits = next(d.value for d in at.dataframe if "total wait (ms)" in d.value.columns)
    assert list(waits["total wait (ms)"]) == [round(r["total_wait_us"] / 1000, 3) for r in job["nccl"]["ranks"]]


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
        assert (cls["waiting for straggler %"] == "–").all()  # no straggler: a dash, never None
    else:
        assert metric(at, "Straggler rank") == "1"
        assert float(cls["waiting for straggler %"].iloc[0]) == job["classification"][0]["straggler_wait_pct"] > 10
        why = [m.value for m in at.markdown if m.value.startswith("**Why:**")]
        # the cause leads the job, escaped for Markdown (backslashes before punctuation)
        assert [w.replace("\\", "") for w in why] == [f"**Why:** {job['nccl']['straggler']['cause']['text']}"]
        assert cls["waiting for straggler %"].iloc[1] == "–"  # the straggler itself
        artifact = [w.value for w in at.warning if "profiling overhead" in w.value]
        assert bool(artifact) == (run == "ddp_balanced_launch_bound")


def charts(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def test_timeline_page_draws_the_step() -> None:
    from traceview import load
    from traceview.sections.timeline import timeline

    at = goto(upload(new_app(), SYNC), "Timeline")
    assert not at.exception and not at.error
    at = at.selectbox(key="tl_step").select(2).run()
    tl = timeline(load(SYNC), 2, 5000)  # the page's default cap
    spec = chart(at, "Step 2 timeline")
    # the classifier row: one bar per merged segment, per class, in the class's legend group
    row = [(d["name"], b, x) for d in spec["data"] if d["type"] == "bar"
           for y, b, x in zip(d["y"], d["base"], d["x"], strict=True) if y == "classifier"]
    assert len(row) == len(tl["segments"])
    for c, v in tl["class_us"].items():
        segs = [s for s in tl["segments"] if s["cls"] == c]
        assert [b for n, b, _ in row if n == c] == [s["ts_us"] / 1000 for s in segs]
        assert sum(x for n, _, x in row if n == c) == pytest.approx(v / 1000, abs=1e-3)
    drawn = sum(len(d["x"]) for d in spec["data"] if d["type"] == "bar" and d["name"] != "elementwise chain") \
        - len(tl["segments"])
    assert drawn == tl["counts"]["drawn"] == 496
    syncs = next(d for d in spec["data"] if d["name"] == "sync")
    assert len(syncs["x"]) == len(tl["syncs"]) == 18
    assert sum(len(d["x"]) for d in spec["data"] if d["name"] == "elementwise chain") == len(tl["chains"])
    assert spec["layout"]["xaxis"]["range"] == [0, tl["dur_us"] / 1000]
    # zoom to the costliest sync: the x range frames its window
    box = at.selectbox(key="tl_zoom")
    at = box.select(next(o for o in box.options if o.startswith("TV102"))).run()
    w = next(w for w in tl["windows"] if w["code"] == "TV102")
    lo, hi = chart(at, "Step 2 timeline")["layout"]["xaxis"]["range"]
    assert lo < w["ts_us"] / 1000 < w["end_us"] / 1000 <= hi <= tl["dur_us"] / 1000


def test_nccl_waits_shaded_on_the_rank_timeline() -> None:
    from traceview import load
    from traceview.sections.timeline import timeline

    rank0 = next((ROOT / "sample_traces/nccl_h200x2/ddp_rank1_slowed").glob("rank0.*.json.gz"))
    at = goto(upload(new_app(), rank0), "Timeline")
    step = at.selectbox(key="tl_step").value
    tl = timeline(load(rank0), step, 5000)
    spec = chart(at, f"Step {step} timeline")
    shapes = spec["layout"].get("shapes", [])
    assert len(shapes) == min(100, len(tl["nccl_waits"])) > 0
    longest = max(tl["nccl_waits"], key=lambda w: w["end_us"] - w["ts_us"])
    assert any(s["x0"] == longest["ts_us"] / 1000 and s["x1"] == longest["end_us"] / 1000 for s in shapes)


def test_finding_jumps_to_its_window_on_the_timeline(sync_doc: dict) -> None:
    """Each finding links to the Timeline page with its code and first step as query parameters
    (tests/test_browser.py clicks one); the Timeline page opens that step zoomed to the finding's window."""
    at = goto(upload(new_app(), SYNC), "Findings")
    want = sync_doc["traces"][0]["findings"]
    links = at.get("page_link")
    assert len(links) == len([f for f in want if f["savings_us"] > 0])  # the folded zero-savings ones have none
    k = next(i for i, f in enumerate(want) if f["code"] == "TV102")
    at.query_params["jump"] = "TV102"
    at.query_params["step"] = str(want[k]["steps"][0])
    at = goto(at, "Timeline")
    assert not at.exception
    assert at.selectbox(key="tl_zoom").value.startswith("TV102")
    assert at.selectbox(key="tl_step").value == want[k]["steps"][0]
    assert chart(at, f"Step {want[k]['steps'][0]} timeline")["layout"]["xaxis"]["range"][0] > 0


def test_layers_icicle_and_layer_detail() -> None:
    from traceview import load
    from traceview.layer_detail import layer_detail

    modules = ROOT / "sample_traces/gpu_h200/train_tinygpt_modules.json.gz"
    doc = cli_doc(modules)["traces"][0]
    at = goto(upload(new_app(), modules), "Layers")
    assert not at.exception
    spec = chart(at, "GPU time by layer")
    ice = spec["data"][0]
    rows = [r for r in doc["layers"]["layers"] if r["gpu_us"] > 0]
    assert ice["type"] == "icicle" and ice["ids"][1:] == [r["layer"] for r in rows]
    assert sum(ice["values"]) == pytest.approx(sum(r["self_gpu_us"] for r in rows) / 1000, abs=1e-3)
    assert sum(ice["values"]) == pytest.approx(doc["layers"]["total_gpu_us"] / 1000, abs=1e-2)  # the whole tree
    assert ice["parents"].count(ice["ids"][0]) == sum(r["depth"] == 0 for r in rows)  # one root above the tops
    colors = dict(zip(ice["ids"], ice["marker"]["colors"], strict=True))
    legend = {d["name"] for d in spec["data"][1:]}
    assert legend == {r["dominant"] for r in rows if r.get("dominant")}
    overview = chart(goto(at, "Overview"), "Classifier")  # the same class, the same colour
    by_class = {d["name"]: d["marker"]["color"] for d in overview["data"]}
    assert all(colors[r["layer"]] == by_class[r["dominant"]] for r in rows if r.get("dominant"))
    at = goto(at, "Layers")
    layer = "TinyGPT_0/Block_0/MultiheadAttention_0"
    at = at.selectbox(key="layer_sel").select(layer).run()
    d = layer_detail(load(modules), layer, findings=doc["findings"])
    ops = next(df.value for df in at.dataframe if "cpu (ms)" in df.value.columns)  # the layer's ops
    assert list(ops["op"]) == [o["op"] for o in d["ops"]] and ops["kernels"].iloc[0] == 24
    found = next(df.value for df in at.dataframe if "code" in df.value.columns)  # the layer's findings
    # its FP32 GEMMs and the launch gaps placed in it, in the document's order (replayed saving)
    ranked_codes = list(dict.fromkeys(f["code"] for f in doc["findings"] if f["code"] in ("TV202", "TV101")))
    assert sorted(found["code"]) == ["TV101", "TV202"] and list(dict.fromkeys(found["code"])) == ranked_codes


def test_one_colour_per_name_and_no_raw_cells() -> None:
    """Across every chart of every page a series name has one colour; no table shows None, NaN or a dict."""
    d = ROOT / "sample_traces/nccl_h200x2/ddp_rank1_slowed"
    at = new_app()
    box = at.selectbox(key="sample")
    at = box.select(next(o for o in box.options if o.startswith("nccl_h200x2/ddp_rank1_slowed/"))).run()
    seen: dict[str, str] = {}
    for page in ("Job", "Overview", "Findings", "Timeline", "Layers", "Kernels"):
        at = goto(at, page)
        assert not at.exception, page
        for spec in charts(at):
            for tr in spec["data"]:
                col = (tr.get("marker") or {}).get("color")
                if isinstance(col, str) and tr.get("name") and tr["name"] != "elementwise chain":
                    assert seen.setdefault(tr["name"], col) == col, (page, tr["name"])
        for df in at.dataframe:
            for c in df.value.columns:
                vals = list(df.value[c])
                assert not any(v is None or (isinstance(v, float) and math.isnan(v)) or isinstance(v, dict)
                               for v in vals), (page, c)
    classes = {"gpu_compute", "gpu_memory", "communication", "input", "host_sync", "cpu_launch", "other_idle"}
    assert classes <= set(seen)
    assert len({seen[c] for c in classes}) == len(classes)  # seven classes, seven colours
    # nothing else borrows a colour, except names for the same thing: the exposed (lost) NCCL wait is the
    # communication class, a sync marker the host_sync class
    same = {"exposed (lost)": "communication", "sync": "host_sync"}
    assert all(seen[a] == seen[b] for a, b in same.items())
    others = {n: c for n, c in seen.items() if n not in same}
    assert len(set(others.values())) == len(others)
    assert cli_doc(d)["jobs"][0]["findings"]


def test_job_findings_have_their_own_section() -> None:
    at = new_app()
    box = at.selectbox(key="sample")
    at = box.select(next(o for o in box.options if o.startswith("nccl_h200x2/ddp_rank1_slowed/"))).run()
    at = goto(at, "Findings")
    heads = [plain(h.value) for h in at.subheader]
    assert heads[0].startswith("Trace: ") and heads[1].startswith("Job: nccl_h200x2/ddp_rank1_slowed")
    job = next(df.value for df in at.dataframe if list(df.value["code"]) == ["TV501"] and "straggler" in
               df.value["title"].iloc[0].lower())
    assert job["severity"].iloc[0] in {"warning", "error"}


def test_pages_without_their_section_are_hidden() -> None:
    import importlib.util

    at = upload(new_app(), SYNC)
    titles = {info.get("page_name") for info in at._registered_pages.values()}
    assert {"Overview", "Findings", "Timeline", "Layers", "Kernels", "Raw JSON"} <= titles
    assert ("Diff" in titles) == (importlib.util.find_spec("traceview.ci.diff") is not None)
    assert "Memory" not in titles  # no memory section in this document


def test_diff_page_shows_the_class_shift() -> None:
    """Runs once traceview.ci.diff (the CI issue's diff) is installed; the page is hidden without it."""
    tvdiff = pytest.importorskip("traceview.ci.diff")
    a = ROOT / "sample_traces/gpu_h200/elementwise_chain_eager.json.gz"
    b = ROOT / "sample_traces/gpu_h200/elementwise_chain_compiled.json.gz"
    at = new_app()
    at = goto(at.selectbox(key="sample").select("gpu_h200/elementwise_chain_eager.json.gz").run(), "Diff")
    at = at.selectbox(key="sample_b").select("gpu_h200/elementwise_chain_compiled.json.gz").run()
    assert not at.exception and not at.error
    (p,) = tvdiff.diff(cli_doc(a), cli_doc(b))["pairs"]
    spec = chart(at, "Class shift")["data"][0]
    assert spec["x"] == [c["class"] for c in p["classes"]]
    assert spec["y"] == [c["delta_us"] / 1000 for c in p["classes"]]
    assert p["step"]["b_us"] < p["step"]["a_us"]  # compiled: the chain fused, the step shorter
    assert plain(at.info[0].value) == f"Class shift: {p['shift_text']}"
