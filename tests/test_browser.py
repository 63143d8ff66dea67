"""The web app in a real browser: `streamlit run app.py` on localhost, driven by playwright through Debian's
chromium (never a browser download), in a 1280 px wide window. Uploads a bundled trace and the two rank files of
a bundled job, visits every page (the job's landing page, Memory, Diff and Trends over a history database
included) and checks that the verdict, the timeline and the charts are rendered (plotly's divs).

Needs /usr/bin/chromium (`.ci/run` installs the Debian package when it is missing): without it the test fails,
it does not skip. Set TRACEVIEW_SCREENSHOTS=docs to write the pages' screenshots (docs/app_*.png)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parent.parent
SYNC = ROOT / "sample_traces/gpu_h200/sync_item_nonzero_cpu.json.gz"
MEMORY = ROOT / "sample_traces/gpu_h200_memory/memory_pressure_empty_cache.json.gz"
MODULES = ROOT / "sample_traces/gpu_h200/train_tinygpt_modules.json.gz"
JOB = ROOT / "sample_traces/nccl_h200x2/ddp_rank1_slowed"
WIDTH = 1280  # the screenshots' width (docs/app_*.png): every page must read at 1280 px
READY_S = 300  # how long the server may take to come up on a busy machine: a bound, not a measurement
WAIT_MS = int(os.environ.get("TRACEVIEW_BROWSER_WAIT_MS", 240_000))  # a bound for each wait on the page, as READY_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
             str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while True:  # poll the health endpoint until the server answers
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer within {READY_S} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture()
def shots(tmp_path: Path) -> Path:
    d = os.environ.get("TRACEVIEW_SCREENSHOTS")
    out = (ROOT / d) if d else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


def open_app(browser, url: str):  # noqa: ANN001, ANN201 - playwright types
    page = browser.new_page(viewport={"width": WIDTH, "height": 1400})
    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    page.locator('[data-testid="stSidebar"]').wait_for()
    return page


def settled(page) -> None:  # noqa: ANN001
    """Wait until the script run is over: the app root's script state (Streamlit's own test attribute) is neither
    running nor a requested rerun, and no status widget is shown."""
    page.wait_for_function(
        "() => { const a = document.querySelector('[data-testid=\"stApp\"]');"
        " const s = a && a.getAttribute('data-test-script-state');"
        " return s && !['running', 'rerunRequested', 'stopRequested'].includes(s)"
        " && !document.querySelector('[data-testid=\"stStatusWidget\"]'); }")


def follow(page, click, title: str) -> None:  # noqa: ANN001
    """Click something that opens the page `title` until it opens. A click that lands while the previous script
    run re-renders the page can be lost (seen once on a loaded 2-core box: the page never changed); the retry
    makes the test depend on the app's behaviour, not on the timing of the click."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        settled(page)
        click()
        try:
            page.locator("h1, h2").filter(has_text=title).first.wait_for(timeout=30_000)
            break
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise
    settled(page)


def upload(page, *files: Path) -> None:  # noqa: ANN001
    page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files([str(f) for f in files])
    settled(page)


def goto(page, title: str) -> None:  # noqa: ANN001
    follow(page, lambda: page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click(), title)


def plots(page, n: int = 1) -> list[str]:  # noqa: ANN001
    """Titles of the plotly charts drawn on the page, once at least `n` are."""
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n}")
    return page.locator(".js-plotly-plot .gtitle").all_text_contents()


def shot(page, shots: Path, name: str) -> None:  # noqa: ANN001
    page.screenshot(path=str(shots / f"app_{name}.png"), full_page=True)


