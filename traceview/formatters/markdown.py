"""Markdown report for CI summaries and pull-request comments (e.g. `>> $GITHUB_STEP_SUMMARY`)."""

from __future__ import annotations

from typing import IO

from ..units import num


def _cell(s: object) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render(doc: dict, out: IO[str]) -> None:
    w = out.write
    w(f"# traceview report ({doc['tool']['version']})\n\n")
    for t in doc["traces"]:
        s = t["summary"]
        rank = f" (rank {t['rank']})" if t.get("rank") is not None else ""
        w(f"## `{t['path']}`{rank}\n\n")
        if t.get("verdict_text"):
            w(f"**{t['verdict_text']}**\n\n")
        w(f"{s['steps']} step(s) · avg step {num((s['avg_step_us'] or 0) / 1000, 2)} ms · GPU busy "
          f"{num(s['gpu_busy_pct'])} % · device {t['metadata'].get('device') or '-'}\n\n")
        prof = t.get("profiling")
        if prof and prof.get("note"):
            w(f"> profiler overhead: {prof['note']}\n\n")
        for warn in t.get("warnings", []):
            w(f"> warning: {_cell(warn)}\n\n")
        _findings(t.get("findings") or [], w)
    for j in doc.get("jobs", []):
        w(f"## job `{j['path']}` (ranks {j.get('ranks')})\n\n")
        strag = (j.get("nccl") or {}).get("straggler") or {}
        if strag.get("raised") and (strag.get("cause") or {}).get("text"):
            w(f"**Straggler:** {_cell(strag['cause']['text'])}\n\n")
        _findings(j.get("findings") or [], w)
    for e in doc.get("errors", []):
        w(f"- **error**: {_cell(e['error'])}\n")


def _findings(fs: list[dict], w) -> None:
    if not fs:
        w("No findings.\n\n")
        return
    w("| severity | code | rule | finding | count | cost ms | savings ms | savings % | layer |\n")
    w("|---|---|---|---|---:|---:|---:|---:|---|\n")
    for f in fs:
        w(f"| {f['severity']} | {f['code']} | {f['rule']} | {_cell(f['title'])} | {f['count']} | "
          f"{num(f['cost_us'] / 1000, 3)} | {num(f['savings_us'] / 1000, 3)} | {num(f['savings_pct'])} | "
          f"{_cell(f.get('layer') or '-')} |\n")
    w("\n")
    for f in fs:
        note = (f.get("evidence") or {}).get("note")
        note = f"**Note:** {note}\n\n" if isinstance(note, str) and note else ""
        w(f"<details><summary>{f['code']} {f['rule']}: {_cell(f['title'])}</summary>\n\n{note}{f['fix']}\n\n</details>\n\n")
