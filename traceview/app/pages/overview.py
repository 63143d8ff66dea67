"""The Overview page: the verdict, the step's class shares and breakdown per step, and the projection's waterfall."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ..ui import PAGES, PALETTE, View, md, ms, no_trace, render_section, show_table, stacked_bar

TITLE, URL = "Overview", "overview"


def page(v: View) -> None:
    st.header("Overview")
    if no_trace(v):
        return
    t = v.trace
    s, c = t["summary"], t["classification"]
    meta = t["metadata"]
    st.caption(
        md(
            f"{v.name(t['path'])} · {meta.get('device') or meta.get('backend')} · format {meta.get('format')}"
            + (f" · rank {t['rank']}" if t.get("rank") is not None else "")
        )
    )
    if v.doc["jobs"] and "job" in PAGES:  # the job leads: this page is one rank's
        st.page_link(
            PAGES["job"],
            label="This trace is one rank of a job: the job's straggler and waits",
            icon=":material/groups:",
        )
    for w in t["warnings"]:
        st.warning(md(v.name(w)))
    if t.get("verdict_text"):
        st.info(md(t["verdict_text"]))
    elif c.get("note"):
        st.info(md(c["note"]))
    m1, m2, m3, m4 = st.columns(4)
    avg = s.get("avg_step_us")
    m1.metric("Avg step", ms(avg), help=f"avg_step_us = {avg}")
    busy = s.get("gpu_busy_pct")
    m2.metric("GPU busy", f"{busy} %" if busy is not None else "–")
    m3.metric("Dominant class", c.get("dominant") or "–")
    m4.metric("Steps", s["steps"], help=f"step_numbers = {s['step_numbers']}")
    prof = t.get("profiling") or {}
    if prof.get("note"):
        st.caption(md(prof["note"]))

    csteps = c.get("steps") or []
    if csteps:
        keys = list(csteps[0]["shares"])
        st.plotly_chart(
            stacked_bar(csteps, "shares", keys, "Classifier: share of each step (%)", "% of step"),
            key="chart_classes",
        )
    else:
        st.caption("No classified steps (no GPU activity, or every step left out).")
    if t["steps"]:
        keys = list(t["steps"][0]["breakdown_us"])
        st.plotly_chart(
            stacked_bar(
                t["steps"],
                "breakdown_us",
                keys,
                "Step-time breakdown (tb_plugin priority order), ms",
                "ms",
                scale=1000,
            ),
            key="chart_breakdown",
        )
        show_table(
            t["steps"],
            ["step", "start_us", "end_us", "dur_us", "gpu_busy_us", "gpu_busy_pct"],
            key="steps_table",
        )
    projection = t.get("projection")
    if projection:
        render_projection(projection)


def waterfall_rows(p: dict) -> list[dict]:
    """The projection's waterfall, bar by bar: the replayed unprofiled step, each fix's saving (per step, the
    findings' number: alone, or what is left after a larger fix that saves the same time), the overlap the replay of every fix together counts once, and the step with every
    fix. The chart and its table are drawn from these rows, so they show the same numbers."""
    fixes = [f for f in p.get("fixes") or [] if f.get("savings_us")]
    base, end = p.get("replayed_unprofiled_step_us"), p.get("all_fixed_unprofiled_step_us")
    if not (isinstance(base, (int, float)) and isinstance(end, (int, float)) and fixes):
        return []
    alone = [float(f["savings_us"]) for f in fixes]
    overlap = sum(alone) - (base - end)  # what the fixes remove in common: counted once
    return [
        {"bar": "step (unprofiled, replayed)", "measure": "absolute", "change_us": round(base, 3)},
        *[
            {"bar": f"{f['code']} {f['rule']}"[:40], "measure": "relative", "change_us": -s}
            for f, s in zip(fixes, alone, strict=True)
        ],
        {"bar": "overlap (counted once)", "measure": "relative", "change_us": round(overlap, 3)},
        {"bar": "every fix", "measure": "total", "change_us": round(end, 3)},
    ]


def render_projection(p: dict) -> None:
    st.subheader("Projection")
    rows = waterfall_rows(p)
    if rows:
        fig = go.Figure(
            go.Waterfall(
                x=[r["bar"] for r in rows],
                y=[r["change_us"] / 1000 if r["measure"] != "total" else 0 for r in rows],
                measure=[r["measure"] for r in rows],
                decreasing={"marker": {"color": PALETTE["gpu_compute"]}},
                totals={"marker": {"color": PALETTE["cpu_launch"]}},
            )
        )
        fig.update_layout(
            title="Replayed step time, ms (each fix's saving per step: alone, or what is left after a larger fix "
                  "that saves the same time)", yaxis_title="ms", height=380
        )
        st.plotly_chart(fig, key="chart_projection")
        st.caption(
            f"Every fix together: {ms(rows[-1]['change_us'])} per step (from {ms(rows[0]['change_us'])}, "
            "unprofiled, replayed)."
        )
        show_table([{"bar": r["bar"], "change_us": r["change_us"]} for r in rows], key="projection_table")
    with st.expander("Every projection field"):
        render_section(p, "projection")
