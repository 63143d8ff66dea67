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
from .units import num, us


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
    """Rich tables for a trace entry holding a `layers` section (an `EXTRA` renderer)."""
    from rich.table import Table

    sec = entry.get("layers")
    if not sec or not sec.get("layers"):
        return
    n = max(len(sec["steps"]), 1)
    con.print(f"[bold]Per-layer view[/] (layers from {sec['source']}; {n} step(s); GPU time "
              f"{num(sec['total_gpu_us'] / 1000 / n, 3)} ms/step, attributed {num(sec['coverage_pct'])} %)")
    t = Table(title="GPU time per layer, ms per step (inclusive: a layer counts its submodules)")
    cols = [("layer", "left"), ("fwd", "right"), ("bwd", "right"), ("other", "right"), ("total", "right"),
            ("%", "right"), ("kernels", "right"), ("CPU ms", "right"), ("TFLOP/s", "right"), ("% peak", "right"),
            ("TB/s", "right"), ("bound", "left"), ("dominant", "left"), ("findings", "right")]
    for c, j in cols:
        t.add_column(c, justify=j)
    rows = sec["layers"]
    hidden = 0
    if sec["source"] in ("ops", "annotations"):
        # a flat list of top-level ops: rows without GPU time or findings are noise in a terminal (JSON has all)
        keep = [r for r in rows if r["gpu_us"] > 0 or r["findings"]]
        hidden = len(rows) - len(keep)
        rows = keep
    if not rows:
        con.print(f"[dim]no layer has GPU time or findings ({hidden} layer(s) in --format json)[/]")
        return
    for r in rows:
        fl = r["finding_codes"] and ",".join(r["finding_codes"]) or (str(r["findings"]) if r["findings"] else "")
        # readable attribute path (collector `--modules`) with the profiler's Class_n beside it
        label = r["name"] if r["layer"] in (r["name"], r.get("module_path")) else f"{r['layer']} ({r['name']})"
        t.add_row("  " * (r["depth"] or 0) + label, num(r["fwd_gpu_us"] / 1000 / n, 3),
                  num(r["bwd_gpu_us"] / 1000 / n, 3), num(r["other_gpu_us"] / 1000 / n, 3),
                  num(r["gpu_us"] / 1000 / n, 3), num(r["gpu_pct"]), str(r["kernels"] // n if r["kernels"] else 0),
                  num(r["cpu_dispatch_us"] / 1000 / n, 3), num(r["achieved_tflops"]), num(r["peak_flops_pct"]),
                  num(r["achieved_tbps"], 2), r["bound"] or "-", r["dominant"] or "-", fl)
    con.print(t)
    if hidden:
        con.print(f"[dim]{hidden} layer(s) without GPU time or findings not shown (see --format json)[/]")
    if sec["repeats"]:
        rt = Table(title="Repeated layers (same class at the same place in the tree)")
        for c, j in (("kind", "left"), ("n", "right"), ("mean ms/step", "right"), ("min", "right"),
                     ("max", "right"), ("max/min", "right"), ("cv %", "right"), ("outliers (>20 % off median)", "left")):
            rt.add_column(c, justify=j)
        for r in sec["repeats"]:
            rt.add_row(r["kind"], str(r["count"]), num(r["mean_gpu_us"] / 1000 / n, 3), num(r["min_gpu_us"] / 1000 / n, 3),
                       num(r["max_gpu_us"] / 1000 / n, 3), num(r["spread"], 3), num(r["cv_pct"]),
                       ", ".join(r["outliers"]) or "-")
        con.print(rt)


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
            from rich.console import Console

            con = Console(file=out, width=200, highlight=False)
            for t in doc["traces"]:
                con.rule(f"[bold]{t['path']}[/]")
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
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--step", type=int, default=None, help="only ProfilerStep#N")
    p.add_argument("-o", "--output", default=None, help="write the report to a file instead of stdout")
    p.set_defaults(func=cmd_layers)
