"""Terminal rendering of the verdict (classification) and the findings (registered into text.EXTRA)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..units import num
from .text import step_rows

SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _classification(c: dict, con: Console) -> None:
    if not c or not c.get("dominant"):
        return
    classes = [k for k in c["shares"]]
    t = Table(title=f"Where the step time goes (classifier; dominant: {c['dominant']}; roofline on {c.get('device')})")
    t.add_column("step", justify="right")
    for k in classes:
        t.add_column(k.replace("_", " "), justify="right")
    t.add_column("verdict")
    for s in step_rows(c.get("steps", []), t):
        t.add_row(str(s["step"]), *[num(s["shares"][k]) for k in classes], s["dominant"] or "-")
    t.add_row("all", *[num(c["shares"][k]) for k in classes], c["dominant"], style="bold")
    con.print(t)


def _findings(findings: list[dict], con: Console, title: str) -> None:
    if not findings:
        con.print("[green]No findings.[/]")
        return
    t = Table(title=title, show_lines=False)
    for col, j in (("sev", "left"), ("code", "left"), ("rule", "left"), ("finding", "left"), ("count", "right"),
                   ("cost ms", "right"), ("save ms", "right"), ("save %", "right"), ("layer", "left")):
        t.add_column(col, justify=j)
    for f in findings:
        t.add_row(f"[{SEV_STYLE[f['severity']]}]{f['severity']}[/]", f["code"], f["rule"], f["title"], str(f["count"]),
                  num(f["cost_us"] / 1000, 3), num(f["savings_us"] / 1000, 3), num(f["savings_pct"]), f.get("layer") or "-")
    con.print(t)
    seen: set[str] = set()
    for f in findings:
        con.print(f"[{SEV_STYLE[f['severity']]}]{f['code']} {f['rule']}[/]: {f['title']}")
        note = (f.get("evidence") or {}).get("note")
        if isinstance(note, str) and note:
            con.print(f"  note: {note}")
        if f["fix"] not in seen:  # the fix text once per distinct text
            seen.add(f["fix"])
            con.print(f"  fix: {f['fix']}")


def render_trace(t: dict, con: Console) -> None:
    _classification(t.get("classification") or {}, con)
    if "findings" in t:
        _findings(t["findings"], con, "Findings (sorted by estimated savings)")


def render_job(j: dict, con: Console) -> None:
    con.rule(f"[bold]job {j['path']}[/] ranks {j.get('ranks')}")
    for r in j.get("classification") or []:
        wait = r.get("straggler_wait_pct")
        extra = f" — {wait:.1f} % of its step waiting for straggler rank {r['straggler']}" if wait else ""
        what = f"dominant {r['dominant']}" if r.get("dominant") else "no GPU activity"
        con.print(f"rank {r['rank']}: {what}{extra}")
    n = j.get("nccl") or {}
    if n.get("collectives"):
        kind = "NCCL" if n.get("source", "kernel") == "kernel" else f"{n.get('backend') or 'host'} (host-side)"
        t = Table(title=f"{kind} collectives matched across ranks ({n['collectives']}, by {n['method']})")
        for c in ("rank", "wait ms/step", "exposed ms/step", "total wait ms", "mean wait µs", "times last",
                  "times first", "comm ms", "sync ms"):
            t.add_column(c, justify="right")

        def per_step(v: float | None) -> str:
            return "-" if v is None else num(v / 1000, 3)

        for r in n["ranks"]:
            t.add_row(str(r["rank"]), per_step(r.get("wait_per_step_us")), per_step(r.get("exposed_wait_per_step_us")),
                      num(r["total_wait_us"] / 1000, 3), num(r["mean_wait_us"]), str(r["times_last"]),
                      str(r["times_first"]), num(r["comm_us"] / 1000, 3), num(r["sync_us"] / 1000, 3))
        con.print(t)
        if n.get("straggler"):
            con.print(f"[bold]Straggler:[/] {n['straggler']['reason']}")
        if n.get("source") == "kernel":
            con.print("exposed = the part of a rank's wait when its GPU ran nothing else (what it lost); the rest "
                      "waited under its own compute on another stream")
    if "findings" in j:
        _findings(j["findings"], con, "Job findings")
