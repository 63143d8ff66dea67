"""traceview web app: `streamlit run app.py`.

Widgets, layout and calls to the public API only: every trace goes through `traceview.report.analyze`
with the options that `traceview analyze` uses by default, and the pages render the resulting document
(docs/json-schema.md); the timeline comes from `traceview.sections.timeline.timeline`, a layer's detail from
`traceview.layer_detail.layer_detail`, the Diff page from `traceview.ci.diff.diff` (when installed). Any number
shown is in those outputs (µs shown as ms is µs / 1000). Every string taken from a trace is escaped before
it reaches Markdown.
"""

from __future__ import annotations

import functools
import hashlib
import html
import io
import os
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from traceview import report
from traceview.analyses.classify import CLASSES
from traceview.cli.annotate import finding_range_us
from traceview.formatters import json as fjson
from traceview.ingest.inputs import parse_size, safe_file_name
from traceview.ingest.loader import load_file
from traceview.layer_detail import layer_detail
from traceview.model import Trace
from traceview.options import Options
from traceview.registry import straggler_rules
from traceview.safe_text import hide_paths
from traceview.sections.timeline import timeline
from traceview.trace_cache import TraceCache

try:  # the Diff page appears when traceview.ci.diff is installed
    from traceview.ci import diff as tvdiff
except ImportError:  # pragma: no cover - depends on the installed version
    tvdiff = None

ROOT = Path(__file__).resolve().parent
SAMPLES = ROOT / "sample_traces"
NO_SAMPLE = "(none)"
# One palette for every chart: a name (classifier class, step-breakdown category, slice kind, phase) has one
# colour everywhere, and no two names share a colour unless they mean the same thing.
PALETTE = {
    # classifier classes
    "gpu_compute": "#2ca02c", "gpu_memory": "#98df8a", "communication": "#9467bd", "input": "#ff7f0e",
    "host_sync": "#d62728", "cpu_launch": "#1f77b4", "other_idle": "#7f7f7f",
    # tb_plugin step-time breakdown (communication is the class above)
    "kernel": "#8c564b", "memcpy": "#e377c2", "memset": "#f7b6d2", "runtime": "#aec7e8", "dataloader": "#ffbb78",
    "cpu_exec": "#c49c94", "other": "#c7c7c7",
    # timeline host slices, layer phases, NCCL wait
    "python": "#dbdb8d", "op": "#9edae5", "forward": "#17becf", "backward": "#bcbd22", "optimizer": "#393b79",
    "wait": "#c5b0d5",
}
CHAIN_LINE = "#000000"  # elementwise chains: an outline, not a fill
SEVERITY_ICON = {"error": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}
MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|$~:&])")
PAGES: dict[str, Any] = {}  # url path -> st.Page, for jumps between pages
# Untrusted uploads on a shared server: the decompressed size of one trace is capped lower than on the
# CLI (whose default is 8 GiB), and each session keeps at most this much of loaded traces. Uploads
# themselves are capped by server.maxUploadSize in .streamlit/config.toml.
APP_MAX_BYTES = parse_size(os.environ.get("TRACEVIEW_APP_MAX_BYTES", "2G"))
APP_CACHE_BYTES = parse_size(os.environ.get("TRACEVIEW_APP_CACHE_BYTES", "1G"))


# ---- presentation helpers -----------------------------------------------------------------------------------
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


def _col_name(k: str) -> str:
    if k == "savings_us":  # the terminal's label: every saving is per step (issue 25)
        return "save ms/step"
    if k.endswith("_us"):
        return k[:-3].replace("_", " ") + " (ms)"
    if k.endswith("_pct"):
        return k[:-4].replace("_", " ") + " %"
    return k.replace("_", " ")


