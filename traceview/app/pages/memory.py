"""The Memory page: allocated and reserved GPU memory over each step, with the peak and the device's capacity."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ..ui import PALETTE, View, md, no_trace, render_section, show_table

TITLE, URL = "Memory", "memory"
STEP_COLS = [
    "step",
    "peak_allocated_gib",
    "peak_reserved_gib",
    "start_allocated_gib",
    "end_allocated_gib",
    "allocs",
    "frees",
    "alloc_gib",
]


def memory_figure(dev: dict, peak: dict | None, steps: list[dict]) -> go.Figure:
    """One device's `timeline` (at most 50 points per step, each its slice's maximum) in ms from the trace's
    start: allocated and reserved GiB, the device's capacity as a dashed line, the peak marked, each step's
    start as a dotted line."""
    tl = dev["timeline"]
    x = [t / 1000 for t in tl["ts_us"]]
    fig = go.Figure()
    fig.add_scatter(
        name="allocated", x=x, y=tl["allocated_gib"], mode="lines", line={"color": PALETTE["allocated"]}
    )
    if any(r is not None for r in tl["reserved_gib"]):
        fig.add_scatter(
            name="reserved", x=x, y=tl["reserved_gib"], mode="lines", line={"color": PALETTE["reserved"]}
        )
    if dev.get("capacity_gib"):
        fig.add_scatter(
            name="capacity",
            x=[x[0], x[-1]] if x else [],
            y=[dev["capacity_gib"]] * min(len(x), 2),
            mode="lines",
            line={"color": PALETTE["capacity"], "dash": "dash"},
        )
    if peak and peak.get("device") == dev["device"]:
        fig.add_scatter(
            name="peak",
            x=[peak["ts_us"] / 1000],
            y=[peak["allocated_gib"]],
            mode="markers+text",
            marker={"symbol": "star", "size": 14, "color": PALETTE["host_sync"]},
            text=[f"peak {peak['allocated_gib']} GiB"],
            textposition="top center",
        )
    for s in steps:
        fig.add_vline(x=s["start_us"] / 1000, line_dash="dot", line_color="#999999")
    fig.update_layout(
        title=f"GPU {dev['device']} memory over the steps, GiB",
        xaxis_title="ms from the trace start",
        yaxis_title="GiB",
        height=420,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def page(v: View) -> None:
    st.header("Memory")
    if no_trace(v):
        return
    mem = v.trace.get("memory")
    if not mem:
        st.info("This trace has no memory section (record with profile_memory=True).")
        return
    peak = mem.get("peak")
    if peak:
        st.info(
            md(
                f"Peak {peak['allocated_gib']} GiB allocated ({peak['reserved_gib']} GiB reserved) in step "
                f"{peak['step']} on GPU {peak['device']}, during {peak['op']}."
            )
        )
    for dev in mem.get("devices") or []:
        c1, c2, c3 = st.columns(3)
        c1.metric("Peak allocated", f"{dev['peak_allocated_gib']} GiB")
        c2.metric(
            "Peak reserved",
            f"{dev['peak_reserved_gib']} GiB" if dev.get("peak_reserved_gib") is not None else "–",
        )
        cap = dev.get("capacity_gib")
        c3.metric(
            "Capacity",
            f"{cap} GiB" if cap else "–",
            help=f"{dev.get('peak_reserved_pct_of_capacity')} % reserved at the peak",
        )
        if dev["timeline"]["ts_us"]:
            st.plotly_chart(memory_figure(dev, peak, v.trace["steps"]), key=f"chart_memory_{dev['device']}")
        show_table(dev["steps"], STEP_COLS, key=f"memory_steps_{dev['device']}")
    st.caption(
        f"{mem.get('driver_alloc_calls', 0)} driver allocation calls inside the steps "
        f"({(mem.get('driver_alloc_us') or 0) / 1000:,.2f} ms)."
    )
    with st.expander("Every memory field"):
        render_section({k: x for k, x in mem.items() if k != "devices"}, "memory")
