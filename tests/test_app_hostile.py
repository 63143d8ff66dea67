"""Issue 13, item 8: the web app under hostile uploads. Headless (Streamlit's AppTest), as tests/test_app.py."""

from __future__ import annotations

import gzip
import json
import os
import re
import tomllib
from pathlib import Path

import pytest

os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")

from hostile import dump, ev, mini_trace  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402
from test_output_escaping import HOSTILE, _hostile_trace  # noqa: E402

from traceview import report  # noqa: E402
from traceview.trace_cache import TraceCache, trace_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def new_app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    return at


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    return at.file_uploader(key="upload").set_value((name, data, "application/octet-stream")).run()


def shown_text(at: AppTest) -> list[str]:
    """Every markdown-rendered string on the page: markdown, captions, alerts, headers, expander labels."""
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "subheader", "header", "title"):
        out += [e.value for e in at.get(kind)]
    out += [e.label for e in at.get("expander")]
    return out


def active(s: str) -> str:
    """What markdown acts on: the text without its backslash-escaped characters."""
    return re.sub(r"\\.", "", s)


def test_config_caps_uploads_and_hides_error_details():
    cfg = tomllib.loads((ROOT / ".streamlit/config.toml").read_text())
    assert 0 < cfg["server"]["maxUploadSize"] <= 200
    assert cfg["client"]["showErrorDetails"] == "none"
    assert ".venv" in cfg["server"]["folderWatchBlacklist"]


def test_255_byte_file_name_is_analyzed_without_traceback():
    name = "r" * 250 + ".json"
    at = upload(new_app(), name, dump(mini_trace()))
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert next(m.value for m in at.metric if m.label == "Avg step") == "100.0 µs"  # the app shows sub-ms times in µs
    assert not any("/tmp" in s for s in shown_text(at))


@pytest.mark.parametrize("name", ["<img src=x onerror=alert(1)>.json", "[click](https://evil.example).json"])
def test_hostile_file_name_in_an_error_is_escaped(name):
    at = upload(new_app(), name, b"not a trace at all")
    assert not at.exception and at.error
    msg = at.error[0].value
    assert "<" not in active(msg) and "](" not in active(msg) and "not a JSON trace" in msg
    assert "/tmp" not in msg and str(ROOT) not in msg


def test_trace_strings_are_escaped_in_markdown_and_chart_labels():
    at = upload(new_app(), "hostile.json", dump(_hostile_trace()))
    assert not at.exception
    for s in shown_text(at):
        for raw in ("<img", "<script", "](", "[link=", "\x1b"):
            assert raw not in active(s), (raw, s)
    # the Layers page charts the ops (no module layers in this trace): plotly renders tags in labels
    hashes = [h for h, info in at._registered_pages.items() if info.get("page_name") == "Layers"]
    at._page_hash = hashes[0]
    at = at.run()
    assert not at.exception
    labels = [y for el in at.get("plotly_chart") for d in json.loads(el.proto.spec)["data"] for y in d.get("y", [])]
    assert any(HOSTILE["img"].replace("<", "&lt;").replace(">", "&gt;") in str(y) for y in labels), labels
    assert not any("<img" in str(y) or "<script" in str(y) for y in labels)


def test_decompression_limit_in_the_app(monkeypatch):
    monkeypatch.setenv("TRACEVIEW_APP_MAX_BYTES", "64K")
    big = mini_trace(steps=600)  # ~180 KB of JSON, 10 KB gzipped
    at = upload(new_app(), "big.json.gz", gzip.compress(dump(big)))
    assert not at.exception and at.error
    assert "decompressed size exceeds the input limit of 64 KiB" in at.error[0].value.replace("\\", "")


def test_internal_error_shows_no_server_path(monkeypatch):
    def boom(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "/srv/secret/place/cache.bin")

    import streamlit as st

    monkeypatch.setattr(report, "memory_section", boom)  # a section of the pipeline failing inside the analysis
    st.cache_data.clear()  # analyzed documents are shared between sessions
    at = upload(new_app(), "t.json", dump(mini_trace()))
    assert not at.exception and at.error
    msg = " ".join(e.value for e in at.error)
    assert "secret" not in msg and "/srv" not in msg and "cache\\.bin" in msg


def test_each_session_has_its_own_bounded_trace_cache():
    a = upload(new_app(), "a.json", dump(mini_trace(steps=4)))
    b = new_app()
    ca = a.session_state["_traces"]
    assert len(ca) == 1 and "_traces" not in b.session_state  # B neither sees nor shares A's traces
    assert 0 < ca.nbytes <= ca.max_bytes


def test_trace_cache_is_bounded_in_bytes(tmp_path):
    import traceview

    traces = []
    for k in range(3):
        p = tmp_path / f"t{k}.json"
        p.write_bytes(dump(mini_trace(steps=5 + k)))
        traces.append(traceview.load_file(p))
    sizes = [trace_bytes(t) for t in traces]
    cache = TraceCache(max_bytes=sizes[0] + sizes[1] + 1)
    loads = []

    def loader(t):
        return lambda: loads.append(t) or t

    for t in traces[:2]:
        cache.get(id(t), loader(t))
    assert len(cache) == 2 and cache.get(id(traces[0]), loader(traces[0])) is traces[0]  # a hit: no load
    cache.get(id(traces[2]), loader(traces[2]))  # evicts the least recently used (traces[1])
    assert cache.nbytes <= cache.max_bytes and len(loads) == 3
    cache.get(id(traces[1]), loader(traces[1]))
    assert len(loads) == 4  # it was evicted: loaded again
    tiny = TraceCache(max_bytes=10)
    assert tiny.get("x", lambda: traces[0]) is traces[0] and len(tiny) == 0  # bigger than the budget: not kept


def test_loader_warnings_are_shown(tmp_path):
    d = mini_trace()
    d["traceEvents"].append(ev(name="aten::x", ts=1e17, dur=1))
    at = upload(new_app(), "w.json", dump(d))
    assert not at.exception
    assert any("7 days" in w.value for w in at.warning)
