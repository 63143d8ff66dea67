"""Terminal report: rich tables (the trace's numbers, its layers, then its verdict and findings; then
each job)."""

from __future__ import annotations

from typing import IO

from rich.console import Console
from rich.table import Table

from ..safe_text import rich_safe
from ..units import num
from . import findings_text, layers
from .tables import step_rows

ROLE_LABELS = {"kernel": "Kernel", "memcpy": "Memcpy", "memset": "Memset", "communication": "Communication",
               "runtime": "Runtime", "dataloader": "DataLoader", "cpu_exec": "CPU Exec", "other": "Other"}




def _short(name: str | None, n: int = 70) -> str:
    if not name:
        return "-"
    return name if len(name) <= n else name[: n - 1] + "…"


def render_trace(t: dict, con: Console) -> None:
    meta = t["metadata"]
    s = t["summary"]
    rank = f" rank {t['rank']}" if t.get("rank") is not None else ""
    con.rule(f"[bold]{t['path']}[/]{rank}")
    con.print(f"format {meta['format']} · backend {meta['backend']} · device {meta.get('device') or '-'} · "
              f"{s['steps']} step(s) {s['step_numbers'][:8]} · avg step {num((s['avg_step_us'] or 0) / 1000, 2)} ms · "
              f"GPU busy {num(s['gpu_busy_pct'])} %")
    for w in t.get("warnings", []):
        con.print(f"[yellow]warning:[/] {w}")
    if t.get("verdict_text"):  # plain text in JSON; emphasis only here
        con.print(f"[bold]{t['verdict_text']}[/]")
    prof = t.get("profiling")
    if prof and prof.get("note"):
        color = "yellow" if prof.get("launch_bound_may_be_artifact") else "dim"
        con.print(f"[{color}]profiler overhead:[/] {prof['note']}")

    tb = Table(title="Step time breakdown (% of step; tb_plugin priority order)", show_lines=False)
    tb.add_column("step", justify="right")
    tb.add_column("ms", justify="right")
    tb.add_column("GPU busy", justify="right")
    for k in ROLE_LABELS.values():
        tb.add_column(k, justify="right")
    for r in step_rows(t["steps"], tb):
        tb.add_row(str(r["step"]), num(r["dur_us"] / 1000, 2), num(r["gpu_busy_pct"]),
                   *[num(r["breakdown_pct"][k]) for k in ROLE_LABELS])
    tb.add_row("avg", num((s["avg_step_us"] or 0) / 1000, 2), num(s["gpu_busy_pct"]),
               *[num(s["breakdown_pct"][k]) for k in ROLE_LABELS], style="bold")
    con.print(tb)

    for dev in t["devices"]:
        tp = dev["temporal"]
        con.print(f"GPU {dev['device']} ({dev.get('name') or '?'}): busy {num(dev['busy_pct'])} % of steps · "
                  f"temporal (HTA): idle {num(tp['idle_pct'])} % · compute {num(tp['compute_pct'])} % · "
                  f"non-compute {num(tp['non_compute_pct'])} % of {num(tp['span_us'] / 1000, 2)} ms")
        it = Table(title=f"GPU {dev['device']} idle time by stream (HTA causes)")
        for c in ("stream", "idle ms", "host wait ms", "kernel wait ms", "other ms", "host wait %"):
            it.add_column(c, justify="right")
        for r in dev["idle_by_stream"]:
            it.add_row(str(r["stream"]), num(r["idle_us"] / 1000, 3), num(r["host_wait_us"] / 1000, 3),
                       num(r["kernel_wait_us"] / 1000, 3), num(r["other_us"] / 1000, 3), num(r["host_wait_pct"]))
        con.print(it)

    if t["top_kernels"]:
        kt = Table(title="Top kernels by GPU time")
        for c, j in (("kernel", "left"), ("kind", "left"), ("count", "right"), ("total ms", "right"),
                     ("mean µs", "right"), ("share %", "right"), ("launched by", "left")):
            kt.add_column(c, justify=j)
        for r in t["top_kernels"]:
            kt.add_row(_short(r["name"]), r["kind"], str(r["count"]), num(r["total_us"] / 1000, 3),
                       num(r["mean_us"], 2), num(r["share_pct"]), _short(r["op"], 40))
        con.print(kt)
    if t["top_ops"]:
        ot = Table(title="Top ops by GPU time")
        for c, j in (("op", "left"), ("calls", "right"), ("kernels", "right"), ("GPU ms", "right"),
                     ("CPU ms", "right"), ("share %", "right")):
            ot.add_column(c, justify=j)
        for r in t["top_ops"]:
            ot.add_row(_short(r["op"], 60), str(r["calls"]), str(r["kernels"]), num(r["gpu_us"] / 1000, 3),
                       num(r["cpu_us"] / 1000, 3), num(r["share_pct"]))
        con.print(ot)


def render(doc: dict, out: IO[str]) -> None:
    doc = rich_safe(doc)  # every string from the trace is markup-escaped once, here, for all renderers
    con = Console(file=out, width=160, highlight=False, emoji=False)
    for t in doc["traces"]:
        render_trace(t, con)
        layers.render(t, con)
        findings_text.render_trace(t, con)
    for j in doc.get("jobs", []):
        findings_text.render_job(j, con)
