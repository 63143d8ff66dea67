"""The Findings page: the trace's and the job's findings by saving, each with its fix, evidence and links."""

from __future__ import annotations

import streamlit as st

from ...cli.annotate import finding_range_us
from ..perfetto_link import perfetto_button
from ..ui import PAGES, SEVERITY_ICON, View, md, ms, no_trace, show_findings_table

TITLE, URL = "Findings", "findings"


def render_findings(v: View, found: list[dict], key: str) -> None:
    """Findings with savings, each in an expander; those with no estimated savings folded into one."""
    found = sorted(
        found, key=lambda f: (f.get("severity") == "info", -(f.get("savings_us") or 0))
    )  # as the JSON ranks them
    saving = [f for f in found if f.get("savings_us")]
    zero = [f for f in found if not f.get("savings_us")]
    show_findings_table(saving, key=f"{key}_table")
    for n, f in enumerate(saving):
        label = f"{f['code']} {md(f['rule'])}: {md(f['title'])}"
        with st.expander(label, expanded=False, icon=SEVERITY_ICON.get(f["severity"])):
            st.markdown(
                f"**Save** {ms(f['savings_us'])}/step ({f['savings_pct']} % of the step) · "
                f"**cost** {ms(f['cost_us'])} · **count** {f['count']} · **steps** {md(f['steps'])}"
                + (f" · **layer** {md(f['layer'])}" if f.get("layer") else "")
            )
            st.markdown("**Fix**")
            st.markdown(md(f["fix"]))
            st.markdown("**Evidence**")
            st.json(f["evidence"], expanded=1)
            if key == "trace" and f.get("steps"):  # a link (keeps the sidebar's inputs, unlike switch_page)
                st.page_link(
                    PAGES["timeline"],
                    label="Show on the timeline",
                    icon=":material/timeline:",
                    query_params={"jump": f["code"], "step": str(f["steps"][0])},
                )
            span = finding_range_us(f, v.trace["steps"]) if key == "trace" and v.trace else None
            if span:
                perfetto_button(v, span[0], span[1], f"{key}_{n}_{f['code']}")  # (a rule may fire twice)
    if zero:
        with st.expander(f"{len(zero)} finding(s) without estimated savings", expanded=False):
            show_findings_table(zero, key=f"{key}_zero")


def page(v: View) -> None:
    st.header("Findings")
    if no_trace(v):
        return
    found = v.trace["findings"]
    st.subheader(md(f"Trace: {v.name(v.trace['path'])}"))
    if found:
        render_findings(v, found, "trace")
    else:
        st.success("No findings: no rule fired on the analyzed steps.")
    for n, j in enumerate(v.doc["jobs"]):
        st.subheader(md(f"Job: {v.name(j['path']) or 'uploaded files'} (ranks {j['ranks']})"))
        if j.get("findings"):
            render_findings(v, j["findings"], f"job{n}")
        else:
            st.success("No job findings: the ranks wait for no straggler.")
