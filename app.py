"""traceview web app: `streamlit run app.py`.

Widgets, layout and calls to the public API only: every trace goes through `traceview.report.analyze`
with the options that `traceview analyze` uses by default, and the pages render the resulting document
(docs/json-schema.md). Any number shown is in the CLI's JSON output (µs shown as ms is µs / 1000).
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from traceview import report
from traceview.formatters import json as fjson
from traceview.loader import load_file
from traceview.model import Trace
from traceview.options import Options

ROOT = Path(__file__).resolve().parent
SAMPLES = ROOT / "sample_traces"
NO_SAMPLE = "(none)"
# Fixed colours per class, so the same class looks the same in every chart.
CLASS_COLORS = {
    "gpu_compute": "#2ca02c", "gpu_memory": "#98df8a", "communication": "#9467bd", "input": "#ff7f0e",
    "host_sync": "#d62728", "cpu_launch": "#1f77b4", "other_idle": "#7f7f7f",
}
RANK_NAME = re.compile(r"rank[-_]?\d+")  # as the loader reads a rank from a file name
SEVERITY_ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}



# ---- inputs ------------------------------------------------------------------------------------------------
def sample_choices() -> dict[str, Path]:
    """Bundled traces (every `*.json.gz` under sample_traces/), plus each directory holding 2+ rank files
    (`rank<N>` in the name), analyzed as one job like `traceview analyze RUN_DIR/`."""
    files = sorted(p for p in SAMPLES.rglob("*.json.gz") if p.is_file() and not p.name.startswith("."))
    out = {str(p.relative_to(SAMPLES)): p for p in files}
    for d in sorted({p.parent for p in files}):
        if sum(1 for p in files if p.parent == d and RANK_NAME.search(p.name)) > 1:
            out[f"{d.relative_to(SAMPLES)}/ (all ranks)"] = d
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


@st.cache_resource(max_entries=8, show_spinner=False)
def loaded_trace(path: str, mtime_ns: int, size: int) -> Trace:
    """A loaded trace, kept while its file is unchanged: switching steps re-analyzes without re-reading."""
    return load_file(path)


def _load_cached(path: Path) -> Trace:
    s = path.stat()
    return loaded_trace(str(path), s.st_mtime_ns, s.st_size)


@st.cache_data(max_entries=32, show_spinner="Analyzing…")
def analyze_doc(key: str, step: int | None, _paths: tuple[str, ...]) -> dict:
    """The `--format json` document for these inputs (`key` identifies their content)."""
    try:
        return report.analyze(list(_paths), default_options(step),
                              load=_load_cached).to_dict()
    except Exception as e:  # noqa: BLE001 - as the CLI: one line, never a traceback
        return report.Report(errors=[{"path": "", "error": f"internal error ({type(e).__name__}: {e})"}]).to_dict()


def upload_inputs(files: list[Any]) -> tuple[str, tuple[str, ...], str]:
    """(cache key, paths to analyze, staging dir) for the uploaded files."""
    items: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for k, f in enumerate(files):
        name = Path(f.name).name or f"trace{k}.json"
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


# ---- view model --------------------------------------------------------------------------------------------
@dataclass
class View:
    doc: dict
    trace: dict | None  # the selected trace entry
    strip: str  # path prefix to hide (the upload staging directory)

    def name(self, path: str | None) -> str:
        if not path:
            return ""
        p = path.replace(self.strip, "").lstrip("/") if self.strip else path
        return p.replace(str(SAMPLES) + "/", "")


def _table(rows: list[dict], cols: list[str]) -> list[dict]:
    return [{c: r.get(c) for c in cols} for r in rows]


def _no_trace(v: View) -> bool:
    if v.trace is None:
        st.info("Upload a Kineto trace (`.json` / `.json.gz`) or pick a bundled sample in the sidebar.")
        return True
    return False


def stacked_bar(rows: list[dict], field: str, keys: list[str], title: str, y_title: str) -> go.Figure:
    """One bar per step, one stacked segment per key of row[field]."""
    x = [str(r["step"]) for r in rows]
    fig = go.Figure()
    for k in keys:
        fig.add_bar(name=k, x=x, y=[r[field].get(k) for r in rows], marker_color=CLASS_COLORS.get(k))
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
    st.caption(f"{v.name(t['path'])} · {meta.get('device') or meta.get('backend')} · format {meta.get('format')}"
               + (f" · rank {t['rank']}" if t.get("rank") is not None else ""))
    for w in t["warnings"]:
        st.warning(w)
    if t.get("verdict_text"):
        st.info(t["verdict_text"])
    elif c.get("note"):
        st.info(c["note"])
    m1, m2, m3, m4 = st.columns(4)
    avg = s.get("avg_step_us")
    m1.metric("Avg step", f"{avg / 1000:,.3f} ms" if avg is not None else "–", help=f"avg_step_us = {avg}")
    busy = s.get("gpu_busy_pct")
    m2.metric("GPU busy", f"{busy} %" if busy is not None else "–")
    m3.metric("Dominant class", c.get("dominant") or "–")
    m4.metric("Steps", s["steps"], help=f"step_numbers = {s['step_numbers']}")

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
                                    "Step-time breakdown (tb_plugin priority order), µs", "µs"),
                        key="chart_breakdown")
        st.dataframe(_table(t["steps"], ["step", "start_us", "end_us", "dur_us", "gpu_busy_us", "gpu_busy_pct"]),
                     hide_index=True, key="steps_table")
    for j in v.doc["jobs"]:
        render_job(v, j)


def render_job(v: View, j: dict) -> None:
    st.subheader(f"Job: {v.name(j['path']) or 'uploaded files'} (ranks {j['ranks']})")
    nccl = j.get("nccl") or {}
    strag = nccl.get("straggler")
    if strag and strag.get("raised"):  # nccl-wait raised it, not only the formal "last to arrive"
        st.metric("Straggler rank", strag["rank"], help=strag.get("reason"))
        if (strag.get("cause") or {}).get("text"):  # why it is late leads the job
            st.markdown(f"**Why:** {strag['cause']['text']}")
        st.write(strag.get("reason", ""))
        finding = next((f for f in j.get("findings") or [] if f["rule"] == "nccl-wait"), {})
        note = (finding.get("evidence") or {}).get("note")
        if note:
            st.warning(note)
    elif nccl:
        finding = next((f for f in j.get("findings") or [] if f["rule"] == "nccl-wait"), {})
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
        fig.add_bar(name="wait", x=names, y=[(r.get("wait_per_step_us") or 0) / 1000 for r in ranks])
        fig.add_bar(name="exposed (lost)", x=names, y=[(r.get("exposed_wait_per_step_us") or 0) / 1000 for r in ranks])
        fig.update_layout(barmode="group", title=f"Wait per step in {kind}, ms", xaxis_title="rank",
                          yaxis_title="ms per step", height=320)
        st.plotly_chart(fig, key=f"chart_wait_{j['path']}")
        st.markdown(f"**Wait per rank in {kind}** (µs)")
        st.dataframe(ranks, hide_index=True, key=f"job_wait_{j['path']}")
    rows = [{"rank": r["rank"], "dominant": r["dominant"], "waiting for straggler %": r.get("straggler_wait_pct"),
             **(r.get("shares") or {})} for r in j["classification"]]
    st.markdown("**Classifier per rank** (%)")
    st.dataframe(rows, hide_index=True, key=f"job_cls_{j['path']}")
    if j.get("findings"):
        st.markdown("**Job findings**")
        st.dataframe(_table(j["findings"], FINDING_COLS), hide_index=True, key=f"job_find_{j['path']}")


FINDING_COLS = ["severity", "code", "rule", "title", "count", "cost_us", "savings_us", "savings_pct", "layer"]


def page_findings(v: View) -> None:
    st.header("Findings")
    if _no_trace(v):
        return
    found = sorted(v.trace["findings"], key=lambda f: -(f.get("savings_us") or 0))
    for j in v.doc["jobs"]:
        found += j.get("findings") or []
    if not found:
        st.success("No findings: no rule fired on the analyzed steps.")
        return
    st.dataframe(_table(found, FINDING_COLS), hide_index=True, key="findings_table")
    for f in found:
        label = f"{SEVERITY_ICON.get(f['severity'], '')} {f['code']} {f['rule']}: {f['title']}"
        with st.expander(label, expanded=False):
            st.markdown(f"**Savings** {f['savings_us']} µs ({f['savings_pct']} %) · **cost** {f['cost_us']} µs · "
                        f"**count** {f['count']} · **steps** {f['steps']} · **layer** `{f.get('layer')}`")
            st.markdown("**Fix**")
            st.write(f["fix"])
            st.markdown("**Evidence**")
            st.json(f["evidence"], expanded=1)


LAYER_COLS = ["layer", "class", "calls", "gpu_us", "self_gpu_us", "fwd_gpu_us", "bwd_gpu_us", "other_gpu_us",
              "gpu_pct", "kernels", "cpu_dispatch_us", "achieved_tflops", "achieved_tbps", "peak_flops_pct",
              "peak_bw_pct", "bound", "dominant", "finding_codes"]
REPEAT_COLS = ["kind", "class", "depth", "count", "mean_gpu_us", "min_gpu_us", "max_gpu_us", "spread", "cv_pct",
               "outliers"]


def page_layers(v: View) -> None:
    st.header("Layers")
    if _no_trace(v):
        return
    lv = v.trace.get("layers") or {}
    rows = lv.get("layers") or []
    if not rows:
        st.info(f"No layers found (source: {lv.get('source')}).")
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("Source", lv.get("source"))
    c2.metric("Coverage", f"{lv.get('coverage_pct')} %", help="attributed_gpu_us / total_gpu_us")
    c3.metric("GPU time", f"{lv.get('total_gpu_us')} µs")
    table = []
    for r in rows:
        row = _table([r], LAYER_COLS)[0]
        row["layer"] = "\u2003" * (r.get("depth") or 0) + (r.get("name") or r["layer"])  # indent by depth
        row["finding_codes"] = ", ".join(r.get("finding_codes") or [])
        table.append(row)
    st.dataframe(table, hide_index=True, key="layers_table")

    depths = sorted({r["depth"] for r in rows if r.get("depth") is not None})
    depth = st.selectbox("Chart depth", depths, index=min(1, len(depths) - 1), key="layer_depth") if depths else 0
    sel = [r for r in rows if r.get("depth") == depth and (r.get("gpu_us") or 0) > 0]
    sel = sorted(sel, key=lambda r: r["gpu_us"], reverse=True)[:30][::-1]  # largest on top
    if sel:
        names = [r["layer"] for r in sel]
        fig = go.Figure()
        fig.add_bar(name="forward", y=names, x=[r["fwd_gpu_us"] / 1000 for r in sel], orientation="h")
        fig.add_bar(name="backward", y=names, x=[r["bwd_gpu_us"] / 1000 for r in sel], orientation="h")
        fig.add_bar(name="other", y=names, x=[r["other_gpu_us"] / 1000 for r in sel], orientation="h")
        fig.update_layout(barmode="stack", title=f"GPU ms per layer (depth {depth})", xaxis_title="GPU ms",
                          height=max(300, 24 * len(sel) + 120))
        st.plotly_chart(fig, key="chart_layers")
    reps = lv.get("repeats") or []
    if reps:
        st.subheader("Repeated layers")
        rtable = _table(reps, REPEAT_COLS)
        for r, src in zip(rtable, reps, strict=True):
            r["outliers"] = ", ".join(map(str, src.get("outliers") or []))
        st.dataframe(rtable, hide_index=True, key="repeats_table")


def page_kernels(v: View) -> None:
    st.header("Kernels")
    if _no_trace(v):
        return
    t = v.trace
    st.subheader("Top kernels")
    st.dataframe(t["top_kernels"], hide_index=True, key="kernels_table")
    st.subheader("Top ops")
    st.dataframe(t["top_ops"], hide_index=True, key="ops_table")
    for d in t["devices"]:
        st.subheader(f"GPU {d['device']}: {d['name']}")
        tb = d["temporal"]
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("Busy", f"{d['busy_pct']} %", help=f"busy_us = {d['busy_us']}")
        c2.metric("Idle", f"{tb['idle_pct']} %", help=f"idle_us = {tb['idle_us']}")
        c3.metric("Compute", f"{tb['compute_pct']} %", help=f"compute_us = {tb['compute_us']}")
        c4.metric("Non-compute", f"{tb['non_compute_pct']} %", help=f"non_compute_us = {tb['non_compute_us']}")
        st.markdown("**Idle by stream** (µs)")
        st.dataframe(d["idle_by_stream"], hide_index=True, key=f"idle_{d['device']}")


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

    key, paths, strip = "", (), ""
    if files:
        key, paths, strip = upload_inputs(files)
    elif sample != NO_SAMPLE:
        p = samples[sample]
        key, paths = f"sample:{p}", (str(p),)

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

    v = View(doc, trace, strip)
    for e in doc["errors"]:
        st.error(v.name(e["error"]) if strip else e["error"])

    pages = [
        st.Page(functools.partial(page_overview, v), title="Overview", url_path="overview", default=True),
        st.Page(functools.partial(page_findings, v), title="Findings", url_path="findings"),
        st.Page(functools.partial(page_layers, v), title="Layers", url_path="layers"),
        st.Page(functools.partial(page_kernels, v), title="Kernels", url_path="kernels"),
        st.Page(functools.partial(page_raw, v), title="Raw JSON", url_path="raw"),
    ]
    st.navigation(pages).run()


main()
