"""The "Open in Perfetto" button in a real browser (Debian's chromium through playwright): the page opens the UI's
address in a new tab, does the PING/PONG handshake and posts the annotated trace; the tab receives every byte.

ui.perfetto.dev cannot be reached from here, so the browser's requests to it are answered with a page that
behaves as Perfetto's documented message handler does (docs: "Deep linking to the Perfetto UI"; the UI's
post_message_handler.ts): it ignores messages until the document is complete and from anything but its opener,
answers 'PING' with 'PONG' to the sender's origin, and takes `{perfetto: {buffer: ArrayBuffer, title, fileName}}`
once. The host page is served from 127.0.0.1, an origin the UI trusts (no consent prompt)."""

from __future__ import annotations

import base64
import gzip
import json
from urllib.parse import parse_qs, urlparse

from conftest import SAMPLES

from traceview.formatters import perfetto
from traceview.ingest.loader import load_file

SRC = SAMPLES / "gpu_h200/launch_bound_tiny_ops.json.gz"
# never contacted: the browser's request is answered by the route below
HOST = "http://127.0.0.1:8501/host.html"
WAIT_MS = 120_000  # a bound for each wait on a busy machine, not a measurement

# Perfetto's handler, reduced to what a sender can observe (the checks in the order the UI makes them)
MOCK_UI = """<!doctype html><html><body><script>
window.__got = null; window.__pings = 0;
function handler(e) {
  if (document.readyState !== "complete") return;
  if (e.source === null || e.source !== window.opener) return;
  if (e.data === "PING") { window.__pings++; e.source.postMessage("PONG", e.origin); return; }
  const p = e.data && e.data.perfetto;
  if (!p || p.buffer === undefined || p.title === undefined) return;
  if (!(p.buffer instanceof ArrayBuffer) || p.buffer.byteLength === 0) throw new Error("empty trace buffer");
  window.removeEventListener("message", handler);  // as the UI does: one trace per handshake
  let bin = ""; const u = new Uint8Array(p.buffer);
  for (let i = 0; i < u.length; i += 0x8000) bin += String.fromCharCode.apply(null, u.subarray(i, i + 0x8000));
  window.__got = {b64: btoa(bin), title: p.title, fileName: p.fileName, origin: e.origin};
}
window.addEventListener("message", handler);
</script></body></html>"""


def test_button_sends_the_annotated_trace_to_the_ui_tab(browser):
    # the app's own payload: the trace with traceview's tracks, gzipped
    from traceview.app.inputs import perfetto_payload

    data = perfetto_payload(str(SRC), SRC.stat().st_mtime_ns, None)
    assert data is not None
    t0 = load_file(SRC).meta.t0_us
    url = perfetto.ui_url(t0, 1000.0, 2000.0)
    html = perfetto.open_button_html(data, "traceview: run</script>.json", "run.traceview.json.gz", url)

    ctx = browser.new_context()
    ctx.route(HOST, lambda r: r.fulfill(status=200, content_type="text/html", body=f"<!doctype html>{html}"))
    ctx.route(f"{perfetto.UI}/**", lambda r: r.fulfill(status=200, content_type="text/html", body=MOCK_UI))
    page = ctx.new_page()
    page.goto(HOST)
    with ctx.expect_page(timeout=WAIT_MS) as opened:
        page.click("#pf")  # a user gesture, as in the app
    ui = opened.value
    ui.wait_for_function("window.__got !== null", timeout=WAIT_MS)
    got = ui.evaluate("window.__got")
    status = page.inner_text("#pfs")
    ui_url = ui.url
    pings = ui.evaluate("window.__pings")
    ctx.close()

    assert status == "sent to Perfetto" and pings >= 1
    assert got["origin"] == "http://127.0.0.1:8501"  # a trusted origin: the UI opens it without asking
    assert got["title"] == "traceview: run</script>.json" and got["fileName"] == "run.traceview.json.gz"
    received = base64.b64decode(got["b64"])
    assert received == data  # every byte, as an ArrayBuffer
    doc = json.loads(gzip.decompress(received))
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "traceview_finding"]
    assert {e["args"]["rule"] for e in slices} >= {"launch-bound"}
    # the tab was opened at the finding's range, on Perfetto's clock (ns)
    q = parse_qs(urlparse(ui_url).query)
    assert (int(q["visStart"][0]), int(q["visEnd"][0])) == perfetto.vis_range_ns(t0, 1000.0, 2000.0)
