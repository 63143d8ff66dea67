"""The Diff page: the loaded run against another one (`traceview diff`): step change, class shift, layers,
kernels and findings."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ...ci import diff as tvdiff
from ..inputs import NO_SAMPLE, analyze_doc, chosen_inputs, sample_choices
from ..ui import PALETTE, View, md, ms, no_trace, one_line, show_table

TITLE, URL = "Diff", "diff"
#: `layers.source` values that name the model's own modules or annotations; `ops` and `none` mean the trace
#: has no module information (its "layers" are op names, or nothing)
MODULE_SOURCES = {"modules", "module_annotations", "annotations"}


def module_gap(doc_a: dict, doc_b: dict, pair: dict) -> str | None:
    """Why the layers of a pair cannot be compared (one side has no module information), else None."""
    src = {
        side: next(
            ((t.get("layers") or {}).get("source") for t in doc["traces"] if t["path"] == pair[side]), None
        )
        for side, doc in (("a", doc_a), ("b", doc_b))
    }
    missing = [side.upper() for side in ("a", "b") if src[side] not in MODULE_SOURCES]
    if not missing or len(missing) == 2 and src["a"] == src["b"]:
        return None
    where = " and ".join(missing)
    return (
        f"No module information in {where} (layer source: {src[missing[0].lower()]}): its layers cannot be "
        "matched with the other run's, so they are not compared. Record with `with_modules=True` "
        "(or `with_stack=True`) to compare layers."
    )


def page(v: View) -> None:
    st.header("Diff")
    if no_trace(v):
        return
    st.caption("A: the traces loaded in the sidebar (all steps). B: another run to compare with.")
    c1, c2 = st.columns(2)
    files = c1.file_uploader(
        "B: trace files", key="upload_b", type=["json", "gz"], accept_multiple_files=True
    )
    samples = sample_choices()
    sample = c2.selectbox("…or a bundled sample as B", [NO_SAMPLE, *samples], key="sample_b")
    key, paths, strip = chosen_inputs(files, sample, samples)
    if not paths:
        st.info("Choose B to compare with.")
        return
    doc_b = analyze_doc(key, None, paths)
    for e in doc_b["errors"]:
        st.error(md(one_line(View(doc_b, None, strip).name(e["error"]))))
    doc_a = v.doc if v.step is None else analyze_doc(v.key, None, v.paths)
    d = tvdiff.diff(doc_a, doc_b)
    names = View(doc_b, None, strip)
    for n, p in enumerate(d["pairs"]):
        st.subheader(md(f"{v.name(p['a'])} → {names.name(p['b'])}"))
        s = p["step"]
        m1, m2, m3 = st.columns(3)
        m1.metric("Step A", ms(s["a_us"]))
        m2.metric(
            "Step B",
            ms(s["b_us"]),
            delta=ms(s["delta_us"]) if s["delta_us"] is not None else None,
            delta_color="inverse",
        )
        m3.metric(
            "Beyond noise", "yes" if s.get("beyond_noise") else "no", help=f"noise_us = {s.get('noise_us')}"
        )
        st.info(md(f"Class shift: {p['shift_text']}"))
        cls = p["classes"]
        fig = go.Figure(
            go.Bar(
                x=[c["class"] for c in cls],
                y=[c["delta_us"] / 1000 for c in cls],
                marker_color=[PALETTE.get(c["class"]) for c in cls],
            )
        )
        fig.update_layout(title="Class shift per step (B − A), ms", yaxis_title="ms per step", height=340)
        st.plotly_chart(fig, key=f"chart_diff_{n}")
        st.markdown("**Layers** (largest change first)")
        gap = module_gap(doc_a, doc_b, p)
        if gap:
            st.warning(md(gap))
        else:
            show_table(p["layers"][:30], key=f"diff_layers_{n}")
        st.markdown("**Kernels** (largest change first)")
        show_table(p["kernels"][:30], key=f"diff_kernels_{n}")
        fd = p["findings"]
        for what in ("appeared", "disappeared", "changed"):
            if fd.get(what):
                st.markdown(f"**Findings {what}**")
                show_table(fd[what], key=f"diff_find_{what}_{n}")
    if d.get("unmatched_a") or d.get("unmatched_b"):
        st.caption(
            md(
                f"Unmatched: A {[v.name(x) for x in d['unmatched_a']]}, "
                f"B {[names.name(x) for x in d['unmatched_b']]}"
            )
        )
