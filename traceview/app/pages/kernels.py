"""The Kernels page: top kernels and ops, and each GPU's busy/idle split and idle per stream."""

from __future__ import annotations

import streamlit as st

from ..ui import View, md, no_trace, show_table

TITLE, URL = "Kernels", "kernels"


def page(v: View) -> None:
    st.header("Kernels")
    if no_trace(v):
        return
    t = v.trace
    st.subheader("Top kernels")
    show_table(t["top_kernels"], key="kernels_table")
    st.subheader("Top ops")
    show_table(t["top_ops"], key="ops_table")
    for d in t["devices"]:
        st.subheader(md(f"GPU {d['device']}: {d['name']}"))
        tb = d["temporal"]
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("Busy", f"{d['busy_pct']} %", help=f"busy_us = {d['busy_us']}")
        c2.metric("Idle", f"{tb['idle_pct']} %", help=f"idle_us = {tb['idle_us']}")
        c3.metric("Compute", f"{tb['compute_pct']} %", help=f"compute_us = {tb['compute_us']}")
        c4.metric(
            "Non-compute", f"{tb['non_compute_pct']} %", help=f"non_compute_us = {tb['non_compute_us']}"
        )
        st.markdown("**Idle by stream**")
        show_table(d["idle_by_stream"], key=f"idle_{d['device']}")
