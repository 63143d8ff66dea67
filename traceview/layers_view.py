"""The per-layer view at the edges: the `layers` report section, `traceview layers`, and its terminal renderer.

The computation lives in `analyses/layers.py`; this module only turns its frames into JSON-ready data
(µs, percentages) and rich tables. JSON keys are documented in docs/layers.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import polars as pl

from .analyses import layers as L
from .model import Trace
from .units import us


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(float(v), nd)


def _findings_frame(trace: Trace, steps: pl.DataFrame, ctx: dict) -> pl.DataFrame | None:
    """Findings [layer, code]: from ctx when given, else from the rules engine (issue 3) when it is
    installed (its shared analyses are cached in ctx, so this adds only the rule checks)."""
    rows = ctx.get("findings")
    if rows is None:
        engine = L._optional("traceview.engine")
        if engine is not None and hasattr(engine, "run_rules"):
            try:
                rows = engine.run_rules(trace, steps, ctx)
            except Exception:  # noqa: BLE001 - findings are optional in this view
                rows = None
    if isinstance(rows, pl.DataFrame):
        return rows
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        return pl.DataFrame([{"layer": r.get("layer"), "code": r.get("code")} for r in rows],
                            schema={"layer": pl.String, "code": pl.String})
    return None


def section(trace: Trace, steps: pl.DataFrame, ctx: dict | None = None) -> dict[str, Any]:
    """The `layers` section of one trace entry."""
    ctx = {} if ctx is None else ctx  # keep the caller's dict even when empty: sections share its caches
    depth = ctx.get("layers_depth")
    table = L.layer_table(trace, steps, findings=_findings_frame(trace, steps, ctx))
    att = L.attribution(trace)
    reps = L.repeats(table)
    total = int(table["self_gpu_ns"].sum())
    un = table.filter(pl.col("layer") == L.UNATTRIBUTED)
    un_ns = int(un["gpu_ns"].sum())
    g = L._in_steps(trace.gpu.filter(pl.col("kind") != "sync").select("i", "ts", "dur"), steps).join(
        L.gpu_layers(trace).select("i", "phase"), on="i")
    phases = dict(g.group_by("phase").agg(pl.col("dur").sum()).iter_rows())
    spec = L.device_peaks(trace)
    shown = table if depth is None else table.filter((pl.col("depth") <= depth) | (pl.col("layer") == L.UNATTRIBUTED))
    share_cols = [c for c in table.columns if c.startswith("share_")]
    layers = []
    for r in shown.iter_rows(named=True):  # one row per layer: a handful to a few hundred
        layers.append({
            "layer": r["layer"], "name": r["name"], "class": r["layer_class"], "kind": r["kind"],
            "depth": r["depth"], "parent": r.get("parent_layer"), "module_path": r.get("module_path"),
            "calls": r.get("calls"),
            "gpu_us": us(r["gpu_ns"]), "self_gpu_us": us(r["self_gpu_ns"]), "fwd_gpu_us": us(r["fwd_gpu_ns"]),
            "bwd_gpu_us": us(r["bwd_gpu_ns"]), "other_gpu_us": us(r["other_gpu_ns"]),
            "gpu_pct": round(100 * r["gpu_ns"] / total, 2) if total else None,
            "kernels": r["kernels"], "self_kernels": r["self_kernels"], "cpu_dispatch_us": us(r["cpu_ns"]),
            "flops": r["flops"], "bytes": r["bytes"], "intensity": _r(r["intensity"]),
            "achieved_tflops": _r(r["tflops"], 3), "achieved_tbps": _r(r["tbps"], 4),
            "peak_tflops": _r(r["peak_tflops"], 1), "peak_flops_pct": _r(r["peak_flops_pct"]),
            "peak_bw_pct": _r(r["peak_bw_pct"]), "bound": r["bound"],
            "shares_pct": {c.removeprefix("share_"): _r(r[c]) for c in share_cols} if share_cols else None,
            "dominant": r.get("dominant"),
            "findings": r.get("findings", 0) or 0, "finding_codes": r.get("finding_codes") or [],
            "shapes": r.get("shapes"),
        })
    repeat_rows = [{
        "kind": r["kind"], "class": r["layer_class"], "shapes": r["shapes"], "depth": r["depth"], "count": r["count"],
        "members": r["members"], "gpu_us": [us(v) for v in r["gpu"]], "mean_gpu_us": us(r["mean_ns"]),
        "min_gpu_us": us(r["min_ns"]), "max_gpu_us": us(r["max_ns"]), "spread": _r(r["spread"], 4),
        "cv_pct": _r(100 * r["cv"]) if r["cv"] is not None else None, "outliers": r["outliers"],
    } for r in reps.iter_rows(named=True)]
    return {
        "source": att.source, "steps": steps["step"].to_list(), "depth": depth,
        "total_gpu_us": us(total), "attributed_gpu_us": us(total - un_ns), "unattributed_gpu_us": us(un_ns),
        "coverage_pct": round(100 * (total - un_ns) / total, 2) if total else None,
        "phases_gpu_us": {p: us(phases.get(p, 0)) for p in L.PHASES},
        "device_peak": None if spec is None else {"name": spec.name, "tc_tflops": spec.tc_tflops,
                                                  "fp32_tflops": spec.fp32_tflops, "hbm_tbps": spec.hbm_tbps},
        "layers": layers, "repeats": repeat_rows,
    }


# ---- terminal ---------------------------------------------------------------------------------


def render(entry: dict, con: Any) -> None:
    """The layer tree and the repeated layers of a trace entry (formatters/layers_text.py)."""
    from .formatters.layers_text import render_layers, render_repeats

    render_layers(entry, con)
    render_repeats(entry, con)


# ---- CLI --------------------------------------------------------------------------------------


def cmd_layers(args: argparse.Namespace) -> int:
    from . import report
    from .cli import ExitCode, _render
    from .errors import TraceError
    from .loader import input_files, load_file

    doc: dict[str, Any] = {"schema_version": report.SCHEMA_VERSION, "traces": [], "errors": []}
    files: list[Path] = []
    for p in map(Path, args.paths):
        try:
            files.extend(input_files(p))
        except TraceError as e:
            doc["errors"].append({"path": str(p), "error": str(e)})
    for p in files:
        try:
            t = load_file(p)
            steps = report.select_steps(t, args.step)
            ctx = {"layers_depth": args.depth, "step": args.step}
            doc["traces"].append({"path": t.meta.path, "rank": t.meta.rank, "layers": section(t, steps, ctx)})
        except (TraceError, OSError) as e:
            doc["errors"].append({"path": str(p), "error": str(e)})
    if args.format == "json":
        _render(doc, "json", args.output)
    else:
        out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
        try:
            from .formatters.term import console, rule

            con = console(out, args.width)
            for t in doc["traces"]:
                rule(con, t["path"])
                render(t, con)
        finally:
            if args.output:
                out.close()
    for e in doc["errors"]:
        print(f"traceview: error: {e['error']}", file=sys.stderr)
    return ExitCode.ERROR if doc["errors"] else ExitCode.OK


def add_parser(sub: argparse._SubParsersAction, analyze: argparse.ArgumentParser) -> None:
    p = sub.add_parser("layers", help="GPU time, roofline and findings per nn.Module layer")
    p.add_argument("paths", nargs="+", help="trace files (.json/.json.gz)")
    p.add_argument("--depth", type=int, default=None, help="show layers down to this tree depth (0 = roots)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: the layer tree and repeated layers (default); json: the `layers` section (docs/layers.md)")
    p.add_argument("--step", type=int, default=None, help="only ProfilerStep#N")
    p.add_argument("--width", type=int, default=None, metavar="COLS",
                   help="text: line width in columns (default: the terminal's; 100 when piped, or $COLUMNS)")
    p.add_argument("-o", "--output", default=None, help="write the report to a file instead of stdout")
    p.set_defaults(func=cmd_layers)
