"""Terminal tables of the `layers` section: the layer tree (GPU time, or CPU time on a trace without GPU
activity) and the repeated layers. Each function takes (trace entry, console)."""

from __future__ import annotations

from typing import IO

from rich.console import Console

from ..units import num
from .term import console, rule, table


def render_document(doc: dict, out: IO[str], width: int | None = None) -> None:
    """`traceview layers`: the layers section of each trace, under a rule naming the file."""
    from ..safe_text import text_safe

    con = console(out, width)
    for t in text_safe(doc["traces"]):  # printed as rich Text (no markup), control characters made visible
        rule(con, t["path"])
        render(t, con)


def render(entry: dict, con: Console) -> None:
    """The layer tree and the repeated layers of a trace entry."""
    render_layers(entry, con)
    render_repeats(entry, con)


def _label(r: dict) -> str:
    # readable attribute path (collector `--modules`) with the profiler's Class_n beside it
    return r["name"] if r["layer"] in (r["name"], r.get("module_path")) else f"{r['layer']} ({r['name']})"


def render_layers(entry: dict, con: Console) -> None:
    """The layer tree: GPU time per layer (forward/backward/other, roofline, classes, findings), or for a trace
    without GPU activity the CPU time of the ops each layer issued."""
    cpu = entry.get("cpu") or {}
    if cpu.get("layers"):
        render_cpu_layers(cpu, con)
        return
    sec = entry.get("layers")
    if not sec or not sec.get("layers"):
        return
    n = max(len(sec["steps"]), 1)
    rows = sec["layers"]
    hidden = 0
    if sec["source"] in ("ops", "annotations"):
        # a flat list of top-level ops: rows without GPU time or findings are noise in a terminal (JSON has all)
        keep = [r for r in rows if r["gpu_us"] > 0 or r["findings"]]
        hidden = len(rows) - len(keep)
        rows = keep
    if not rows:
        con.print(f"no layer has GPU time or findings ({hidden} layer(s) in --format json)")
        return
    cells = []
    for r in rows:
        fl = r["finding_codes"] and ",".join(r["finding_codes"]) or (str(r["findings"]) if r["findings"] else "")
        cells.append([_label(r), num(r["fwd_gpu_us"] / 1000 / n, 3), num(r["bwd_gpu_us"] / 1000 / n, 3),
                      num(r["other_gpu_us"] / 1000 / n, 3), num(r["gpu_us"] / 1000 / n, 3), num(r["gpu_pct"]),
                      str(r["kernels"] // n if r["kernels"] else 0), num(r["cpu_dispatch_us"] / 1000 / n, 3),
                      num(r["achieved_tflops"]), num(r["peak_flops_pct"]), num(r["achieved_tbps"], 2),
                      r["bound"] or "-", (r["dominant"] or "-").replace("gpu_", ""), fl])
    # on a narrow terminal the roofline and class columns go first (--width or --format json for all)
    cols = [("layer", "left"), ("fwd", "right"), ("bwd", "right"), ("other", "right", 4), ("total", "right"),
            ("%", "right"), ("kernels", "right", 3), ("CPU ms", "right", 3), ("TFLOP/s", "right", 4),
            ("% peak", "right", 1), ("TB/s", "right", 4), ("bound", "left", 2), ("dominant", "left", 2),
            ("findings", "left")]
    for c, r in zip(cells, rows, strict=True):  # indentation shows the tree; table() cuts the rest to fit
        c[0] = "  " * (r.get("depth") or 0) + c[0]
    con.print(table(con, f"GPU time per layer, ms per step (layers from {sec['source']}; {n} step(s); "
                         f"{num(sec['total_gpu_us'] / 1000 / n, 3)} ms/step, attributed {num(sec['coverage_pct'])} %; "
                         "inclusive: a layer counts its submodules)", cols, cells))
    if hidden:
        con.print(f"{hidden} layer(s) without GPU time or findings not shown (see --format json)")


def render_cpu_layers(cpu: dict, con: Console) -> None:
    rows = [r for r in cpu["layers"] if r["cpu_us"]]
    if not rows:
        return
    n = max(len(cpu.get("steps") or []), 1)
    cells = [[r["name"] if r["depth"] else r["layer"], num(r["fwd_us"] / 1000 / n, 3), num(r["bwd_us"] / 1000 / n, 3),
              num(r["other_us"] / 1000 / n, 3), num(r["cpu_us"] / 1000 / n, 3), num(r["pct"]), str(r["ops"] // n)]
             for r in rows]
    cols = [("layer", "left"), ("fwd", "right"), ("bwd", "right"), ("other", "right", 1), ("total", "right"),
            ("% step", "right"), ("ops", "right", 2)]
    for c, r in zip(cells, rows, strict=True):
        c[0] = "  " * (r.get("depth") or 0) + c[0]
    con.print(table(con, f"CPU time per layer, ms per step (top-level ops each layer issued, inclusive; {n} step(s))",
                    cols, cells))


def render_repeats(entry: dict, con: Console) -> None:
    """Repeated layers: same class at the same place in the tree and the same shapes, compared by GPU time."""
    sec = entry.get("layers") or {}
    reps = sec.get("repeats") or []
    if not reps:
        return
    n = max(len(sec.get("steps") or []), 1)
    rows = [[r["kind"], r.get("shapes") or "-", str(r["count"]),
             num(r["mean_gpu_us"] / 1000 / n, 3), num(r["min_gpu_us"] / 1000 / n, 3), num(r["max_gpu_us"] / 1000 / n, 3),
             num(r["spread"], 3), num(r["cv_pct"]), ", ".join(r["outliers"]) or "-"] for r in reps]
    con.print(table(con, "Repeated layers (same class, place in the tree and shapes), GPU ms per step; outliers: "
                         "more than 20 % off the median",
                    [("kind", "left"), ("shapes", "left"), ("n", "right"), ("mean", "right"), ("min", "right", 2),
                     ("max", "right", 2), ("max/min", "right", 1), ("cv %", "right"), ("outliers", "left")], rows, name_col=1))
