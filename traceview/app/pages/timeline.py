"""The Timeline page: one step's classifier segments, CPU threads and GPU streams, zoomable to a finding."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from ...analyses.classify import CLASSES
from ..inputs import timeline_data
from ..perfetto_link import perfetto_button
from ..ui import CHAIN_LINE, PALETTE, View, hover, md, ms, no_trace, one_line

TITLE, URL = "Timeline", "timeline"
CLS_ROW = "classifier"


def timeline_figure(tl: dict, zoom: tuple[float, float] | None) -> go.Figure:
    """The step's rows (classifier, CPU threads, GPU streams) as horizontal bars in ms from the step start."""
    label = {lane["id"]: lane["label"] for lane in tl["lanes"]}
    rows = [CLS_ROW, *label.values()]
    fig = go.Figure()
    shown: set[str] = set()

    def bars(key: str, y: list[str], ts: list[float], dur: list[float], text: list[str], **kw: Any) -> None:
        fig.add_bar(
            name=kw.pop("name", key),
            legendgroup=key,
            showlegend=key not in shown,
            orientation="h",
            y=y,
            base=[t / 1000 for t in ts],
            x=[d / 1000 for d in dur],
            customdata=text,
            hovertemplate="%{customdata}<extra></extra>",
            marker_color=PALETTE.get(key),
            **kw,
        )
        shown.add(key)

    seg = defaultdict(list)
    for s in tl["segments"]:
        seg[s["cls"]].append(s)
    for c in CLASSES:
        if seg.get(c):
            ss = seg[c]
            bars(
                c,
                [CLS_ROW] * len(ss),
                [s["ts_us"] for s in ss],
                [s["end_us"] - s["ts_us"] for s in ss],
                [f"{c}: {ms(s['end_us'] - s['ts_us'])} at +{ms(s['ts_us'])}" for s in ss],
            )
    groups = defaultdict(list)
    for it in tl["items"]:
        groups[it["cls"] or it["kind"]].append(it)
    for key in sorted(groups, key=lambda k: (k not in CLASSES, k)):
        its = groups[key]
        text = []
        for it in its:
            t = f"<b>{hover(it['name'])}</b><br>{ms(it['dur_us'])} at +{ms(it['ts_us'])}"
            if it["op"]:
                t += f"<br>op {hover(it['op'], 80)}"
            if it["launch_us"] is not None:  # the launch link: which thread queued it, and when
                t += f"<br>launched at +{ms(it['launch_us'])} by {hover(it['launch_thread'])}"
            text.append(t)
        bars(
            key,
            [label[i["lane"]] for i in its],
            [i["ts_us"] for i in its],
            [i["dur_us"] for i in its],
            text,
            marker_line_width=0,
        )
    if tl["chains"]:
        ch = [c for c in tl["chains"] if c["lane"] in label]
        fig.add_bar(
            name="elementwise chain",
            orientation="h",
            y=[label[c["lane"]] for c in ch],
            base=[c["ts_us"] / 1000 for c in ch],
            x=[(c["end_us"] - c["ts_us"]) / 1000 for c in ch],
            marker={"color": "rgba(0,0,0,0)", "line": {"color": CHAIN_LINE, "width": 2}},
            customdata=[
                f"elementwise chain of {c['kernels']} kernels: {ms(c['end_us'] - c['ts_us'])}" for c in ch
            ],
            hovertemplate="%{customdata}<extra></extra>",
        )
    if tl["syncs"]:
        sy = tl["syncs"]
        fig.add_scatter(
            name="sync",
            mode="markers",
            x=[s["ts_us"] / 1000 for s in sy],
            y=[label.get(s["lane"], CLS_ROW) for s in sy],
            marker={
                "symbol": "triangle-down",
                "size": 12,
                "color": PALETTE["host_sync"],
                "line": {"color": "#000000", "width": 1},
            },
            customdata=[
                f"<b>{hover(s['name'])}</b> ({hover(s['cause'])})<br>GPU idle {ms(s['idle_us'])}" for s in sy
            ],
            hovertemplate="%{customdata}<extra></extra>",
        )
    for w in sorted(tl["nccl_waits"], key=lambda w: w["ts_us"] - w["end_us"])[:100]:  # the longest, shaded
        fig.add_vrect(
            x0=w["ts_us"] / 1000,
            x1=w["end_us"] / 1000,
            fillcolor=PALETTE["communication"],
            opacity=0.12,
            line_width=0,
            layer="below",
        )
    fig.update_layout(
        barmode="overlay",
        bargap=0.15,
        height=120 + 26 * len(rows),
        title=f"Step {tl['step']} timeline",
        xaxis_title="ms from the step start",
        legend={"orientation": "h", "y": -0.15},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        hoverlabel={"namelength": -1},
    )
    fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1], type="category")
    fig.update_xaxes(range=list(zoom) if zoom else [0, tl["dur_us"] / 1000])
    return fig


