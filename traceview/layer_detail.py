"""One layer up close: the kernels and ops that ran inside it and the findings placed in it — what the app
shows when a layer of the `layers` section is selected. Same rows as the report's top kernels / top ops,
restricted to the GPU activity that the layer attribution (analyses/layers.gpu_layers) gives to the layer
or to a layer nested in it."""

from __future__ import annotations

from typing import Any

import polars as pl

from .analyses import kernels
from .analyses.layers import gpu_layers, layers_within
from .model import Trace
from .report import select_steps
from .sections.overview import kernel_rows, op_rows


def layer_detail(trace: Trace, layer: str, *, step: int | None = None, findings: list[dict] | None = None,
                 top: int = 15) -> dict[str, Any]:
    """{layer, gpu_us, kernels, ops, findings} of `layer` over the analysed steps (all, or ProfilerStep#`step`):
    the `top` kernels and ops by GPU time, and those of `findings` (a trace entry's) placed in the layer."""
    steps = select_steps(trace, step)
    lo, hi = int(steps["ts"].min()), int(steps["end"].max())
    lay = gpu_layers(trace)
    within = layers_within(trace, layer)  # the layer and those nested in it (by the tree: names need not nest)
    ids = lay.filter(pl.col("layer").is_in(within))["i"]
    inside = set(within)
    gpu = trace.gpu.filter(pl.col("i").is_in(ids.implode()) & (pl.col("end") > lo) & (pl.col("ts") < hi))
    busy = gpu.filter(pl.col("kind") != "sync")
    return {
        "layer": layer, "gpu_us": round(int(busy["dur"].sum()) / 1000, 3), "kernel_count": busy.height,
        "kernels": kernel_rows(kernels.top_kernels(trace, top, gpu)) if gpu.height else [],
        "ops": op_rows(kernels.top_ops(trace, top, gpu)) if gpu.height else [],
        "findings": [f for f in findings or [] if f.get("layer") in inside],
    }
