"""Terminal rendering of the verdict (classification) and the findings (registered into text.EXTRA)."""

from __future__ import annotations

import statistics

from rich.console import Console
from rich.table import Table

from ..units import num
from .tables import step_rows

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


def projection(p: dict | None, con: Console) -> None:
    """The projected step time: one line per fix and all fixes together (timeline projection: overlapping
    fixes are not counted twice)."""
    if not p or not p.get("fixes"):
        return
    unp = p.get("unprofiled_step_us")
    head = f"Projected step time (each fix alone, then all): now {num(p['step_us'] / 1000, 3)} ms traced"
    if unp is not None:
        head += f", {num(unp / 1000, 3)} ms unprofiled ({p.get('unprofiled_source')}); projections in unprofiled terms"
    con.print(f"[bold]{head}[/]")
    for f in p["fixes"]:
        proj = (unp - f["savings_us"]) if unp is not None else f["step_us"]
        con.print(f"  {f['code']} {f['rule']:<18} -> {num(proj / 1000, 3):>10} ms  (-{num(f['savings_us'] / 1000, 3)} ms)")
    allu = p.get("all_fixed_unprofiled_step_us")
    con.print(f"  all fixed                -> {num((allu if allu is not None else p['all_fixed_step_us']) / 1000, 3):>10} ms")


def render_trace(t: dict, con: Console) -> None:
    _classification(t.get("classification") or {}, con)
    if "findings" in t:
        _findings(t["findings"], con, "Findings (sorted by estimated savings)")
    projection(t.get("projection"), con)


#: above this many ranks the job section shows the distribution of waits and the worst ranks, not a row per rank
MANY_RANKS = 8
WORST_RANKS = 5


def _quantile(vals: list[float], q: float) -> float:
    """Nearest-rank quantile of a non-empty list."""
    v = sorted(vals)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def render_job(j: dict, con: Console) -> None:
    con.rule(f"[bold]job {j['path']}[/] ranks {_ranks_label(j.get('ranks') or [])}")
    n = j.get("nccl") or {}
    strag = n.get("straggler") or {}
    cause = strag.get("cause") or {}
    if strag.get("raised") and cause.get("text"):  # why the others wait comes first
        con.print(f"[bold red]Straggler:[/] {cause['text']}")
    period = j.get("step_period") or {}
    share = {r["rank"]: r.get("exposed_wait_pct") for r in period.get("ranks") or []}
    if period.get("period_us"):
        con.print(f"Step period {period['period_us'] / 1000:,.2f} ms (median over the ranks of their {period['method']})")
    many = len(j.get("classification") or []) > MANY_RANKS
    rows = n.get("ranks") or []
    shown = {r["rank"] for r in rows}
    if many:  # the straggler and the ranks that lose most, not one row per rank
        worst = sorted(rows, key=lambda r: (-(r.get("exposed_wait_per_step_us") or 0), r["rank"]))[:WORST_RANKS]
        shown = {r["rank"] for r in worst} | ({strag["rank"]} if strag else set())
        doms: dict[str, int] = {}
        for r in j.get("classification") or []:
            doms[r.get("dominant") or "no GPU activity"] = doms.get(r.get("dominant") or "no GPU activity", 0) + 1
        con.print(f"{len(j['classification'])} ranks, dominant class: "
                  + ", ".join(f"{k} ×{v}" for k, v in sorted(doms.items(), key=lambda kv: (-kv[1], kv[0]))))
    for r in j.get("classification") or []:
        if r["rank"] not in shown and many:
            continue
        wait = r.get("straggler_wait_pct")
        extra = f" — {wait:.1f} % of its step waiting for straggler rank {r['straggler']}" if wait else ""
        what = f"dominant {r['dominant']}" if r.get("dominant") else "no GPU activity"
        con.print(f"rank {r['rank']}: {what}{extra}")
    if n.get("collectives"):
        kind = "NCCL" if n.get("source", "kernel") == "kernel" else f"{n.get('backend') or 'host'} (host-side)"
        t = Table(title=f"{kind} collectives matched across ranks ({n['collectives']}, by {n['method']})"
                        + (f": the straggler and the {WORST_RANKS} ranks that lose most" if many else ""))
        for c in ("rank", "wait ms/step", "exposed ms/step", "exposed % of period", "total wait ms", "mean wait µs",
                  "times last", "times first", "comm ms", "sync ms"):
            t.add_column(c, justify="right")

        def per_step(v: float | None) -> str:
            return "-" if v is None else num(v / 1000, 3)

        for r in sorted((r for r in rows if r["rank"] in shown),
                        key=lambda r: (-(r.get("exposed_wait_per_step_us") or 0), r["rank"]) if many else r["rank"]):
            t.add_row(str(r["rank"]), per_step(r.get("wait_per_step_us")), per_step(r.get("exposed_wait_per_step_us")),
                      num(share.get(r["rank"])), num(r["total_wait_us"] / 1000, 3), num(r["mean_wait_us"]),
                      str(r["times_last"]), str(r["times_first"]), num(r["comm_us"] / 1000, 3),
                      num(r["sync_us"] / 1000, 3))
        con.print(t)
        if many:
            exp = [(r.get("exposed_wait_per_step_us") or 0) / 1000 for r in rows]
            con.print(f"exposed wait per step over {len(exp)} ranks, ms: min {min(exp):,.3f} · median "
                      f"{statistics.median(exp):,.3f} · p90 {_quantile(exp, 0.9):,.3f} · max {max(exp):,.3f} "
                      "(every rank: --format json)")
        if n.get("straggler"):
            con.print(f"[bold]Straggler:[/] {n['straggler']['reason']}")
        if n.get("source") == "kernel":
            con.print("exposed = the part of a rank's wait when its GPU ran nothing else (what it lost); the rest "
                      "waited under its own compute on another stream")
    if "findings" in j:
        _findings(j["findings"], con, "Job findings")


def _ranks_label(ranks: list) -> str:
    """The rank list, or its size and range for a large job."""
    if len(ranks) <= MANY_RANKS:
        return str(ranks)
    known = [r for r in ranks if r is not None]
    return f"{len(ranks)} ranks" + (f" ({min(known)}–{max(known)})" if known else "")