def page(v: View) -> None:
    st.header("Timeline")
    if no_trace(v):
        return
    t = v.trace
    nums = [s["step"] for s in t["steps"]] or t["summary"]["step_numbers"]
    if not nums:
        st.info("No steps in this trace.")
        return
    jump = None
    if "jump" in st.query_params:  # from a finding's "Show on the timeline" link: applied once
        q = st.query_params.to_dict()
        st.query_params.clear()
        jump = {"code": q.get("jump"), "step": int(q["step"]) if q.get("step", "").isdigit() else None}
    if jump and jump["step"] in nums:
        st.session_state["tl_step"] = jump["step"]
    if st.session_state.get("tl_step") not in nums:
        st.session_state["tl_step"] = nums[0]
    c1, c2 = st.columns([1, 1])
    step = c1.selectbox("Timeline step", nums, key="tl_step")
    max_items = c2.select_slider(
        "Slices drawn at most",
        [1000, 2000, 5000, 10000, 20000],
        value=5000,
        key="tl_max",
        help="Beyond this the shortest slices are left out: the page stays responsive on large steps.",
    )
    path = Path(t["path"])
    try:
        tl = timeline_data(str(path), path.stat().st_mtime_ns, int(step), int(max_items))
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        st.error(md(one_line(v.name(f"timeline: {type(e).__name__}: {e}"))))
        return
    wins = {f"{w['code']} {w['rule']}: {w['label']}": w for w in tl["windows"]}
    opts = ["whole step", *wins]
    if jump:
        hit = next((k for k, w in wins.items() if w["code"] == jump["code"]), None)
        st.session_state["tl_zoom"] = hit or "whole step"
    if st.session_state.get("tl_zoom") not in opts:
        st.session_state["tl_zoom"] = "whole step"
    choice = st.selectbox(
        "Zoom to a finding",
        opts,
        key="tl_zoom",
        help="The costliest occurrence in this step of what each rule reports",
    )
    zoom = None
    if choice in wins:
        w = wins[choice]
        pad = max((w["end_us"] - w["ts_us"]) * 0.25, 5.0)
        zoom = (max(w["ts_us"] - pad, 0) / 1000, min(w["end_us"] + pad, tl["dur_us"]) / 1000)
    cnt = tl["counts"]
    st.caption(
        f"Step {tl['step']}: {ms(tl['dur_us'])} · {cnt['drawn']:,} of {cnt['slices']:,} slices drawn"
        + (f" ({cnt['shortest_dropped']:,} shortest left out)" if cnt["shortest_dropped"] else "")
        + (
            f" ({cnt['not_drawn_nested']:,} nested deeper than the rows shown)"
            if cnt["not_drawn_nested"]
            else ""
        )
        + f" · {len(tl['syncs'])} syncs · {len(tl['chains'])} elementwise chains · "
        f"{len(tl['nccl_waits'])} exposed NCCL waits"
    )
    st.plotly_chart(timeline_figure(tl, zoom), key="chart_timeline")
    lo, hi = (
        (zoom[0] * 1000, zoom[1] * 1000) if zoom else (0.0, tl["dur_us"])
    )  # the selection, µs in the step
    perfetto_button(v, tl["start_us"] + lo, tl["start_us"] + hi, f"tl_{step}_{choice}")
    idle = [c for c in tl["idle_classes"] if tl["class_us"].get(c)]
    if idle:
        st.markdown(
            "**Idle time in this step** (the classifier row): "
            + " · ".join(f"{c} {ms(tl['class_us'][c])}" for c in idle)
        )
