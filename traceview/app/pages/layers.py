"""The Layers page: an icicle of GPU time by layer, a layer's kernels/ops/findings, the layer table and repeats."""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from ...analyses.classify import CLASSES
from ..inputs import layer_data
from ..ui import PALETTE, View, hover, md, ms, no_trace, show_findings_table, show_table

TITLE, URL = "Layers", "layers"
LAYER_COLS = [
    "layer",
    "dominant",
    "calls",
    "gpu_us",
    "self_gpu_us",
    "fwd_gpu_us",
    "bwd_gpu_us",
    "other_gpu_us",
    "gpu_pct",
    "kernels",
    "cpu_dispatch_us",
    "achieved_tflops",
    "achieved_tbps",
    "peak_flops_pct",
    "peak_bw_pct",
    "bound",
    "class",
    "finding_codes",
]
REPEAT_COLS = [
    "kind",
    "class",
    "depth",
    "count",
    "mean_gpu_us",
    "min_gpu_us",
    "max_gpu_us",
    "spread",
    "cv_pct",
    "outliers",
]


ROOT_LAYER = "(all layers)"


def layers_icicle(rows: list[dict], total_us: float | None) -> go.Figure:
    """GPU time by layer, nested under one root; each box coloured by its dominant class (legend: the classes)."""
    rows = [r for r in rows if (r.get("gpu_us") or 0) > 0]
    ids = {r["layer"] for r in rows}
    fig = go.Figure(
        go.Icicle(
            ids=[ROOT_LAYER, *[r["layer"] for r in rows]],
            labels=[f"all layers: {ms(total_us)} GPU", *[r.get("name") or r["layer"] for r in rows]],
            parents=["", *[r["parent"] if r.get("parent") in ids else ROOT_LAYER for r in rows]],
            values=[0, *[r["self_gpu_us"] / 1000 for r in rows]],
            branchvalues="remainder",
            marker={"colors": ["#888888", *[PALETTE.get(r.get("dominant"), "#dddddd") for r in rows]]},
            customdata=[
                "all layers",
                *[
                    f"{hover(r['layer'])}<br>GPU {ms(r['gpu_us'])} (fwd {ms(r['fwd_gpu_us'])}, "
                    f"bwd {ms(r['bwd_gpu_us'])})<br>dominant: {r.get('dominant') or '–'}"
                    for r in rows
                ],
            ],
            hovertemplate="%{customdata}<extra></extra>",
            tiling={"orientation": "v"},
            maxdepth=5,
        )
    )
    for c in CLASSES:  # legend entries only: an icicle has none of its own
        if any(r.get("dominant") == c for r in rows):
            fig.add_scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=c,
                marker={"color": PALETTE[c], "symbol": "square", "size": 12},
            )
    fig.update_layout(
        title="GPU time by layer (colour: dominant class)",
        height=480,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.05},
        xaxis={"visible": False},
        yaxis={"visible": False},
    )
    return fig


def page(v: View) -> None:
    st.header("Layers")
    if no_trace(v):
        return
    lv = v.trace.get("layers") or {}
    rows = lv.get("layers") or []
    if not rows:
        st.info(md(f"No layers found (source: {lv.get('source')})."))
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("Source", lv.get("source"))
    c2.metric("Coverage", f"{lv.get('coverage_pct')} %", help="attributed_gpu_us / total_gpu_us")
    c3.metric("GPU time", ms(lv.get("total_gpu_us")))
    st.plotly_chart(layers_icicle(rows, lv.get("total_gpu_us")), key="chart_icicle")

    by_time = sorted(rows, key=lambda r: -(r.get("gpu_us") or 0))
    names = [r["layer"] for r in by_time]
    sel = st.selectbox(
        "Layer",
        names,
        key="layer_sel",
        format_func=lambda n: f"{n} ({ms(next(r['gpu_us'] for r in rows if r['layer'] == n))})",
    )
    if sel:
        path = Path(v.trace["path"])
        d = layer_data(str(path), path.stat().st_mtime_ns, sel, v.step, v.trace["findings"])
        st.markdown(f"**{md(sel)}**: {ms(d['gpu_us'])} GPU, {d['kernel_count']} GPU activities")
        k1, k2 = st.columns(2)
        with k1:
            st.markdown("**Kernels**")
            show_table(
                d["kernels"], ["name", "count", "total_us", "mean_us", "share_pct", "op"], key="layer_kernels"
            )
        with k2:
            st.markdown("**Ops**")
            show_table(d["ops"], ["op", "calls", "kernels", "gpu_us", "cpu_us", "share_pct"], key="layer_ops")
        if d["findings"]:
            st.markdown("**Findings in this layer**")
            show_findings_table(d["findings"], key="layer_findings")

    st.subheader("Layer table")
    table = []
    for r in rows:
        row = {c: r.get(c) for c in LAYER_COLS}
        row["layer"] = "\u2003" * (r.get("depth") or 0) + (r.get("name") or r["layer"])  # indent by depth
        table.append(row)
    show_table(table, key="layers_table")

    depths = sorted({r["depth"] for r in rows if r.get("depth") is not None})
    depth = (
        st.selectbox("Chart depth", depths, index=min(1, len(depths) - 1), key="layer_depth") if depths else 0
    )
    sel_rows = [r for r in rows if r.get("depth") == depth and (r.get("gpu_us") or 0) > 0]
    sel_rows = sorted(sel_rows, key=lambda r: r["gpu_us"], reverse=True)[:30][::-1]  # largest on top
    if sel_rows:
        names = [html.escape(r["layer"]) for r in sel_rows]  # plotly renders tags (<a href>, <b>) in labels
        fig = go.Figure()
        for phase, col in (("forward", "fwd_gpu_us"), ("backward", "bwd_gpu_us"), ("other", "other_gpu_us")):
            fig.add_bar(
                name=phase,
                y=names,
                x=[r[col] / 1000 for r in sel_rows],
                orientation="h",
                marker_color=PALETTE[phase],
            )
        fig.update_layout(
            barmode="stack",
            title=f"GPU ms per layer (depth {depth})",
            xaxis_title="GPU ms",
            height=max(300, 24 * len(sel_rows) + 120),
        )
        st.plotly_chart(fig, key="chart_layers")
    reps = lv.get("repeats") or []
    if reps:
        st.subheader("Repeated layers")
        show_table(reps, REPEAT_COLS, key="repeats_table")
