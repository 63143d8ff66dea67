"""The app's "Open in Perfetto" button: the annotated trace sent to ui.perfetto.dev at a time range."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ..ingest.inputs import safe_file_name
from .inputs import load_cached, perfetto_payload
from .ui import View, md, one_line


def perfetto_button(v: View, lo_us: float, hi_us: float, key: str) -> None:
    """ "Open in Perfetto" at [lo, hi) µs from the trace's start: a first click prepares the annotated trace, the
    second (a user gesture, so no pop-up blocker) opens ui.perfetto.dev and sends it (traceview/formatters/perfetto.py)."""
    from streamlit.components.v1 import html as component

    from ..formatters.perfetto import open_button_html, ui_url

    flag = f"pf_{key}"
    if not st.session_state.get(flag):
        if st.button(
            "Open in Perfetto…",
            key=f"{flag}_btn",
            icon=":material/open_in_new:",
            help="Send this trace, with traceview's classes and findings as added tracks, to ui.perfetto.dev "
            "(in your browser; nothing is uploaded to a server) at this time range",
        ):
            st.session_state[flag] = True
            st.rerun()
        return
    path = Path(v.trace["path"])
    try:
        data = perfetto_payload(str(path), path.stat().st_mtime_ns, v.step)
        t0 = load_cached(path).meta.t0_us
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        st.error(md(one_line(v.name(f"Perfetto: {type(e).__name__}: {e}"))))
        return
    if data is None:
        st.caption(
            "Too large to send from this page: run `traceview annotate TRACE -o OUT.json.gz` and open OUT in "
            "ui.perfetto.dev."
        )
        return
    name = safe_file_name(path.name, "trace.json")
    component(
        open_button_html(
            data,
            f"traceview: {name}",
            name.removesuffix(".gz").removesuffix(".json") + ".traceview.json.gz",
            ui_url(t0, lo_us, hi_us),
        ),
        height=40,
    )
