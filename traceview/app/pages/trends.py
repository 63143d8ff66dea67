"""The Trends page: the run history (`traceview history`, a DuckDB file) — each job's step time and class times
over its runs, the runs that `history check` flags marked."""

from __future__ import annotations

import os
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from ...analyses.classify import CLASSES
from ...ci import history
from ...errors import TraceError
from ..ui import PALETTE, View, md, one_line, show_table

TITLE, URL = "Trends", "trends"
LABEL_ICON = {
    "regression": ":material/error:",
    "suspicious": ":material/warning:",
    "insufficient_data": ":material/hourglass_empty:",
    "ok": ":material/check_circle:",
}
FLAG_COLOR = {"regression": PALETTE["host_sync"], "suspicious": PALETTE["input"]}


def trend_figure(step: dict, classes: dict[str, dict]) -> go.Figure:
    """One job over its runs (x: the run's date): its classes' time per step stacked as bars, the step time as a
    line, the baseline window's median and the regression threshold, and the recent runs beyond it marked."""
    pts = step["points"]
    x = [p["date"] for p in pts]
    fig = go.Figure()
    for c in CLASSES:
        s = classes.get(f"{c}_ms")
        if s:
            by_run = {p["run_id"]: p["value"] for p in s["points"]}
            fig.add_bar(
                name=c, x=x, y=[by_run.get(p["run_id"]) for p in pts], marker_color=PALETTE[c], opacity=0.6
            )
    fig.add_scatter(
        name="step_ms",
        x=x,
        y=[p["value"] for p in pts],
        mode="lines+markers",
        line={"color": PALETTE["step_ms"], "width": 3},
        customdata=[f"run {p['run_id']} · {p['commit'] or 'no commit'}" for p in pts],
        hovertemplate="%{y:.3f} ms<br>%{customdata}<extra></extra>",
    )
    if step.get("ref") is not None:
        fig.add_hline(
            y=step["ref"],
            line_dash="dot",
            line_color="#555555",
            annotation_text=f"baseline median {step['ref']:.3f} ms",
        )
        limit = step["ref"] + max(step.get("allowed") or 0.0, 0.0)
        fig.add_hline(
            y=limit,
            line_dash="dash",
            line_color=PALETTE["host_sync"],
            annotation_text=f"+{step.get('allowed') or 0:.3f} ms allowed",
            annotation_position="bottom right",
        )
    flagged = set(step.get("violations") or [])
    hit = [p for p in pts if p["run_id"] in flagged]
    if hit:
        fig.add_scatter(
            name=f"beyond the threshold ({step['label']})",
            x=[p["date"] for p in hit],
            y=[p["value"] for p in hit],
            mode="markers",
            marker={"symbol": "x", "size": 16, "color": FLAG_COLOR.get(step["label"], "#000000")},
        )
    fig.update_layout(
        barmode="stack",
        title=f"{step['job']}: step time per run, ms ({step['label']})",
        xaxis_title="run date",
        yaxis_title="ms per step",
        height=420,
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def page(v: View) -> None:
    st.header("Trends")
    default = os.environ.get("TRACEVIEW_HISTORY_DB", history.DEFAULT_DB)
    db = st.text_input(
        "History database",
        default,
        key="history_db",
        help="The DuckDB file `traceview history add --db PATH` writes (opened read-only)",
    )
    branch = st.text_input("Branch (empty: every run)", "", key="history_branch") or None
    if not Path(db).is_file():
        st.info(
            md(
                f"No history at {v.name(db)}: store runs with `traceview batch … --out rows.json` and "
                "`traceview history add --db PATH rows.json`."
            )
        )
        return
    try:  # what `traceview history show --db PATH --format json` prints, default windows and thresholds
        res = history.check(db, history.TrendSettings(), None, branch)
    except TraceError as e:
        st.error(md(one_line(v.name(str(e)))))
        return
    s = res["settings"]
    st.caption(
        f"{res['runs']} run(s); recent window {s['recent']} vs baseline window {s['baseline']} (at least "
        f"{s['min_baseline']}); a point is beyond the threshold above {s['max_regression_pct']:g} % of the "
        f"baseline median and {s['noise_sigmas']:g}× its noise; `regression` = the last two points are."
    )
    by_job: dict[str, dict[str, dict]] = {}
    for row in res["series"]:
        by_job.setdefault(row["job"], {})[row["metric"]] = row
    table = []
    for job, metrics in sorted(by_job.items()):
        step = metrics.get(history.GATED)
        if not step:
            continue
        flagged = [
            f"{m} {r['label']}"
            for m, r in metrics.items()
            if m != history.GATED and r["label"] in ("regression", "suspicious")
        ]
        table.append(
            {
                "job": job,
                "runs": len(step["points"]),
                "step trend": step["label"],
                "baseline ms": step["ref"],
                "last ms": step["last"],
                "change %": None if step.get("delta_pct") is None else round(step["delta_pct"], 1),
                "classes": ", ".join(flagged) or "–",
            }
        )
    if not table:
        st.info("No step times stored yet.")
        return
    show_table(table, key="trends_table")
    for n, row in enumerate(table):
        metrics = by_job[row["job"]]
        step = metrics[history.GATED]
        st.subheader(md(row["job"]))
        st.markdown(
            f"{LABEL_ICON.get(step['label'], '')} **{md(step['label'])}**"
            + (
                f" · last {step['last']:.3f} ms vs baseline {step['ref']:.3f} ms ({step['delta_pct']:+.1f} %)"
                if step.get("delta_pct") is not None
                else ""
            )
        )
        st.plotly_chart(trend_figure(step, metrics), key=f"chart_trend_{n}")
