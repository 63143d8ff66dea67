"""The app's presentation helpers: one palette, Markdown escaping, human units, tables and the page view model."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from ..safe_text import hide_paths
from .inputs import ROOT, SAMPLES

# One palette for every chart: a name (classifier class, step-breakdown category, slice kind, phase) has one
# colour everywhere, and no two names share a colour unless they mean the same thing.
PALETTE = {
    # classifier classes
    "gpu_compute": "#2ca02c",
    "gpu_memory": "#98df8a",
    "communication": "#9467bd",
    "input": "#ff7f0e",
    "host_sync": "#d62728",
    "cpu_launch": "#1f77b4",
    "other_idle": "#7f7f7f",
    # tb_plugin step-time breakdown (communication is the class above)
    "kernel": "#8c564b",
    "memcpy": "#e377c2",
    "memset": "#f7b6d2",
    "runtime": "#aec7e8",
    "dataloader": "#ffbb78",
    "cpu_exec": "#c49c94",
    "other": "#c7c7c7",
    # timeline host slices, layer phases, NCCL wait
    "python": "#dbdb8d",
    "op": "#9edae5",
    "forward": "#17becf",
    "backward": "#bcbd22",
    "optimizer": "#393b79",
    "wait": "#c5b0d5",
    # memory over the steps, trends
    "allocated": "#005f73",
    "reserved": "#ee9b00",
    "capacity": "#000000",
    "step_ms": "#3a0ca3",
}
CHAIN_LINE = "#000000"  # elementwise chains: an outline, not a fill
SEVERITY_ICON = {"error": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}
MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|$~:&])")
PAGES: dict[str, Any] = {}  # url path -> st.Page, for jumps between pages
# the findings table: what identifies a finding and what fixing it saves first, so the saving stays in view on
# a 1280 px screen; the long title last
FINDING_COLS = ["code", "severity", "savings_us", "savings_pct", "cost_us", "count", "rule", "layer", "title"]


def md(s: Any) -> str:
    """A trace-derived string made inert for Markdown (no links, HTML, emphasis, LaTeX or :directives:)."""
    return MD_SPECIAL.sub(r"\\\1", str(s)).replace("\n", " ")


def ms(us: float | None) -> str:
    """A µs value in human units: ms with 1-3 decimals by size, µs below a millisecond."""
    if us is None:
        return "–"
    a = abs(us)
    if a >= 100_000:
        return f"{us / 1000:,.1f} ms"
    if a >= 1000:
        return f"{us / 1000:,.2f} ms"
    return f"{us:,.1f} µs"


def hover(name: str, n: int = 160) -> str:
    """A name for a plotly hover label: escaped (plotly renders tags) and cut at n characters."""
    return html.escape(name if len(name) <= n else name[: n - 1] + "…")


def col_name(k: str) -> str:
    if k == "savings_us":  # the terminal's label: every saving is per step (issue 25)
        return "save ms/step"
    if k.endswith("_us"):
        return k[:-3].replace("_", " ") + " (ms)"
    if k.endswith("_pct"):
        return k[:-4].replace("_", " ") + " %"
    return k.replace("_", " ")


def cell(k: str, v: Any) -> Any:
    if isinstance(v, dict):
        return ", ".join(f"{a}: {cell(k, b)}" for a, b in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(str(cell(k, x)) for x in v)
    if k.endswith("_us") and isinstance(v, (int, float)) and not isinstance(v, bool):
        return round(v / 1000, 3)
    return v


def frame(rows: list[dict], cols: list[str] | None = None) -> pd.DataFrame:
    """Rows as a table in human units: `*_us` columns in ms, `*_pct` as %, lists and dicts as text, and a
    missing value as '–' (that column shown as text)."""
    cols = cols or list(dict.fromkeys(k for r in rows for k in r))
    data: dict[str, list[Any]] = {}
    for c in cols:
        vals = [cell(c, r.get(c)) for r in rows]
        if any(v is None for v in vals):
            vals = ["–" if v is None else str(v) for v in vals]
        data[col_name(c)] = vals
    return pd.DataFrame(data, columns=[col_name(c) for c in cols])


def show_table(
    rows: list[dict],
    cols: list[str] | None = None,
    *,
    key: str,
    widths: dict[str, str] | None = None,
    pinned: tuple[str, ...] = (),
) -> None:
    """A table of rows (see `frame`), as wide as the page; `widths` sets columns' widths (small/medium/large),
    `pinned` columns stay in view when the table scrolls sideways."""
    if rows:
        config = {
            col_name(c): st.column_config.Column(width=(widths or {}).get(c), pinned=c in pinned or None)
            for c in {*(widths or {}), *pinned}
        }
        st.dataframe(frame(rows, cols), hide_index=True, key=key, column_config=config or None)


#: the findings table's widths at 1280 px: every number narrow, the title medium and last (its full text is in
#: each finding's expander); the code and the saving pinned
FINDING_WIDTHS = {
    "code": "small",
    "severity": "small",
    "savings_us": "small",
    "savings_pct": "small",
    "cost_us": "small",
    "count": "small",
    "rule": "small",
    "layer": "small",
    "title": "medium",
}


def show_findings_table(rows: list[dict], key: str) -> None:
    """Findings, the saving beside the code, narrow enough to fit the page at 1280 px."""
    show_table(rows, FINDING_COLS, key=key, widths=FINDING_WIDTHS, pinned=("code", "savings_us"))


def one_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else s


@dataclass
class View:
    """What every page shows: the analyze document, the selected trace entry and the sidebar's choices."""

    doc: dict
    trace: dict | None  # the selected trace entry
    strip: str  # path prefix to hide (the upload staging directory)
    step: int | None = None  # the sidebar's step (None: all)
    key: str = ""  # the inputs' cache key and paths (to re-analyze, e.g. all steps for the Diff page)
    paths: tuple[str, ...] = ()

    def name(self, path: str | None) -> str:
        """A path or message as a web user may see it: no server directories (staging, samples, others)."""
        if not path:
            return ""
        return hide_paths(path, (self.strip, str(SAMPLES), str(ROOT)))


