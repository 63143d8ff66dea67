"""The Raw JSON page: the document `traceview analyze --format json` writes, to read and download."""

from __future__ import annotations

import io

import streamlit as st

from ...formatters import json as fjson
from ..ui import View

TITLE, URL = "Raw JSON", "raw"


def page(v: View) -> None:
    st.header("Raw JSON")
    buf = io.StringIO()
    fjson.render(v.doc, buf)  # the bytes `traceview analyze --format json` writes
    st.download_button(
        "Download JSON", buf.getvalue(), file_name="traceview.json", mime="application/json", key="download"
    )
    st.json(v.doc, expanded=2)