def test_one_trace_every_page(server: str, browser, shots: Path) -> None:  # noqa: ANN001
    page = open_app(browser, server)
    upload(page, SYNC)
    page.get_by_text("Verdict: sync-bound").wait_for()
    # the overview draws the projection waterfall first, then the classifier's shares per step
    page.locator(".js-plotly-plot .gtitle", has_text="Classifier: share of each step (%)").first.wait_for()
    assert "Classifier: share of each step (%)" in plots(page, 2)
    shot(page, shots, "overview")

    goto(page, "Findings")
    page.get_by_text("TV102 host-sync").first.wait_for()
    shot(page, shots, "findings")
    # a finding's link opens the timeline zoomed to its window
    def open_link() -> None:
        exp = page.locator('[data-testid="stExpander"]').filter(has_text="TV102 host-sync").first
        link = exp.get_by_role("link", name="Show on the timeline")
        if not link.is_visible():
            exp.locator("summary").click()
        link.click()

    follow(page, open_link, "Timeline")
    titles = plots(page)
    assert any(t.startswith("Step ") and t.endswith(" timeline") for t in titles), titles
    from playwright.sync_api import expect

    expect(page.get_by_role("combobox", name="Zoom to a finding")).to_have_value("TV102 host-sync: costliest sync",
                                                                                  timeout=WAIT_MS)
    assert page.locator(".js-plotly-plot .barlayer .point").count() > 300  # the step's slices are drawn
    shot(page, shots, "timeline")

    goto(page, "Layers")
    assert any(t.startswith("GPU time by layer") for t in plots(page))
    shot(page, shots, "layers")
    goto(page, "Kernels")
    page.get_by_text("Top kernels").wait_for()
    shot(page, shots, "kernels")
    goto(page, "Raw JSON")
    page.get_by_text("Download JSON").wait_for()
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def test_rank_files_show_the_job(server: str, browser, shots: Path) -> None:  # noqa: ANN001
    page = open_app(browser, server)
    ranks = sorted(JOB.glob("rank*.pt.trace.json.gz"))
    assert len(ranks) == 2
    upload(page, *ranks)
    # a job lands on its Job page: the straggler first, before any rank's charts
    page.locator("h1, h2").filter(has_text="Job").first.wait_for()
    page.get_by_text("Straggler rank", exact=True).wait_for()  # (not the grid cell "Ranks wait for straggler rank …")
    metric = page.locator('[data-testid="stMetric"]').filter(has_text="Straggler rank")
    assert metric.locator('[data-testid="stMetricValue"]').inner_text().strip() == "1"
    assert any(t.startswith("Wait per step in NCCL kernels") for t in plots(page, 1))
    shot(page, shots, "job")
    goto(page, "Overview")
    page.get_by_text("Verdict:").first.wait_for()

    goto(page, "Findings")
    page.locator("h3").filter(has_text="Job:").first.wait_for()
    page.get_by_text("TV501 nccl-wait").first.wait_for()
    goto(page, "Timeline")
    titles = plots(page)
    assert any(t.endswith(" timeline") for t in titles), titles
    assert page.locator(".js-plotly-plot .shapelayer path").count() > 0  # the exposed NCCL waits, shaded
    shot(page, shots, "timeline_nccl")
    for title in ("Layers", "Kernels", "Raw JSON"):
        goto(page, title)
    assert not page.locator('[data-testid="stException"]').count()
    page.close()


def _history(base: Path) -> Path:
    """A history database of six runs of one job (the compiled elementwise chain four times, then the eager one
    twice: a regression), written by `traceview batch` and `traceview history add`."""
    db = base / "history.duckdb"
    for name, src in (("fast", "elementwise_chain_compiled"), ("slow", "elementwise_chain_eager")):
        (base / name / "train").mkdir(parents=True)
        (base / name / "train" / "trace.json.gz").write_bytes((ROOT / f"sample_traces/gpu_h200/{src}.json.gz").read_bytes())
        subprocess.run([sys.executable, "-m", "traceview", "batch", "train", "--out", "rows.json"], cwd=base / name,
                       capture_output=True, check=False)
    for day, name in enumerate(["fast"] * 4 + ["slow"] * 2, start=1):
        subprocess.run([sys.executable, "-m", "traceview", "history", "add", "--db", str(db),
                        str(base / name / "rows.json"), "--label", f"date=2026-01-0{day}"], check=True,
                       capture_output=True)
    return db


def test_memory_diff_and_trends_pages(server: str, browser, shots: Path, tmp_path: Path) -> None:  # noqa: ANN001
    page = open_app(browser, server)
    upload(page, MEMORY)
    goto(page, "Memory")
    assert any(t.startswith("GPU 0 memory over the steps") for t in plots(page))
    shot(page, shots, "memory")

    goto(page, "Diff")
    box = page.get_by_role("combobox", name="…or a bundled sample as B")
    box.click()
    box.fill("train_tinygpt_modules")
    page.keyboard.press("Enter")
    settled(page)
    page.locator(".js-plotly-plot .gtitle", has_text="Class shift per step").first.wait_for()
    page.get_by_text("No module information in A").first.wait_for()  # the memory trace records no modules
    shot(page, shots, "diff")

    db = _history(tmp_path)
    goto(page, "Trends")
    field = page.get_by_role("textbox", name="History database")
    field.fill(str(db))
    field.press("Enter")
    settled(page)
    assert any(t.startswith("train: step time per run") for t in plots(page))
    page.get_by_text("regression").first.wait_for()
    shot(page, shots, "trends")
    assert not page.locator('[data-testid="stException"]').count()
    page.close()
