"""Terminal rendering of the verdict classes, the findings and a job (several ranks): called by formatters/text.py.

`show` is the set of detail sections the user asked for (`--detail` / `--show`); without it only what the
first screen needs is printed: the top findings with their savings per step, the fix of each rule shown, the
straggler and its cause.
"""

from __future__ import annotations

from collections.abc import Collection

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ..units import num
from .term import middle, plain, rule, step_ranges, table

SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
TOP_FINDINGS = 5  # findings on the first screen; `--show findings` lists all
TOP_RANKS = 8  # ranks in a job's table on the first screen


def _sev(con: Console, sev: str) -> Text:
    return Text(sev, style="" if plain(con) else SEV_STYLE.get(sev, ""))


def classification_table(c: dict, con: Console) -> None:
    """Per step: the classifier's share of each class (detail section `steps`)."""
    if not c or not c.get("dominant"):
        return
    # classes at 0 in every step are left out
    classes = [k for k in c["shares"] if c["shares"][k] or any(s["shares"].get(k) for s in c.get("steps", []))]
    rows = [[str(s["step"]), *[num(s["shares"][k]) for k in classes], s.get("primary") or s["dominant"] or "-"]
            for s in c.get("steps", [])]
    rows.append(["all", *[num(c["shares"][k]) for k in classes], c.get("primary") or c["dominant"]])
    cols = [("step", "right"), *[(k.replace("_", " "), "right") for k in classes], ("verdict", "left")]
    con.print(table(con, f"Where the step time goes, % per step (classifier; roofline on {c.get('device')}; classes "
                         "at 0 left out)", cols, rows, name_col=None))


def per_step(findings: list[dict], n_steps: int) -> list[float]:
    return [f["savings_us"] / 1000 / max(n_steps, 1) for f in findings]