def no_trace(v: View) -> bool:
    if v.trace is None:
        st.info("Upload a Kineto trace (`.json` / `.json.gz`) or pick a bundled sample in the sidebar.")
        return True
    return False


def stacked_bar(
    rows: list[dict], field: str, keys: list[str], title: str, y_title: str, scale: float = 1.0
) -> go.Figure:
    """One bar per step, one stacked segment per key of row[field] (values / `scale`)."""
    x = [str(r["step"]) for r in rows]
    fig = go.Figure()
    for k in keys:
        fig.add_bar(
            name=k, x=x, y=[(r[field].get(k) or 0) / scale for r in rows], marker_color=PALETTE.get(k)
        )
    fig.update_layout(
        barmode="stack",
        title=title,
        xaxis_title="step",
        yaxis_title=y_title,
        xaxis_type="category",
        legend_traceorder="normal",
        height=380,
    )
    return fig


def render_section(sec: Any, key: str) -> None:
    """A document section of unknown shape: scalars as metrics, lists of rows as tables, nested dicts below."""
    if isinstance(sec, list):
        if sec and all(isinstance(r, dict) for r in sec):
            show_table(sec, key=key)
        elif sec:
            st.write(md(", ".join(map(str, sec))))
        return
    if not isinstance(sec, dict):
        st.write(md(sec))
        return
    scalars = {k: x for k, x in sec.items() if not isinstance(x, (dict, list))}
    if scalars:
        show_table(
            [
                {"field": col_name(k), "value": str(cell(k, x)) if x is not None else "–"}
                for k, x in scalars.items()
            ],
            key=f"{key}_fields",
        )
    for k, x in sec.items():
        if isinstance(x, (dict, list)) and x:
            st.markdown(f"**{md(col_name(k))}**")
            render_section(x, f"{key}_{k}")
