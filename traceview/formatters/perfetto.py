"""Open a trace in the Perfetto UI at a time range: the URL with `visStart`/`visEnd` and the page snippet that
sends the trace by the documented window.open + PING/PONG + postMessage handshake (docs/integrations.md)."""

from __future__ import annotations

import base64
import json
from urllib.parse import urlencode

UI = "https://ui.perfetto.dev"
#: the largest (gzipped) trace a page embeds to send; a larger one: `traceview annotate` and open the file
MAX_EMBED_BYTES = 48 << 20


def vis_range_ns(t0_us: float, lo_us: float, hi_us: float) -> tuple[int, int]:
    """Perfetto's time (ns) of [lo, hi) µs from the trace's start: its JSON importer reads `ts` µs as ts × 1000 ns,
    and traceview's times are µs after the trace's first timestamp `t0_us`."""
    return round((t0_us + lo_us) * 1000), round((t0_us + max(hi_us, lo_us)) * 1000)


def ui_url(t0_us: float, lo_us: float, hi_us: float) -> str:
    """The UI's address that opens the posted trace showing [lo, hi) µs from the trace's start."""
    start, end = vis_range_ns(t0_us, lo_us, hi_us)
    return f"{UI}/?{urlencode({'visStart': start, 'visEnd': end})}"


def _js(value: object) -> str:
    """A JSON value safe inside a <script> element (no `</script>` or HTML comment opener can end it)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def open_button_html(
    trace: bytes, title: str, file_name: str, url: str, label: str = "Open in Perfetto"
) -> str:
    """A button that opens `url` in a new tab, waits for the UI's PONG and posts the trace bytes to it."""
    return f"""<button id="pf" style="font:inherit;padding:2px 10px;cursor:pointer"></button>
<span id="pfs" style="font:12px sans-serif;margin-left:8px"></span>
<script>
const DATA = {_js(base64.b64encode(trace).decode())}, URL_ = {_js(url)}, ORIGIN = {_js(UI)};
const TITLE = {_js(title)}, FILE = {_js(file_name)};
const btn = document.getElementById("pf"), status = document.getElementById("pfs");
btn.textContent = {_js(label)};
btn.onclick = () => {{
  const w = window.open(URL_);
  if (!w) {{ status.textContent = "the browser blocked the new tab: allow pop-ups for this page"; return; }}
  const bytes = Uint8Array.from(atob(DATA), c => c.charCodeAt(0));
  const timer = setInterval(() => w.postMessage("PING", ORIGIN), 50);
  const onMessage = (e) => {{
    if (e.source !== w || e.data !== "PONG") return;
    window.removeEventListener("message", onMessage);
    clearInterval(timer);
    w.postMessage({{perfetto: {{buffer: bytes.buffer, title: TITLE, fileName: FILE}}}}, ORIGIN);
    status.textContent = "sent to Perfetto";
  }};
  window.addEventListener("message", onMessage);
}};
</script>"""