def _cell(k: str, v: Any) -> Any:
    if isinstance(v, dict):
        return ", ".join(f"{a}: {_cell(k, b)}" for a, b in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(str(_cell(k, x)) for x in v)
    if k.endswith("_us") and isinstance(v, (int, float)) and not isinstance(v, bool):
        return round(v / 1000, 3)
    return v


def frame(rows: list[dict], cols: list[str] | None = None) -> pd.DataFrame:
    """Rows as a table in human units: `*_us` columns in ms, `*_pct` as %, lists and dicts as text, and a
    missing value as '–' (that column shown as text)."""
    cols = cols or list(dict.fromkeys(k for r in rows for k in r))
    data: dict[str, list[Any]] = {}
    for c in cols:
        vals = [_cell(c, r.get(c)) for r in rows]
        if any(v is None for v in vals):
            vals = ["–" if v is None else str(v) for v in vals]
        data[_col_name(c)] = vals
    return pd.DataFrame(data, columns=[_col_name(c) for c in cols])


def show_table(rows: list[dict], cols: list[str] | None = None, *, key: str) -> None:
    if rows:
        st.dataframe(frame(rows, cols), hide_index=True, key=key)


def one_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else s


# ---- inputs ------------------------------------------------------------------------------------------------
@st.cache_data(show_spinner=False)
def sample_choices() -> dict[str, Path]:
    """Bundled traces (every `*.json.gz` under sample_traces/), plus each directory that holds the ranks of one
    run as `traceview batch` finds them (`discover`: distributedInfo, `rank<N>` names, framework layouts such as
    TorchTitan's `iteration_<N>/`), analyzed as one job like `traceview analyze RUN_DIR/`."""
    from traceview.ci.discover import discover

    files = sorted(p for p in SAMPLES.rglob("*.json.gz") if p.is_file() and not p.name.startswith("."))
    out = {str(p.relative_to(SAMPLES)): p for p in files}
    for j in discover([SAMPLES]).jobs:
        if j.folder and j.whole_folder and len(j.files) > 1:
            out[f"{Path(j.folder).relative_to(SAMPLES)}/ (all ranks)"] = Path(j.folder)
    return dict(sorted(out.items()))


def _release(tmp: tempfile.TemporaryDirectory) -> None:
    tmp.cleanup()


@st.cache_resource(max_entries=4, show_spinner=False, on_release=_release)
def staged(digest: str, _data: tuple[tuple[str, bytes], ...]) -> tempfile.TemporaryDirectory:
    """The uploaded bytes as files with their original names (the loader reads the suffix: .json / .gz).
    Only read by the loader as JSON, never executed or unpickled."""
    tmp = tempfile.TemporaryDirectory(prefix="traceview-upload-")
    for name, data in _data:
        (Path(tmp.name) / name).write_bytes(data)
    return tmp


def default_options(step: int | None) -> Options:
    """What `traceview analyze PATHS [--step N]` runs with: [tool.traceview] of the working directory, if any."""
    return Options.build(step=step)


def _load_cached(path: Path) -> Trace:
    """A loaded trace, kept in this session while its file is unchanged (switching steps re-analyzes without
    re-reading); the session's cache is bounded in bytes, and no session sees another's traces."""
    s = path.stat()
    cache = st.session_state.get("_traces")
    if cache is None:
        cache = st.session_state["_traces"] = TraceCache(APP_CACHE_BYTES)
    return cache.get((str(path), s.st_mtime_ns, s.st_size), lambda: load_file(path, max_bytes=APP_MAX_BYTES))


@st.cache_data(max_entries=32, show_spinner="Analyzing…")
def analyze_doc(key: str, step: int | None, _paths: tuple[str, ...]) -> dict:
    """The `--format json` document for these inputs (`key` identifies their content)."""
    try:
        return report.analyze(list(_paths), default_options(step),
                              load=_load_cached).to_dict()
    except Exception as e:  # noqa: BLE001 - as the CLI: one line, never a traceback
        first = (str(e).strip().splitlines() or [""])[0]
        return report.Report(errors=[{"path": "", "error": f"internal error ({type(e).__name__}: {first})"}]).to_dict()


@st.cache_data(max_entries=4, show_spinner="Preparing the trace for Perfetto…")
def perfetto_payload(path: str, mtime_ns: int, step: int | None) -> bytes | None:
    """The trace with traceview's tracks (`traceview annotate`), gzipped; None when too large to send from a page."""
    import gzip

    from traceview.cli.annotate import annotated
    from traceview.formatters.perfetto import MAX_EMBED_BYTES

    blob, _ = annotated(path, default_options(step), APP_MAX_BYTES, trace=_load_cached(Path(path)))
    data = gzip.compress(blob, 6)
    return data if len(data) <= MAX_EMBED_BYTES else None


def perfetto_button(v: View, lo_us: float, hi_us: float, key: str) -> None:
    """"Open in Perfetto" at [lo, hi) µs from the trace's start: a first click prepares the annotated trace, the
    second (a user gesture, so no pop-up blocker) opens ui.perfetto.dev and sends it (traceview/formatters/perfetto.py)."""
    from streamlit.components.v1 import html as component

    from traceview.formatters.perfetto import open_button_html, ui_url

    flag = f"pf_{key}"
    if not st.session_state.get(flag):
        if st.button("Open in Perfetto…", key=f"{flag}_btn", icon=":material/open_in_new:",
                     help="Send this trace, with traceview's classes and findings as added tracks, to ui.perfetto.dev "
                          "(in your browser; nothing is uploaded to a server) at this time range"):
            st.session_state[flag] = True
            st.rerun()
        return
    path = Path(v.trace["path"])
    try:
        data = perfetto_payload(str(path), path.stat().st_mtime_ns, v.step)
        t0 = _load_cached(path).meta.t0_us
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        st.error(md(one_line(v.name(f"Perfetto: {type(e).__name__}: {e}"))))
        return
    if data is None:
        st.caption("Too large to send from this page: run `traceview annotate TRACE -o OUT.json.gz` and open OUT in "
                   "ui.perfetto.dev.")
        return
    name = safe_file_name(path.name, "trace.json")
    component(open_button_html(data, f"traceview: {name}", name.removesuffix(".gz").removesuffix(".json")
                               + ".traceview.json.gz", ui_url(t0, lo_us, hi_us)), height=40)


@st.cache_data(max_entries=16, show_spinner="Building the timeline…")
def timeline_data(path: str, mtime_ns: int, step: int, max_items: int) -> dict:
    return timeline(_load_cached(Path(path)), step, max_items)


@st.cache_data(max_entries=32, show_spinner=False)
def layer_data(path: str, mtime_ns: int, layer: str, step: int | None, _findings: list[dict]) -> dict:
    return layer_detail(_load_cached(Path(path)), layer, step=step, findings=_findings)


def upload_inputs(files: list[Any]) -> tuple[str, tuple[str, ...], str]:
    """(cache key, paths to analyze, staging dir) for the uploaded files."""
    items: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for k, f in enumerate(files):
        name = safe_file_name(f.name, f"trace{k}.json")
        if name in seen:  # same name twice: keep both
            name = f"{k}_{name}"
        seen.add(name)
        items.append((name, f.getvalue()))
    h = hashlib.sha256()
    for name, data in items:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    digest = h.hexdigest()
    tmp = staged(digest, tuple(items))
    base = Path(tmp.name)
    # Several files are the ranks of one job: a directory, as `traceview analyze RUN_DIR/` does.
    paths = (str(base),) if len(items) > 1 else (str(base / items[0][0]),)
    return digest, paths, str(base)


def chosen_inputs(files: list[Any] | None, sample: str, samples: dict[str, Path]) -> tuple[str, tuple[str, ...], str]:
    if files:
        return upload_inputs(files)
    if sample != NO_SAMPLE:
        p = samples[sample]
        return f"sample:{p}", (str(p),), ""
    return "", (), ""


# ---- view model --------------------------------------------------------------------------------------------
@dataclass
class View:
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


def _no_trace(v: View) -> bool:
    if v.trace is None:
        st.info("Upload a Kineto trace (`.json` / `.json.gz`) or pick a bundled sample in the sidebar.")
        return True
    return False


def stacked_bar(rows: list[dict], field: str, keys: list[str], title: str, y_title: str,
                scale: float = 1.0) -> go.Figure:
    """One bar per step, one stacked segment per key of row[field] (values / `scale`)."""
    x = [str(r["step"]) for r in rows]
    fig = go.Figure()
    for k in keys:
        fig.add_bar(name=k, x=x, y=[(r[field].get(k) or 0) / scale for r in rows], marker_color=PALETTE.get(k))
    fig.update_layout(barmode="stack", title=title, xaxis_title="step", yaxis_title=y_title,
                      xaxis_type="category", legend_traceorder="normal", height=380)
    return fig


# ---- pages -------------------------------------------------------------------------------------------------
def page_overview(v: View) -> None:
    st.header("Overview")
    if _no_trace(v):
        return
    t = v.trace
    s, c = t["summary"], t["classification"]
    meta = t["metadata"]
    st.caption(md(f"{v.name(t['path'])} · {meta.get('device') or meta.get('backend')} · format {meta.get('format')}"
                  + (f" · rank {t['rank']}" if t.get("rank") is not None else "")))
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
        st.plotly_chart(stacked_bar(csteps, "shares", keys, "Classifier: share of each step (%)", "% of step"),
                        key="chart_classes")
    else:
        st.caption("No classified steps (no GPU activity, or every step left out).")
    if t["steps"]:
        keys = list(t["steps"][0]["breakdown_us"])
        st.plotly_chart(stacked_bar(t["steps"], "breakdown_us", keys,
                                    "Step-time breakdown (tb_plugin priority order), ms", "ms", scale=1000),
                        key="chart_breakdown")
        show_table(t["steps"], ["step", "start_us", "end_us", "dur_us", "gpu_busy_us", "gpu_busy_pct"],
                   key="steps_table")
    projection = t.get("projection")
    if projection:
        render_projection(projection)
    for j in v.doc["jobs"]:
        render_job(v, j)


def render_job(v: View, j: dict) -> None:
    st.subheader(md(f"Job: {v.name(j['path']) or 'uploaded files'} (ranks {j['ranks']})"))
    nccl = j.get("nccl") or {}
    strag = nccl.get("straggler")
    if strag and strag.get("raised"):  # nccl-wait raised it, not only the formal "last to arrive"
        st.metric("Straggler rank", strag["rank"], help=md(strag.get("reason", "")))
        if (strag.get("cause") or {}).get("text"):  # why it is late leads the job
            st.markdown(f"**Why:** {md(strag['cause']['text'])}")
        st.write(md(strag.get("reason", "")))
        finding = next((f for f in j.get("findings") or [] if f["rule"] in straggler_rules()), {})
        note = (finding.get("evidence") or {}).get("note")
        if note:
            st.warning(md(note))
    elif nccl:
        finding = next((f for f in j.get("findings") or [] if f["rule"] in straggler_rules()), {})
        if (finding.get("evidence") or {}).get("may_be_profiling_artifact"):  # the profiler explains the wait
            st.caption(f"No straggler raised: {nccl.get('collectives', 0)} collectives matched across ranks.")
            st.warning(finding["evidence"]["note"])
        else:
            st.caption(f"No straggler: {nccl.get('collectives', 0)} collectives matched across ranks, waits below "
                       "the nccl-wait thresholds.")
    if nccl.get("ranks"):
        kind = {"kernel": "NCCL kernels", "gloo_annotation": "gloo collectives",
                "c10d_op": "c10d collectives"}.get(nccl.get("source"), "collectives")
        ranks = nccl["ranks"]
        fig = go.Figure()
        names = [str(r["rank"]) for r in ranks]
        fig.add_bar(name="wait", x=names, y=[(r.get("wait_per_step_us") or 0) / 1000 for r in ranks],
                    marker_color=PALETTE["wait"])
        fig.add_bar(name="exposed (lost)", x=names, y=[(r.get("exposed_wait_per_step_us") or 0) / 1000 for r in ranks],
                    marker_color=PALETTE["communication"])
        fig.update_layout(barmode="group", title=f"Wait per step in {kind}, ms", xaxis_title="rank",
                          yaxis_title="ms per step", height=320, xaxis_type="category")
        st.plotly_chart(fig, key=f"chart_wait_{j['path']}")
        st.markdown(f"**Wait per rank in {kind}**")
        show_table(ranks, key=f"job_wait_{j['path']}")
    rows = [{"rank": r["rank"], "dominant": r["dominant"], "waiting for straggler %": r.get("straggler_wait_pct"),
             **(r.get("shares") or {})} for r in j["classification"]]
    st.markdown("**Classifier per rank** (% of step)")
    show_table(rows, key=f"job_cls_{j['path']}")
    if j.get("findings"):
        st.markdown("**Job findings** (details on the Findings page)")
        show_table(j["findings"], FINDING_COLS, key=f"job_find_{j['path']}")


FINDING_COLS = ["severity", "code", "rule", "title", "count", "cost_us", "savings_us", "savings_pct", "layer"]


def render_findings(v: View, found: list[dict], key: str) -> None:
    """Findings with savings, each in an expander; those with no estimated savings folded into one."""
    found = sorted(found, key=lambda f: (f.get("severity") == "info", -(f.get("savings_us") or 0)))  # as the JSON ranks them
    saving = [f for f in found if f.get("savings_us")]
    zero = [f for f in found if not f.get("savings_us")]
    show_table(saving, FINDING_COLS, key=f"{key}_table")
    for n, f in enumerate(saving):
        label = f"{f['code']} {md(f['rule'])}: {md(f['title'])}"
        with st.expander(label, expanded=False, icon=SEVERITY_ICON.get(f["severity"])):
            st.markdown(f"**Save** {ms(f['savings_us'])}/step ({f['savings_pct']} % of the step) · "
                        f"**cost** {ms(f['cost_us'])} · **count** {f['count']} · **steps** {md(f['steps'])}"
                        + (f" · **layer** {md(f['layer'])}" if f.get("layer") else ""))
            st.markdown("**Fix**")
            st.markdown(md(f["fix"]))
            st.markdown("**Evidence**")
            st.json(f["evidence"], expanded=1)
            if key == "trace" and f.get("steps"):  # a link (keeps the sidebar's inputs, unlike switch_page)
                st.page_link(PAGES["timeline"], label="Show on the timeline", icon=":material/timeline:",
                             query_params={"jump": f["code"], "step": str(f["steps"][0])})
            span = finding_range_us(f, v.trace["steps"]) if key == "trace" and v.trace else None
            if span:
                perfetto_button(v, span[0], span[1], f"{key}_{n}_{f['code']}")  # (a rule may fire twice)
    if zero:
        with st.expander(f"{len(zero)} finding(s) without estimated savings", expanded=False):
            show_table(zero, FINDING_COLS, key=f"{key}_zero")


def page_findings(v: View) -> None:
    st.header("Findings")
    if _no_trace(v):
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


# ---- timeline ------------------------------------------------------------------------------------------------
CLS_ROW = "classifier"


def _hover(name: str, n: int = 160) -> str:
    return html.escape(name if len(name) <= n else name[: n - 1] + "…")


def timeline_figure(tl: dict, zoom: tuple[float, float] | None) -> go.Figure:
    """The step's rows (classifier, CPU threads, GPU streams) as horizontal bars in ms from the step start."""
    label = {lane["id"]: lane["label"] for lane in tl["lanes"]}
    rows = [CLS_ROW, *label.values()]
    fig = go.Figure()
    shown: set[str] = set()

    def bars(key: str, y: list[str], ts: list[float], dur: list[float], text: list[str], **kw: Any) -> None:
        fig.add_bar(name=kw.pop("name", key), legendgroup=key, showlegend=key not in shown, orientation="h",
                    y=y, base=[t / 1000 for t in ts], x=[d / 1000 for d in dur], customdata=text,
                    hovertemplate="%{customdata}<extra></extra>", marker_color=PALETTE.get(key), **kw)
        shown.add(key)

    seg = defaultdict(list)
    for s in tl["segments"]:
        seg[s["cls"]].append(s)
    for c in CLASSES:
        if seg.get(c):
            ss = seg[c]
            bars(c, [CLS_ROW] * len(ss), [s["ts_us"] for s in ss], [s["end_us"] - s["ts_us"] for s in ss],
                 [f"{c}: {ms(s['end_us'] - s['ts_us'])} at +{ms(s['ts_us'])}" for s in ss])
    groups = defaultdict(list)
    for it in tl["items"]:
        groups[it["cls"] or it["kind"]].append(it)
    for key in sorted(groups, key=lambda k: (k not in CLASSES, k)):
        its = groups[key]
        text = []
        for it in its:
            t = f"<b>{_hover(it['name'])}</b><br>{ms(it['dur_us'])} at +{ms(it['ts_us'])}"
            if it["op"]:
                t += f"<br>op {_hover(it['op'], 80)}"
            if it["launch_us"] is not None:  # the launch link: which thread queued it, and when
                t += f"<br>launched at +{ms(it['launch_us'])} by {_hover(it['launch_thread'])}"
            text.append(t)
        bars(key, [label[i["lane"]] for i in its], [i["ts_us"] for i in its], [i["dur_us"] for i in its], text,
             marker_line_width=0)
    if tl["chains"]:
        ch = [c for c in tl["chains"] if c["lane"] in label]
        fig.add_bar(name="elementwise chain", orientation="h", y=[label[c["lane"]] for c in ch],
                    base=[c["ts_us"] / 1000 for c in ch], x=[(c["end_us"] - c["ts_us"]) / 1000 for c in ch],
                    marker={"color": "rgba(0,0,0,0)", "line": {"color": CHAIN_LINE, "width": 2}},
                    customdata=[f"elementwise chain of {c['kernels']} kernels: {ms(c['end_us'] - c['ts_us'])}"
                                for c in ch], hovertemplate="%{customdata}<extra></extra>")
    if tl["syncs"]:
        sy = tl["syncs"]
        fig.add_scatter(name="sync", mode="markers", x=[s["ts_us"] / 1000 for s in sy],
                        y=[label.get(s["lane"], CLS_ROW) for s in sy],
                        marker={"symbol": "triangle-down", "size": 12, "color": PALETTE["host_sync"],
                                "line": {"color": "#000000", "width": 1}},
                        customdata=[f"<b>{_hover(s['name'])}</b> ({_hover(s['cause'])})<br>GPU idle {ms(s['idle_us'])}"
                                    for s in sy], hovertemplate="%{customdata}<extra></extra>")
    for w in sorted(tl["nccl_waits"], key=lambda w: w["ts_us"] - w["end_us"])[:100]:  # the longest, shaded
        fig.add_vrect(x0=w["ts_us"] / 1000, x1=w["end_us"] / 1000, fillcolor=PALETTE["communication"],
                      opacity=0.12, line_width=0, layer="below")
    fig.update_layout(barmode="overlay", bargap=0.15, height=120 + 26 * len(rows), title=f"Step {tl['step']} timeline",
                      xaxis_title="ms from the step start", legend={"orientation": "h", "y": -0.15},
                      margin={"l": 10, "r": 10, "t": 40, "b": 10}, hoverlabel={"namelength": -1})
    fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1], type="category")
    fig.update_xaxes(range=list(zoom) if zoom else [0, tl["dur_us"] / 1000])
    return fig


