"""The app's frame: the sidebar's inputs, the analysis, and the navigation between the pages."""

from __future__ import annotations

import functools
from typing import Any

import streamlit as st

from .. import report
from .inputs import NO_SAMPLE, analyze_doc, chosen_inputs, sample_choices
from .pages import diff, findings, job, kernels, layers, memory, overview, raw, timeline, trends
from .ui import PAGES, View, md, one_line

#: the landing page's identity: Streamlit keeps a session on the page of this url_path across reruns, so the
#: page that leads a new input takes it (the address bar shows "/" for it either way)
LANDING = "overview"


def page_modules(doc: dict) -> list[tuple[Any, str]]:
    """(page module, url_path) for this document, in the sidebar's order; the first is the landing page. A job
    (a folder of ranks) lands on the Job page, as the CLI prints the job first, and its rank's Overview moves to
    `rank`; Memory only when the document has a memory section."""
    mods: list[tuple[Any, str]] = (
        [(job, LANDING), (overview, "rank")] if doc["jobs"] else [(overview, LANDING)]
    )
    mods += [(m, m.URL) for m in (findings, timeline, layers, kernels)]
    if any(t.get("memory") for t in doc["traces"]):
        mods.append((memory, memory.URL))
    return [*mods, *((m, m.URL) for m in (diff, trends, raw))]


def main() -> None:
    st.set_page_config(page_title="traceview", layout="wide")
    with st.sidebar:
        st.title("traceview")
        files = st.file_uploader(
            "Trace files (.json / .json.gz)",
            key="upload",
            type=["json", "gz"],
            accept_multiple_files=True,
            help="Several files = the ranks of one job",
        )
        samples = sample_choices()
        sample = st.selectbox("…or a bundled sample", [NO_SAMPLE, *samples], key="sample")

    try:
        key, paths, strip = chosen_inputs(files, sample, samples)
    except OSError as e:  # the staging disk: say what failed, not where
        st.error(md(f"could not store the upload: {e.strerror or type(e).__name__}"))
        key, paths, strip = "", (), ""
    doc = analyze_doc(key, None, paths) if paths else report.Report().to_dict()
    steps = sorted({n for t in doc["traces"] for n in t["summary"]["step_numbers"]})
    with st.sidebar:
        if st.session_state.get("_step_for") != key:  # new input: back to all steps
            st.session_state["_step_for"] = key
            st.session_state["step"] = "all"
            st.session_state["unprofiled_ms"] = 0.0
            st.session_state.pop("trace", None)
        step = st.selectbox("Step", ["all", *map(str, steps)], key="step")
        unprofiled = st.number_input(
            "Step without the profiler (ms)", min_value=0.0, step=0.1, format="%.3f", key="unprofiled_ms",
            help="The step time you measured without the profiler (CUDA events, or 1000 / steps per second from "
                 "your training log), as `traceview analyze --unprofiled-ms`: every saving is priced against it. "
                 "0: the collector's measurement, else the estimate from the trace.",
        ) or None
        if step != "all" or unprofiled:
            doc = analyze_doc(key, None if step == "all" else int(step), paths, unprofiled)
        trace = None
        if len(doc["traces"]) > 1:
            names = [View(doc, None, strip).name(t["path"]) for t in doc["traces"]]
            k = st.selectbox("Trace", range(len(names)), format_func=lambda i: names[i], key="trace")
            trace = doc["traces"][k]
        elif doc["traces"]:
            trace = doc["traces"][0]

    v = View(doc, trace, strip, None if step == "all" else int(step), key, paths)
    for e in doc["errors"]:  # one line each, without the upload staging directory
        st.error(md(one_line(v.name(e["error"]))))

    mods = page_modules(doc)
    pages = [
        st.Page(functools.partial(m.page, v), title=m.TITLE, url_path=url, default=n == 0)
        for n, (m, url) in enumerate(mods)
    ]
    PAGES.clear()
    PAGES.update(
        {m.URL: p for (m, _), p in zip(mods, pages, strict=True)}
    )  # by page, for links between pages
    st.navigation(pages).run()