def findings_table(findings: list[dict], con: Console, n_steps: int, title: str, limit: int | None = TOP_FINDINGS,
                   fixes: bool = True) -> None:
    """The findings sorted by savings (first `limit`), savings per step, then each shown rule's fix once and the
    findings' notes."""
    if not findings:
        con.print("No findings." if plain(con) else "[green]No findings.[/]")
        return
    shown = findings if limit is None else findings[:limit]
    more = len(findings) - len(shown)
    rows = [[_sev(con, f["severity"]), f["code"], f["title"], num(s, 2), num(f["savings_pct"]),
             f.get("layer") or "-"] for f, s in zip(shown, per_step(shown, n_steps), strict=True)]
    width = con.width
    # the title column wraps; the layer column is cut in the middle to a third of the line
    layer_w = max(12, min(max(len(str(r[5])) for r in rows), width // 4))
    for r in rows:
        r[5] = middle(r[5], layer_w)
    t = table(con, f"{title} ({len(findings)}{f', top {len(shown)}' if more else ''}; savings = the time a fix "
                   "would remove)",
              [("sev", "left"), ("code", "left"), ("finding", "left"), ("save ms/step", "right"), ("% step", "right"),
               ("where", "left", 1)], rows, name_col=None, wrap_col=2, min_name=28)
    con.print(t)
    if more:
        con.print(f"{more} more finding(s): --show findings" if plain(con)
                  else f"[dim]{more} more finding(s): --show findings[/]")
    for f in shown:
        note = (f.get("evidence") or {}).get("note")
        if isinstance(note, str) and note:
            con.print(Text(f"{f['code']} note: {note}"))
    if not fixes:
        return
    seen: set[str] = set()
    for f in shown:
        if f["rule"] in seen or f["severity"] == "info":  # info: below the rule's threshold, no advice
            continue
        seen.add(f["rule"])
        head = Text(f"{f['code']} {f['rule']} — fix: ", style="" if plain(con) else "bold")
        con.print(head + Text(f["fix"]))


def findings_detail(findings: list[dict], con: Console) -> None:
    """Every finding with its count, cost and evidence notes (detail section `findings`)."""
    for f in findings:
        con.print(Text.assemble(_sev(con, f["severity"]), f" {f['code']} {f['rule']}: {f['title']} — count "
                                f"{f['count']}, cost {num(f['cost_us'] / 1000, 3)} ms, save "
                                f"{num(f['savings_us'] / 1000, 3)} ms ({num(f['savings_pct'])} %)"))
        note = (f.get("evidence") or {}).get("note")
        if isinstance(note, str) and note:
            con.print(Text(f"  note: {note}"))


def render_trace(t: dict, con: Console, show: Collection[str] = ()) -> None:
    """The findings of one trace (the verdict line is text.py's header); `show` adds the detail sections."""
    if "steps" in show:
        classification_table(t.get("classification") or {}, con)
    if "findings" in t:
        n = len((t.get("classification") or {}).get("analyzed_steps") or []) or (t.get("summary") or {}).get("steps") or 1
        full = "findings" in show
        findings_table(t["findings"], con, n, "Findings", limit=None if full else TOP_FINDINGS)
        if full:
            findings_detail(t["findings"], con)


def _cause(strag: dict) -> str | None:
    """The straggler's cause (jobs[].nccl.straggler.cause) as one line, when the job analysis gives one."""
    cause = strag.get("cause")
    if isinstance(cause, str):
        return cause
    if isinstance(cause, dict):
        if cause.get("text"):
            return str(cause["text"])
        if cause.get("class"):
            ex = cause.get("excess_us_per_step")
            return f"{cause['class']}" + (f" +{ex / 1000:,.2f} ms/step" if isinstance(ex, (int, float)) else "")
    return None


def render_job(j: dict, con: Console, show: Collection[str] = ()) -> None:
    """A job (the ranks of one run): the straggler and its cause first, the ranks, then the job's findings."""
    ranks = j.get("ranks") or []
    tail = f" · ranks {step_ranges([r for r in ranks if r is not None])}" if ranks else ""
    rule(con, "job " + middle(j["path"], max(con.width - len(tail) - 12, 20)) + tail)
    n = j.get("nccl") or {}
    strag = n.get("straggler") or {}
    if strag.get("raised"):
        con.print(Text("Straggler: ", style="" if plain(con) else "bold") + Text(str(strag.get("reason"))))
        cause = _cause(strag)
        if cause:
            con.print(Text("Why: ", style="" if plain(con) else "bold") + Text(cause))
    elif n.get("collectives"):
        con.print(Text(f"No straggler raised (ranks balanced within the rule's thresholds); "
                       f"{n['collectives']} collectives matched"))
    rows_c = j.get("classification") or []
    many = len(rows_c) > TOP_RANKS and "ranks" not in show
    for r in (sorted(rows_c, key=lambda r: -(r.get("straggler_wait_pct") or 0))[:TOP_RANKS] if many else rows_c):
        wait = r.get("straggler_wait_pct")
        extra = f" — {wait:.1f} % of its step waiting for straggler rank {r['straggler']}" if wait else ""
        what = (f"dominant {r.get('primary') or r['dominant']}" if r.get("dominant")
                else f"host: {r['cpu_dominant']}" if r.get("cpu_dominant") else "no GPU activity")
        con.print(Text(f"rank {r['rank']}: {what}{extra}"))
    if many:
        con.print(f"({len(rows_c) - TOP_RANKS} more ranks: --show ranks)")
    if n.get("collectives"):
        kind = "NCCL" if n.get("source", "kernel") == "kernel" else f"{n.get('backend') or 'host'} (host-side)"

        def ms(v: float | None) -> str:
            return "-" if v is None else num(v / 1000, 3)

        rk = n["ranks"]
        if len(rk) > TOP_RANKS and "ranks" not in show:
            rk = sorted(rk, key=lambda r: -(r.get("wait_per_step_us") or 0))[:TOP_RANKS]
        rows = [[str(r["rank"]), ms(r.get("wait_per_step_us")), ms(r.get("exposed_wait_per_step_us")),
                 num(r["total_wait_us"] / 1000, 3), str(r["times_last"]), str(r["times_first"])] for r in rk]
        con.print(table(con, f"{kind} collectives matched across ranks ({n['collectives']}, by {escape(n['method'])})",
                        [("rank", "right"), ("wait ms/step", "right"), ("exposed ms/step", "right"),
                         ("total wait ms", "right"), ("times last", "right"), ("times first", "right")],
                        rows, name_col=None))
        if n.get("source") == "kernel" and "ranks" in show:
            con.print("exposed = the part of a rank's wait when its GPU ran nothing else (what it lost); the rest "
                      "waited under its own compute on another stream")
    if "findings" in j:
        findings_table(j["findings"], con, n.get("steps") or 1, "Job findings",
                       limit=None if "findings" in show else TOP_FINDINGS)
