"""Terminal rendering of the verdict classes, the findings and a job (several ranks): called by formatters/text.py.

`show` is the set of detail sections the user asked for (`--detail` / `--show`); without it only what the
first screen needs is printed: the top findings with their savings per step, the fix of each rule shown, the
straggler and its cause.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ..units import num
from .kernel_names import short_kernel
from .tables import cut_rows
from .term import middle, plain, rule, step_ranges, table

_TRITON = re.compile(r"\btriton_[a-z]+_fused_\w+")
SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
TOP_FINDINGS = 5  # findings on the first screen; `--show findings` lists all
MANY_RANKS = 8  # above this many ranks a job shows the distribution of waits and the worst ranks
WORST_RANKS = 5


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
    rows = cut_rows(rows, 2 + len(classes))
    rows.append(["all", *[num(c["shares"][k]) for k in classes], c.get("primary") or c["dominant"]])
    cols = [("step", "right"), *[(k.replace("_", " "), "right") for k in classes], ("verdict", "left")]
    con.print(table(con, f"Where the step time goes, % per step (classifier; roofline on {c.get('device')}; classes "
                         "at 0 left out)", cols, rows, name_col=None))


def per_step(findings: list[dict], n_steps: int) -> list[float]:
    """Each finding's saving in ms per step (`savings_us` is per step, unprofiled terms: issue 25)."""
    del n_steps
    return [f["savings_us"] / 1000 for f in findings]


