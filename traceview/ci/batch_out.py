"""Batch summary rows out: terminal table, `--out FILE.{json,csv,parquet,md}`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from ..analyses.classify import CLASSES
from ..errors import TraceError
from ..safe_text import CSV_FORMULA, text_safe
from ..safe_text import md_cell_code as _code
from ..safe_text import md_text as _cell
from ..units import num

OUT_FORMATS = (".json", ".csv", ".parquet", ".md")
SCHEMA_VERSION = 2  # 2: top_findings' savings_ms is the replayed saving per step (issue 25)


def _top(r: dict) -> str:
    return "; ".join(f"{f['code']} {f['rule']} ({f['severity']}, {f['savings_ms']:,.3f} ms/step)" for f in r["top_findings"])


def flat(r: dict) -> dict[str, Any]:
    """A row as flat columns (CSV, Parquet)."""
    b = r.get("baseline") or {}
    out = {k: r[k] for k in ("input", "kind", "path", "ranks", "status", "steps", "step_ms", "step_sd_ms", "primary")}
    out.update({f"share_{c}": (r["shares"] or {}).get(c) for c in CLASSES})
    out.update({f"n_{s}": r["findings"][s] for s in ("error", "warning", "info")})
    out["top_findings"] = _top(r)
    out["baseline_status"] = b.get("status")
    out["step_delta_pct"] = b.get("step_delta_pct")
    out["regressions"] = "; ".join(b.get("regressions") or []) or None
    out["new_findings"] = "; ".join(b.get("new_findings") or []) or None
    out["error"] = r.get("error")
    return out


def _frame(rows: list[dict]):
    import polars as pl

    schema: dict[str, Any] = {"input": pl.String, "kind": pl.String, "path": pl.String, "ranks": pl.Int64,
                              "status": pl.String, "steps": pl.Int64, "step_ms": pl.Float64,
                              "step_sd_ms": pl.Float64, "primary": pl.String}
    schema.update({f"share_{c}": pl.Float64 for c in CLASSES})
    schema.update({"n_error": pl.Int64, "n_warning": pl.Int64, "n_info": pl.Int64, "top_findings": pl.String,
                   "baseline_status": pl.String, "step_delta_pct": pl.Float64, "regressions": pl.String,
                   "new_findings": pl.String, "error": pl.String})
    return pl.DataFrame([flat(r) for r in rows], schema=schema, orient="row")


def document(rows: list[dict], digests: list[dict], skipped: list[dict], cmp: dict | None, exit_code: int) -> dict:
    from .. import __version__

    return {"schema_version": SCHEMA_VERSION, "kind": "traceview-batch",
            "tool": {"name": "traceview", "version": __version__}, "exit_code": exit_code, "rows": rows,
            "traces": digests, "skipped": skipped, "baseline": cmp}


def write(path: str, rows: list[dict], doc: dict) -> None:
    suffix = Path(path).suffix.lower()
    if suffix not in OUT_FORMATS:
        raise TraceError(f"--out {path}: unknown format (use {', '.join('FILE' + s for s in OUT_FORMATS)})")
    import polars as pl

    try:
        if suffix == ".json":
            Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        elif suffix == ".csv":  # names and paths come from the inputs: none may start a formula
            text = pl.col(pl.String)
            _frame(rows).with_columns(pl.when(text.str.contains(CSV_FORMULA)).then("'" + text).otherwise(text)
                                      .name.keep()).write_csv(path)
        elif suffix == ".parquet":
            _frame(rows).write_parquet(path)
        else:
            with open(path, "w", encoding="utf-8") as fh:
                markdown(doc, fh)
    except OSError as e:
        raise TraceError(f"--out {path}: {e.strerror or e}") from None


def _shares(r: dict, n: int = 3) -> str:
    top = sorted(((v, c) for c, v in (r["shares"] or {}).items() if v), reverse=True)[:n]
    return ", ".join(f"{c} {v:.1f} %" for v, c in top) or "-"


def _step(r: dict) -> str:
    if r["step_ms"] is None:
        return "-"
    return f"{num(r['step_ms'], 3)} ± {num(r['step_sd_ms'], 3)}"


def _vs(r: dict) -> str:
    b = r.get("baseline")
    if not b:
        return "-"
    d = b.get("step_delta_pct")
    d = f"{d:+.1f} %" if d is not None else ""
    return f"{b['status']} {d}".strip()


def markdown(doc: dict, out: IO[str]) -> None:
    """A CI summary (`$GITHUB_STEP_SUMMARY`, a PR comment)."""
    rows = doc["rows"]
    w = out.write
    st = {s: sum(r["status"] == s for r in rows) for s in ("ok", "findings", "regressed", "failed")}
    w(f"# traceview batch ({doc['tool']['version']})\n\n")
    w(f"{len(rows)} trace(s)/run(s): {st['ok']} ok, {st['findings']} with findings at or above --fail-on, "
      f"{st['regressed']} regressed, {st['failed']} failed · exit code {doc['exit_code']}\n\n")
    w("| input | status | step ms (± sd) | vs baseline | primary | shares | findings E/W/I | top finding |\n")
    w("|---|---|---:|---|---|---|---|---|\n")
    for r in rows:
        f = r["findings"]
        top = r["top_findings"][0] if r["top_findings"] else None
        tf = f"{top['code']} {top['title']}" if top else "-"
        w(f"| {_code(r['input'])} | {r['status']} | {_step(r)} | {_vs(r)} | {_cell(r['primary'] or '-')} | {_shares(r)} | "
          f"{f['error']}/{f['warning']}/{f['info']} | {_cell(tf)} |\n")
    w("\n")
    cmp = doc.get("baseline")
    if cmp:
        reg = [t for t in cmp["traces"] if t["status"] == "regressed"]
        if reg:
            w("## Regressions against the baseline\n\n")
            for t in reg:
                w(f"### {_code(t['key'])}\n\n")
                for c in t["checks"]:
                    if c["regressed"] and c.get("gated", True):
                        w(f"- **{c['metric']}**: {num(c['base_us'] / 1000, 3)} → {num(c['now_us'] / 1000, 3)} ms per step "
                          f"({c['delta_pct']:+.1f} % of the baseline step; allowed {num(c['allowed_us'] / 1000, 3)} ms, "
                          f"noise {num(c['noise_us'] / 1000, 3)} ms)\n")
                for f in t["new_findings"] if t.get("new_findings_gated", True) else []:
                    w(f"- new **{f['severity']}** finding {f['code']} {f['rule']}: {_cell(f['title'])}\n")
                w("\n")
        noted = [t for t in cmp["traces"] if t.get("notes")]
        if noted:
            w("## Notes against the baseline (not gated)\n\n")
            for t in noted:
                for n in t["notes"]:
                    w(f"- {_code(t['key'])}: {_cell(n)}\n")
            w("\n")
        if cmp.get("missing"):
            w("Baseline entries without a current trace: " + ", ".join(_code(k) for k in cmp["missing"]) + "\n\n")
    failed = [r for r in rows if r["error"]]
    if failed:
        w("## Failed inputs\n\n")
        for r in failed:
            w(f"- {_code(r['path'])}: {_cell(r['error'])}\n")
        w("\n")


def terminal(doc: dict, out: IO[str], width: int | None = None) -> None:
    """The rows as a table, `width` columns (default: the terminal's; $COLUMNS or 100 when piped, as `analyze`);
    on a narrow line the shares, primary and finding columns go first."""
    from rich.text import Text

    doc = text_safe(doc)  # names and paths come from the inputs: no escape sequence reaches the terminal
    from ..formatters import term

    con = term.console(out, width)
    color = {"ok": "green", "findings": "yellow", "regressed": "red", "failed": "red"}
    cols = [("input", "left"), ("status", "left"), ("step ms ± sd", "right"), ("vs baseline", "left", 1),
            ("primary", "left", 3), ("shares", "left", 4), ("E/W/I", "right", 2), ("top finding", "left", 5)]
    rows = []
    for r in doc["rows"]:
        f = r["findings"]
        top = r["top_findings"][0] if r["top_findings"] else None
        tf = f"{top['code']} {top['rule']} ({top['severity']}, {top['savings_ms']:,.3f} ms/step)" if top else (r["error"] or "-")
        status = Text(r["status"], style="" if term.plain(con) else color[r["status"]])
        rows.append([r["input"], status, _step(r), _vs(r), r["primary"] or "-", _shares(r, 2),
                     f"{f['error']}/{f['warning']}/{f['info']}", tf])
    con.print(term.table(con, f"traceview batch: {len(doc['rows'])} trace(s)/run(s)", cols, rows))