def page_timeline(v: View) -> None:
    st.header("Timeline")
    if _no_trace(v):
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
    max_items = c2.select_slider("Slices drawn at most", [1000, 2000, 5000, 10000, 20000], value=5000, key="tl_max",
                                 help="Beyond this the shortest slices are left out: the page stays responsive on "
                                      "large steps.")
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
    choice = st.selectbox("Zoom to a finding", opts, key="tl_zoom",
                          help="The costliest occurrence in this step of what each rule reports")
    zoom = None
    if choice in wins:
        w = wins[choice]
        pad = max((w["end_us"] - w["ts_us"]) * 0.25, 5.0)
        zoom = (max(w["ts_us"] - pad, 0) / 1000, min(w["end_us"] + pad, tl["dur_us"]) / 1000)
    cnt = tl["counts"]
    st.caption(f"Step {tl['step']}: {ms(tl['dur_us'])} · {cnt['drawn']:,} of {cnt['slices']:,} slices drawn"
               + (f" ({cnt['shortest_dropped']:,} shortest left out)" if cnt["shortest_dropped"] else "")
               + (f" ({cnt['not_drawn_nested']:,} nested deeper than the rows shown)" if cnt["not_drawn_nested"] else "")
               + f" · {len(tl['syncs'])} syncs · {len(tl['chains'])} elementwise chains · "
               f"{len(tl['nccl_waits'])} exposed NCCL waits")
    st.plotly_chart(timeline_figure(tl, zoom), key="chart_timeline")
    lo, hi = (zoom[0] * 1000, zoom[1] * 1000) if zoom else (0.0, tl["dur_us"])  # the selection, µs in the step
    perfetto_button(v, tl["start_us"] + lo, tl["start_us"] + hi, f"tl_{step}_{choice}")
    idle = [c for c in tl["idle_classes"] if tl["class_us"].get(c)]
    if idle:
        st.markdown("**Idle time in this step** (the classifier row): "
                    + " · ".join(f"{c} {ms(tl['class_us'][c])}" for c in idle))


