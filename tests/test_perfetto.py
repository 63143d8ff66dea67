"""Open in Perfetto (traceview/formatters/perfetto.py and the app's buttons): the time range on Perfetto's clock, the
documented handshake, and strings from a trace kept inside the page's script."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from pathlib import Path

from conftest import SAMPLES

os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")  # no network from streamlit

from traceview.cli.annotate import finding_range_us  # noqa: E402
from traceview.formatters import perfetto  # noqa: E402
from traceview.ingest.loader import load_file  # noqa: E402
from traceview.report import analyze_trace  # noqa: E402

SRC = SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz"


def test_range_lands_on_the_raw_profiler_steps():
    """Perfetto reads a JSON `ts` of µs as ns × 1000: the range of a finding over steps 1-3 starts at the raw
    ProfilerStep#1 and ends at ProfilerStep#3's end (within 1 ms: traceview's step windows follow the GPU)."""
    t = load_file(SRC)
    entry = analyze_trace(t)
    f = next(f for f in entry["findings"] if f["code"] == "TV101")
    lo, hi = finding_range_us(f, entry["steps"])
    start, end = perfetto.vis_range_ns(t.meta.t0_us, lo, hi)
    with gzip.open(SRC) as fh:
        raw = {
            e["name"]: e
            for e in json.load(fh)["traceEvents"]
            if e.get("name", "").startswith("ProfilerStep#")
        }
    assert abs(start - raw["ProfilerStep#1"]["ts"] * 1000) < 1e6
    assert abs(end - (raw["ProfilerStep#3"]["ts"] + raw["ProfilerStep#3"]["dur"]) * 1000) < 1e6
    url = perfetto.ui_url(t.meta.t0_us, lo, hi)
    assert url == f"https://ui.perfetto.dev/?visStart={start}&visEnd={end}"


def test_button_does_the_documented_handshake_and_escapes_strings():
    payload = b"\x1f\x8b not really a trace"
    hostile = "</script><script>alert(1)</script><!--"
    html = perfetto.open_button_html(
        payload, hostile, hostile + ".json.gz", "https://ui.perfetto.dev/?visStart=1&visEnd=2"
    )
    script = html.split("<script>", 1)[1].rsplit("</script>", 1)[0]
    assert "</script" not in script and "<!--" not in script  # nothing from a trace ends the script
    assert (
        "window.open(URL_)" in script
        and 'postMessage("PING", ORIGIN)' in script
        and 'e.data !== "PONG"' in script
    )
    assert "perfetto: {buffer: bytes.buffer, title: TITLE, fileName: FILE}" in script
    data = re.search(r'const DATA = "([^"]*)"', script).group(1)
    assert base64.b64decode(data) == payload
    title = json.loads(re.search(r'const TITLE = ("(?:[^"\\]|\\.)*")', script).group(1))
    assert title == hostile  # the same text once the browser parses it


def test_app_finding_and_timeline_buttons():
    from streamlit.testing.v1 import AppTest

    root = Path(__file__).resolve().parent.parent
    at = AppTest.from_file(str(root / "app.py"), default_timeout=120).run()
    files = (SRC.name, SRC.read_bytes(), "application/gzip")
    at = at.file_uploader(key="upload").set_value(files).run()
    hashes = [h for h, i in at._registered_pages.items() if i.get("page_name") == "Findings"]
    at._page_hash = hashes[0]
    at = at.run()
    buttons = [b for b in at.button if b.label == "Open in Perfetto…"]
    assert len(buttons) == 2  # one per finding with savings (TV101, TV201)
    at = buttons[0].click().run()
    assert not at.exception
    (comp,) = [el for el in at.get("iframe")] or [el for el in at.main if "ui.perfetto.dev" in str(el.proto)]
    html = comp.proto.srcdoc
    assert "visStart=" in html and 'postMessage("PING", ORIGIN)' in html
    data = base64.b64decode(re.search(r'const DATA = "([^"]*)"', html).group(1))
    doc = json.loads(gzip.decompress(data))
    assert any(e.get("cat") == "traceview_finding" for e in doc["traceEvents"])
