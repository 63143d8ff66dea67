"""`traceview diff` output: terminal tables and Markdown (JSON is the diff document itself)."""

from __future__ import annotations

from typing import IO

from ..safe_text import md_cell_code as _code
from ..safe_text import md_text as _cell
from ..safe_text import text_safe
from ..units import num
from .diff import fmt_us

TOP = 10


def _ms(v: float | None) -> str:
    return "-" if v is None else num(v / 1000, 3)


def _step_line(p: dict) -> str:
    s = p["step"]
    if s["a_us"] is None or s["b_us"] is None:
        return "step time: -"
    noise = "beyond" if s["beyond_noise"] else "within"
    return (f"step {_ms(s['a_us'])} → {_ms(s['b_us'])} ms ({fmt_us(s['delta_us'])}, {s['delta_pct']:+.1f} %; "
            f"{noise} the per-step noise of ±{_ms(s['noise_us'])} ms) · primary {p['primary']['a'] or '-'} → "
            f"{p['primary']['b'] or '-'}")


def _moved(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] != "same"][:TOP]


def _findings_lines(f: dict) -> list[tuple[str, str]]:
    out = [("appeared", f"{x['severity']} {x['code']} {x['rule']}: {x['title']}") for x in f["appeared"]]
    out += [("disappeared", f"{x['severity']} {x['code']} {x['rule']}: {x['title']}") for x in f["disappeared"]]
    out += [("changed", f"{x['code']} {x['rule']}: {x['title']} ({x['a_severity']} → {x['b_severity']})")
            for x in f["changed"]]
    return out


def _title(p: dict) -> str:
    return f"{p['key']}: " if p["key"] else ""


def text(doc: dict, out: IO[str], width: int | None = None) -> None:
    """Terminal output, `width` columns (default: the terminal's; $COLUMNS or 100 when piped, as `analyze`)."""
    from rich.text import Text

    doc = text_safe(doc)  # names and paths come from the traces: no escape sequence reaches the terminal
    from ..formatters import term

    con = term.console(out, width)
    for p in doc["pairs"]:
        term.rule(con, f"{_title(p)}{p['a']} → {p['b']}")
        con.print(Text(_step_line(p)))
        con.print(Text(f"class shift: {p['shift_text']}"))
        for why in p.get("warnings") or []:
            con.print(Text(f"warning: {why}", style="yellow"))
        cols = [("class", "left"), ("before ms", "right"), ("after ms", "right"), ("change", "right"),
                ("share before %", "right", 1), ("share after %", "right", 1)]
        rows = [[c["class"], _ms(c["a_us"]), _ms(c["b_us"]), fmt_us(c["delta_us"]), num(c["a_pct"]), num(c["b_pct"])]
                for c in p["classes"]]
        con.print(term.table(con, "Classes (time per step)", cols, rows))
        for title, moved_rows, name in (("Layers (GPU time per step)", p["layers"], "layer"),
                                        (f"Kernels by launching op (GPU time per step; {p['kernels_source']})",
                                         p["kernels"], "name")):
            moved = _moved(moved_rows)
            if not moved:
                continue
            # on a narrow line before/after go first, then status; the launching op tells equal kernel names apart
            cols = [(name, "left"), *([("op", "left", 1)] if name == "name" else []), ("status", "left", 2),
                    ("before ms", "right", 3), ("after ms", "right", 3), ("change", "right")]
            rows = [[r[name], *([r["op"] or "-"] if name == "name" else []), r["status"], _ms(r["a_us"]),
                     _ms(r["b_us"]), fmt_us(r["delta_us"])] for r in moved]
            con.print(term.table(con, title, cols, rows))
        lines = _findings_lines(p["findings"])
        con.print(Text("findings: " + ("none appeared or disappeared" if not lines else "")))
        for what, ln in lines:
            con.print(Text(f"  {what}: {ln}"))
    for what, ln in _findings_lines(doc.get("job_findings") or {"appeared": [], "disappeared": [], "changed": []}):
        con.print(Text(f"job finding {what}: {ln}"))
    for side in ("a", "b"):
        for path in doc[f"unmatched_{side}"]:
            con.print(Text(f"unmatched in {side.upper()}: {path}", style="" if term.plain(con) else "yellow"))
    for e in doc["errors"]:
        con.print(Text(f"error: {e['error']}", style="" if term.plain(con) else "red"))


def markdown(doc: dict, out: IO[str]) -> None:
    w = out.write
    w(f"# traceview diff ({doc['tool']['version']})\n\n")
    for p in doc["pairs"]:
        w(f"## {_cell(_title(p))}{_code(p['a'])} → {_code(p['b'])}\n\n{_step_line(p)}\n\n**Class shift:** {p['shift_text']}\n\n")
        for why in p.get("warnings") or []:
            w(f"> **Warning:** {_cell(why)}\n\n")
        w("| class | before ms | after ms | change | share before % | share after % |\n|---|---:|---:|---:|---:|---:|\n")
        for c in p["classes"]:
            w(f"| {c['class']} | {_ms(c['a_us'])} | {_ms(c['b_us'])} | {fmt_us(c['delta_us'])} | {num(c['a_pct'])} | "
              f"{num(c['b_pct'])} |\n")
        w("\n")
        for title, rows, name in (("Layers", p["layers"], "layer"), ("Kernels", p["kernels"], "name")):
            moved = _moved(rows)
            if not moved:
                continue
            op = " op |" if name == "name" else ""
            w(f"**{title}** (GPU time per step)\n\n| {name} |{op} status | before ms | after ms | change |\n")
            w("|---|" + ("---|" if op else "") + "---|---:|---:|---:|\n")
            for r in moved:
                opc = f" {_code(r['op'] or '-')} |" if op else ""
                w(f"| {_code(r[name][:90])} |{opc} {r['status']} | {_ms(r['a_us'])} | {_ms(r['b_us'])} | "
                  f"{fmt_us(r['delta_us'])} |\n")
            w("\n")
        lines = _findings_lines(p["findings"])
        w("**Findings:** " + ("none appeared or disappeared\n\n" if not lines else "\n\n"))
        for what, ln in lines:
            w(f"- {what}: {_cell(ln)}\n")
        w("\n")
    for what, ln in _findings_lines(doc.get("job_findings") or {"appeared": [], "disappeared": [], "changed": []}):
        w(f"- job finding {what}: {_cell(ln)}\n")
    for side in ("a", "b"):
        for path in doc[f"unmatched_{side}"]:
            w(f"- unmatched in {side.upper()}: {_code(path)}\n")
    for e in doc["errors"]:
        w(f"- **error**: {_cell(e['error'])}\n")
