"""Terminal tables of the `layers` section (per-layer GPU time, roofline, repeated blocks)."""

from __future__ import annotations

from typing import IO, Any

from ..units import num


def render_document(doc: dict, out: IO[str]) -> None:
    """`traceview layers`: the layers section of each trace, under a rule naming the file."""
    from rich.console import Console

    from ..safe_text import rich_safe

    con = Console(file=out, width=200, highlight=False, emoji=False)
    for t in rich_safe(doc["traces"]):  # trace strings are data, never rich markup
        con.rule(f"[bold]{t['path']}[/]")
        render(t, con)


def render(entry: dict, con: Any) -> None:
    """Rich tables for a trace entry holding a `layers` section."""
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