def findings_table(findings: list[dict], con: Console, n_steps: int, title: str, limit: int | None = TOP_FINDINGS,
                   fixes: bool = True) -> None:
    """The findings sorted by savings (first `limit`), savings per step, then each shown rule's fix once and the
    findings' notes."""
    if not findings:
        con.print("No findings." if plain(con) else "[green]No findings.[/]")
        return
    listed = findings
    if limit is not None:  # the first screen: an info finding that saves nothing is not worth a row
        listed = [f for f, s in zip(findings, per_step(findings, n_steps), strict=True)
                  if f["severity"] != "info" or round(s, 2) > 0]
    shown = listed if limit is None else listed[:limit]
    more = len(findings) - len(shown)
    if not shown:
        con.print(f"{more} finding(s) at info saving nothing: --show findings")
        return
    rows = [[_sev(con, f["severity"]), f["code"], short_names(f["title"]), num(s, 2), num(f["savings_pct"]),
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


def short_names(title: str) -> str:
    """A finding's title with the Triton kernel names in it shortened (kernel_names.short_kernel)."""
    return _TRITON.sub(lambda m: short_kernel(m.group(0)), title)


def findings_detail(findings: list[dict], con: Console) -> None:
    """Every finding with its count, cost and evidence notes (detail section `findings`)."""
    for f in findings:
        con.print(Text.assemble(_sev(con, f["severity"]), f" {f['code']} {f['rule']}: {f['title']} — count "
                                f"{f['count']}, cost {num(f['cost_us'] / 1000, 3)} ms, save "
                                f"{num(f['savings_us'] / 1000, 3)} ms/step ({num(f['savings_pct'])} % of the step)"))
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


def _job_replay_line(j: dict, con: Console) -> None:
    """The job replay in one line: its fit, and the job's step after the straggler's fix and every rank's top fix."""
    rep, proj = j.get("replay") or {}, j.get("projection") or {}
    if not rep.get("job_step_us"):
        return
    fid = rep.get("fidelity") or {}
    line = (f"Job replay: step {rep['job_step_us'] / 1000:,.2f} ms (traced {rep['traced_job_step_us'] / 1000:,.2f} ms, "
            f"every rank within {fid.get('max_error_pct')} %)")
    sf, top = proj.get("straggler_fixed"), proj.get("all_top_fixes")
    if sf:
        line += f"; rank {sf['rank']}'s cause fixed → {sf['job_step_us'] / 1000:,.2f} ms"
    if top:
        line += f"; every rank's top fix → {top['job_step_us'] / 1000:,.2f} ms"
    con.print(Text(line))


def _quantile(vals: list[float], q: float) -> float:
    """Nearest-rank quantile of a non-empty list."""
    v = sorted(vals)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]


def _ranks_label(ranks: list) -> str:
    """The rank list (`0-3, 5`), or its size and range for a large job."""
    known = [r for r in ranks if r is not None]
    if len(ranks) <= MANY_RANKS:
        return step_ranges(known) if known else "-"
    return f"{len(ranks)} ranks" + (f" ({min(known)}–{max(known)})" if known else "")


def render_job(j: dict, con: Console, show: Collection[str] = ()) -> None:
    """A job (the ranks of one run): the straggler and why it is late first, the step period, the ranks (for a
    large job the distribution of waits and the ranks that lose most), then the job's findings."""
    ranks = j.get("ranks") or []
    tail = f" · ranks {_ranks_label(ranks)}"
    rule(con, "job " + middle(j["path"], max(con.width - len(tail) - 12, 20)) + tail)
    for w in j.get("warnings") or []:  # e.g. ranks unknown (layouts.py)
        con.print(Text(f"warning: {w}"))
    n = j.get("nccl") or {}
    strag = n.get("straggler") or {}
    bold = "" if plain(con) else "bold"
    if strag.get("raised"):  # why the others wait comes first
        cause = _cause(strag)
        con.print(Text("Straggler: ", style=bold) + Text(cause or str(strag.get("reason"))))
    elif n.get("collectives"):
        judged = next((f for f in j.get("findings") or [] if (f.get("evidence") or {}).get("last_rank") is not None),
                      None)
        if judged is not None:  # the job replay judged the last rank: why it is no straggler (or comm-bound)
            con.print(Text(f"{judged['title']}: ", style=bold) + Text(str(judged["evidence"].get("note") or "")))
        else:
            con.print(Text(f"No straggler raised (ranks balanced within the rule's thresholds); "
                           f"{n['collectives']} collectives matched"))
    _job_replay_line(j, con)
    period = j.get("step_period") or {}
    share = {r["rank"]: r.get("exposed_wait_pct") for r in period.get("ranks") or []}
    if period.get("period_us"):
        con.print(Text(f"Step period {period['period_us'] / 1000:,.2f} ms (median over the ranks of their "
                       f"{period['method']})"))
    rows_c = j.get("classification") or []
    rows = n.get("ranks") or []
    many = len(rows_c) > MANY_RANKS and "ranks" not in show
    shown = {r["rank"] for r in rows} | {r["rank"] for r in rows_c}
    if many:  # the straggler and the ranks that lose most, not one row per rank
        worst = sorted(rows, key=lambda r: (-(r.get("exposed_wait_per_step_us") or 0), r["rank"]))[:WORST_RANKS]
        shown = {r["rank"] for r in worst} | ({strag["rank"]} if strag else set())
        doms: dict[str, int] = {}
        for r in rows_c:
            k = r.get("primary") or r.get("dominant") or (f"host: {r['cpu_dominant']}" if r.get("cpu_dominant")
                                                          else "no GPU activity")
            doms[k] = doms.get(k, 0) + 1
        con.print(Text(f"{len(rows_c)} ranks, dominant class: "
                       + ", ".join(f"{k} ×{v}" for k, v in sorted(doms.items(), key=lambda kv: (-kv[1], kv[0])))))
    for r in rows_c:
        if r["rank"] not in shown:
            continue
        wait = r.get("straggler_wait_pct")
        extra = f" — {wait:.1f} % of its step waiting for straggler rank {r['straggler']}" if wait else ""
        what = (f"dominant {r.get('primary') or r['dominant']}" if r.get("dominant")
                else f"host: {r['cpu_dominant']}" if r.get("cpu_dominant") else "no GPU activity")
        con.print(Text(f"rank {r['rank']}: {what}{extra}"))
    if n.get("collectives"):
        kind = "NCCL" if n.get("source", "kernel") == "kernel" else f"{n.get('backend') or 'host'} (host-side)"

        def ms(v: float | None) -> str:
            return "-" if v is None else num(v / 1000, 3)

        order = (lambda r: (-(r.get("exposed_wait_per_step_us") or 0), r["rank"])) if many else (lambda r: r["rank"])
        cells = [[str(r["rank"]), ms(r.get("wait_per_step_us")), ms(r.get("exposed_wait_per_step_us")),
                  num(share.get(r["rank"])), num(r["total_wait_us"] / 1000, 3), num(r.get("mean_wait_us")),
                  str(r["times_last"]), str(r["times_first"]), ms(r.get("comm_us")), ms(r.get("sync_us"))]
                 for r in sorted((r for r in rows if r["rank"] in shown), key=order)]
        con.print(table(con, f"{kind} collectives matched across ranks ({n['collectives']}, by {escape(n['method'])})"
                             + (f": the straggler and the {WORST_RANKS} ranks that lose most" if many else ""),
                        [("rank", "right"), ("wait ms/step", "right"), ("exposed ms/step", "right"),
                         ("exposed % of period", "right"), ("total wait ms", "right", 2), ("mean wait µs", "right", 3),
                         ("times last", "right", 1), ("times first", "right", 1), ("comm ms", "right", 3),
                         ("sync ms", "right", 3)], cells, name_col=0, min_name=4))
        if many:
            import statistics  # here: only a job of many ranks needs it (fractions, decimal: ~1 ms per run)

            exp = [(r.get("exposed_wait_per_step_us") or 0) / 1000 for r in rows]
            con.print(Text(f"exposed wait per step over {len(exp)} ranks, ms: min {min(exp):,.3f} · median "
                           f"{statistics.median(exp):,.3f} · p90 {_quantile(exp, 0.9):,.3f} · max {max(exp):,.3f} "
                           "(every rank: --show ranks or --format json)"))
        if n.get("source") == "kernel" and "ranks" in show:
            con.print("exposed = the part of a rank's wait when its GPU ran nothing else (what it lost); the rest "
                      "waited under its own compute on another stream")
    if "findings" in j:
        findings_table(j["findings"], con, n.get("steps") or 1, "Job findings",
                       limit=None if "findings" in show else TOP_FINDINGS)
