"""The Job page (a folder of ranks opens on it): the straggler and why it is late, each rank's waits and classes."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from ...registry import straggler_rules
from ..ui import PALETTE, View, md, show_findings_table, show_table

TITLE, URL = "Job", "job"


def page(v: View) -> None:
    st.header("Job")
    if not v.doc["jobs"]:
        st.info("No job: upload the rank files of one run together, or pick a folder of ranks.")
        return
    for j in v.doc["jobs"]:
        render_job(v, j)


def render_job(v: View, j: dict) -> None:
    st.subheader(md(f"{v.name(j['path']) or 'uploaded files'} (ranks {j['ranks']})"))
    nccl = j.get("nccl") or {}
    strag = nccl.get("straggler")
    finding = next((f for f in j.get("findings") or [] if f["rule"] in straggler_rules()), {})
    if strag and strag.get("raised"):  # the straggler rule raised it, not only the formal "last to arrive"
        st.metric("Straggler rank", strag["rank"], help=md(strag.get("reason", "")))
        if (strag.get("cause") or {}).get("text"):  # why it is late leads the job
            st.markdown(f"**Why:** {md(strag['cause']['text'])}")
        st.write(md(strag.get("reason", "")))
        note = (finding.get("evidence") or {}).get("note")
        if note:
            st.warning(md(note))
    elif nccl:
        if (finding.get("evidence") or {}).get("may_be_profiling_artifact"):  # the profiler explains the wait
            st.caption(f"No straggler raised: {nccl.get('collectives', 0)} collectives matched across ranks.")
            st.warning(finding["evidence"]["note"])
        else:
            st.caption(
                f"No straggler: {nccl.get('collectives', 0)} collectives matched across ranks, waits below "
                "the straggler rule's thresholds."
            )
    if nccl.get("ranks"):
        kind = {
            "kernel": "NCCL kernels",
            "gloo_annotation": "gloo collectives",
            "c10d_op": "c10d collectives",
        }.get(nccl.get("source"), "collectives")
        ranks = nccl["ranks"]
        fig = go.Figure()
        names = [str(r["rank"]) for r in ranks]
        fig.add_bar(
            name="wait",
            x=names,
            y=[(r.get("wait_per_step_us") or 0) / 1000 for r in ranks],
            marker_color=PALETTE["wait"],
        )
        fig.add_bar(
            name="exposed (lost)",
            x=names,
            y=[(r.get("exposed_wait_per_step_us") or 0) / 1000 for r in ranks],
            marker_color=PALETTE["communication"],
        )
        fig.update_layout(
            barmode="group",
            title=f"Wait per step in {kind}, ms",
            xaxis_title="rank",
            yaxis_title="ms per step",
            height=320,
            xaxis_type="category",
        )
        st.plotly_chart(fig, key=f"chart_wait_{j['path']}")
        st.markdown(f"**Wait per rank in {kind}**")
        show_table(ranks, key=f"job_wait_{j['path']}")
    rows = [
        {
            "rank": r["rank"],
            "dominant": r["dominant"],
            "waiting for straggler %": r.get("straggler_wait_pct"),
            **(r.get("shares") or {}),
        }
        for r in j["classification"]
    ]
    st.markdown("**Classifier per rank** (% of step)")
    show_table(rows, key=f"job_cls_{j['path']}")
    if j.get("findings"):
        st.markdown("**Job findings** (details on the Findings page)")
        show_findings_table(j["findings"], key=f"job_find_{j['path']}")