# ---- layers --------------------------------------------------------------------------------------------------
LAYER_COLS = ["layer", "dominant", "calls", "gpu_us", "self_gpu_us", "fwd_gpu_us", "bwd_gpu_us", "other_gpu_us",
              "gpu_pct", "kernels", "cpu_dispatch_us", "achieved_tflops", "achieved_tbps", "peak_flops_pct",
              "peak_bw_pct", "bound", "class", "finding_codes"]
REPEAT_COLS = ["kind", "class", "depth", "count", "mean_gpu_us", "min_gpu_us", "max_gpu_us", "spread", "cv_pct",
               "outliers"]


ROOT_LAYER = "(all layers)"


def layers_icicle(rows: list[dict], total_us: float | None) -> go.Figure:
    """GPU time by layer, nested under one root; each box coloured by its dominant class (legend: the classes)."""
    rows = [r for r in rows if (r.get("gpu_us") or 0) > 0]
    ids = {r["layer"] for r in rows}
    fig = go.Figure(go.Icicle(
        ids=[ROOT_LAYER, *[r["layer"] for r in rows]],
        labels=[f"all layers: {ms(total_us)} GPU", *[r.get("name") or r["layer"] for r in rows]],
        parents=["", *[r["parent"] if r.get("parent") in ids else ROOT_LAYER for r in rows]],
        values=[0, *[r["self_gpu_us"] / 1000 for r in rows]], branchvalues="remainder",
        marker={"colors": ["#888888", *[PALETTE.get(r.get("dominant"), "#dddddd") for r in rows]]},
        customdata=["all layers", *[f"{_hover(r['layer'])}<br>GPU {ms(r['gpu_us'])} (fwd {ms(r['fwd_gpu_us'])}, "
                                    f"bwd {ms(r['bwd_gpu_us'])})<br>dominant: {r.get('dominant') or '–'}"
                                    for r in rows]],
        hovertemplate="%{customdata}<extra></extra>", tiling={"orientation": "v"}, maxdepth=5,
    ))
    for c in CLASSES:  # legend entries only: an icicle has none of its own
        if any(r.get("dominant") == c for r in rows):
            fig.add_scatter(x=[None], y=[None], mode="markers", name=c,
                            marker={"color": PALETTE[c], "symbol": "square", "size": 12})
    fig.update_layout(title="GPU time by layer (colour: dominant class)", height=480,
                      margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend={"orientation": "h", "y": -0.05},
                      xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def page_layers(v: View) -> None:
    st.header("Layers")
    if _no_trace(v):
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
    sel = st.selectbox("Layer", names, key="layer_sel",
                       format_func=lambda n: f"{n} ({ms(next(r['gpu_us'] for r in rows if r['layer'] == n))})")
    if sel:
        path = Path(v.trace["path"])
        d = layer_data(str(path), path.stat().st_mtime_ns, sel, v.step, v.trace["findings"])
        st.markdown(f"**{md(sel)}**: {ms(d['gpu_us'])} GPU, {d['kernel_count']} GPU activities")
        k1, k2 = st.columns(2)
        with k1:
            st.markdown("**Kernels**")
            show_table(d["kernels"], ["name", "count", "total_us", "mean_us", "share_pct", "op"], key="layer_kernels")
        with k2:
            st.markdown("**Ops**")
            show_table(d["ops"], ["op", "calls", "kernels", "gpu_us", "cpu_us", "share_pct"], key="layer_ops")
        if d["findings"]:
            st.markdown("**Findings in this layer**")
            show_table(d["findings"], FINDING_COLS, key="layer_findings")

    st.subheader("Layer table")
    table = []
    for r in rows:
        row = {c: r.get(c) for c in LAYER_COLS}
        row["layer"] = "\u2003" * (r.get("depth") or 0) + (r.get("name") or r["layer"])  # indent by depth
        table.append(row)
    show_table(table, key="layers_table")

    depths = sorted({r["depth"] for r in rows if r.get("depth") is not None})
    depth = st.selectbox("Chart depth", depths, index=min(1, len(depths) - 1), key="layer_depth") if depths else 0
    sel_rows = [r for r in rows if r.get("depth") == depth and (r.get("gpu_us") or 0) > 0]
    sel_rows = sorted(sel_rows, key=lambda r: r["gpu_us"], reverse=True)[:30][::-1]  # largest on top
    if sel_rows:
        names = [html.escape(r["layer"]) for r in sel_rows]  # plotly renders tags (<a href>, <b>) in labels
        fig = go.Figure()
        for phase, col in (("forward", "fwd_gpu_us"), ("backward", "bwd_gpu_us"), ("other", "other_gpu_us")):
            fig.add_bar(name=phase, y=names, x=[r[col] / 1000 for r in sel_rows], orientation="h",
                        marker_color=PALETTE[phase])
        fig.update_layout(barmode="stack", title=f"GPU ms per layer (depth {depth})", xaxis_title="GPU ms",
                          height=max(300, 24 * len(sel_rows) + 120))
        st.plotly_chart(fig, key="chart_layers")
    reps = lv.get("repeats") or []
    if reps:
        st.subheader("Repeated layers")
        show_table(reps, REPEAT_COLS, key="repeats_table")


def page_kernels(v: View) -> None:
    st.header("Kernels")
    if _no_trace(v):
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
        c4.metric("Non-compute", f"{tb['non_compute_pct']} %", help=f"non_compute_us = {tb['non_compute_us']}")
        st.markdown("**Idle by stream**")
        show_table(d["idle_by_stream"], key=f"idle_{d['device']}")


# ---- sections other issues add: shown when present ------------------------------------------------------------
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
        show_table([{"field": _col_name(k), "value": str(_cell(k, x)) if x is not None else "–"}
                    for k, x in scalars.items()], key=f"{key}_fields")
    for k, x in sec.items():
        if isinstance(x, (dict, list)) and x:
            st.markdown(f"**{md(_col_name(k))}**")
            render_section(x, f"{key}_{k}")


def page_memory(v: View) -> None:
    st.header("Memory")
    if _no_trace(v):
        return
    mem = v.trace.get("memory")
    if not mem:
        st.info("This trace has no memory section (record with profile_memory=True).")
        return
    render_section(mem, "memory")


def render_projection(p: dict) -> None:
    """The projection as a waterfall in unprofiled terms: the replayed step, each fix's saving alone (per step,
    the findings' number), the overlap the replay of all fixes together counts once, and the step with every fix."""
    st.subheader("Projection")
    fixes = [f for f in p.get("fixes") or [] if f.get("savings_us")]
    base, end = p.get("replayed_unprofiled_step_us"), p.get("all_fixed_unprofiled_step_us")
    if isinstance(base, (int, float)) and isinstance(end, (int, float)) and fixes:
        alone = [float(f["savings_us"]) for f in fixes]
        overlap = sum(alone) - (base - end)  # what the fixes remove in common: counted once
        names = [f"{f['code']} {f['rule']}"[:40] for f in fixes]
        fig = go.Figure(go.Waterfall(
            x=["step (unprofiled)", *names, "overlap", "every fix"],
            y=[base / 1000, *[-s / 1000 for s in alone], overlap / 1000, 0],
            measure=["absolute", *["relative"] * len(alone), "relative", "total"],
            decreasing={"marker": {"color": PALETTE["gpu_compute"]}},
            totals={"marker": {"color": PALETTE["cpu_launch"]}}))
        fig.update_layout(title="Replayed step time, ms (save per step of each fix alone)", yaxis_title="ms",
                          height=380)
        st.plotly_chart(fig, key="chart_projection")
        st.caption(f"Every fix together: {ms(end)} per step (from {ms(base)}, unprofiled, replayed).")
    render_section(p, "projection")


def page_diff(v: View) -> None:
    st.header("Diff")
    if _no_trace(v):
        return
    st.caption("A: the traces loaded in the sidebar (all steps). B: another run to compare with.")
    c1, c2 = st.columns(2)
    files = c1.file_uploader("B: trace files", key="upload_b", type=["json", "gz"], accept_multiple_files=True)
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
        m2.metric("Step B", ms(s["b_us"]), delta=ms(s["delta_us"]) if s["delta_us"] is not None else None,
                  delta_color="inverse")
        m3.metric("Beyond noise", "yes" if s.get("beyond_noise") else "no", help=f"noise_us = {s.get('noise_us')}")
        st.info(md(f"Class shift: {p['shift_text']}"))
        cls = p["classes"]
        fig = go.Figure(go.Bar(x=[c["class"] for c in cls], y=[c["delta_us"] / 1000 for c in cls],
                               marker_color=[PALETTE.get(c["class"]) for c in cls]))
        fig.update_layout(title="Class shift per step (B − A), ms", yaxis_title="ms per step", height=340)
        st.plotly_chart(fig, key=f"chart_diff_{n}")
        st.markdown("**Layers** (largest change first)")
        show_table(p["layers"][:30], key=f"diff_layers_{n}")
        st.markdown("**Kernels** (largest change first)")
        show_table(p["kernels"][:30], key=f"diff_kernels_{n}")
        fd = p["findings"]
        for what in ("appeared", "disappeared", "changed"):
            if fd.get(what):
                st.markdown(f"**Findings {what}**")
                show_table(fd[what], key=f"diff_find_{what}_{n}")
    if d.get("unmatched_a") or d.get("unmatched_b"):
        st.caption(md(f"Unmatched: A {[v.name(x) for x in d['unmatched_a']]}, "
                      f"B {[names.name(x) for x in d['unmatched_b']]}"))


def page_raw(v: View) -> None:
    st.header("Raw JSON")
    buf = io.StringIO()
    fjson.render(v.doc, buf)  # the bytes `traceview analyze --format json` writes
    st.download_button("Download JSON", buf.getvalue(), file_name="traceview.json", mime="application/json",
                       key="download")
    st.json(v.doc, expanded=2)


# ---- frame: sidebar inputs, analysis, navigation -----------------------------------------------------------
def main() -> None:
    st.set_page_config(page_title="traceview", layout="wide")
    with st.sidebar:
        st.title("traceview")
        files = st.file_uploader("Trace files (.json / .json.gz)", key="upload", type=["json", "gz"],
                                 accept_multiple_files=True,
                                 help="Several files = the ranks of one job")
        samples = sample_choices()
        sample = st.selectbox("…or a bundled sample", [NO_SAMPLE, *samples], key="sample")

    try:
        key, paths, strip = chosen_inputs(files, sample, samples)
    except OSError as e:  # the staging disk: say what failed, not where
        st.error(md(f"could not store the upload: {e.strerror or type(e).__name__}"))
        key, paths, strip = "", (), ""
    doc = analyze_doc(key, None, paths) if paths else report.Report().to_dict()
    steps = sorted({n for t in doc["traces"] for n in t["summary"]["step_numbers"]})
    with st.sidebar:
        if st.session_state.get("_step_for") != key:  # new input: back to all steps
            st.session_state["_step_for"] = key
            st.session_state["step"] = "all"
            st.session_state.pop("trace", None)
        step = st.selectbox("Step", ["all", *map(str, steps)], key="step")
        if step != "all":
            doc = analyze_doc(key, int(step), paths)
        trace = None
        if len(doc["traces"]) > 1:
            names = [View(doc, None, strip).name(t["path"]) for t in doc["traces"]]
            k = st.selectbox("Trace", range(len(names)), format_func=lambda i: names[i], key="trace")
            trace = doc["traces"][k]
        elif doc["traces"]:
            trace = doc["traces"][0]

    v = View(doc, trace, strip, None if step == "all" else int(step), key, paths)
    for e in doc["errors"]:  # one line each, without the upload staging directory
        st.error(md(one_line(v.name(e["error"]))))

    pages = [
        st.Page(functools.partial(page_overview, v), title="Overview", url_path="overview", default=True),
        st.Page(functools.partial(page_findings, v), title="Findings", url_path="findings"),
        st.Page(functools.partial(page_timeline, v), title="Timeline", url_path="timeline"),
        st.Page(functools.partial(page_layers, v), title="Layers", url_path="layers"),
        st.Page(functools.partial(page_kernels, v), title="Kernels", url_path="kernels"),
    ]
    if any(t.get("memory") for t in doc["traces"]):
        pages.append(st.Page(functools.partial(page_memory, v), title="Memory", url_path="memory"))
    if tvdiff is not None:
        pages.append(st.Page(functools.partial(page_diff, v), title="Diff", url_path="diff"))
    pages.append(st.Page(functools.partial(page_raw, v), title="Raw JSON", url_path="raw"))
    PAGES.clear()
    PAGES.update({p.url_path: p for p in pages})
    st.navigation(pages).run()


main()
