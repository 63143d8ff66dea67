"""The `layers` report section: the per-layer view as JSON-ready data (µs, percentages).

The computation lives in `analyses/layers.py`; the terminal tables in `formatters/layers.py`. JSON keys are
documented in docs/layers.md.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analyses import layers as L
from ..model import Trace
from ..units import us
from .section import Section

SECTION = Section(
    keys=('layers',), computes='the per-layer view: time, classes and findings per model layer',
    json_type='object', text='layers', app_page='layers',
    json_doc='the per-layer view, see docs/layers.md',
)


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(float(v), nd)


def _findings_frame(findings: list[dict] | None) -> pl.DataFrame | None:
    """The findings' [layer, code] (a finding counts for its layer and the layers enclosing it)."""
    if not findings:
        return None
    return pl.DataFrame([{"layer": f.get("layer"), "code": f.get("code")} for f in findings],
                        schema={"layer": pl.String, "code": pl.String})


def section(trace: Trace, steps: pl.DataFrame, *, findings: list[dict] | None = None,
            kb: pl.DataFrame | None = None, part: pl.DataFrame | None = None,
            depth: int | None = None) -> dict[str, Any]:
    """The `layers` section of one trace entry: the layer table of `steps` with the roofline of each kernel
    (`kb`), the classifier's shares (`part`) and the findings per layer."""
    table, phases = L.layer_table_phases(trace, steps, findings=_findings_frame(findings), kb=kb, part=part)
    att = L.attribution(trace)
    reps = L.repeats(table)
    total = int(table["self_gpu_ns"].sum())
    un = table.filter(pl.col("layer") == L.UNATTRIBUTED)
    un_ns = int(un["gpu_ns"].sum())
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
