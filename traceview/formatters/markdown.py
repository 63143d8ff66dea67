"""Markdown report for CI summaries and pull-request comments (e.g. `>> $GITHUB_STEP_SUMMARY`).

Every string that comes from a trace (paths, names, titles, warnings, errors) goes through
`safe_text` (md_text / md_code / html_text), so a trace cannot put HTML, links, images or mentions
into a PR comment. The fix texts are the rules' own Markdown and are written as is.
"""

from __future__ import annotations

from typing import IO

from ..safe_text import html_text, md_code, md_text
from ..units import num


def _cell(s: object) -> str:
    return md_text(s)


def render(doc: dict, out: IO[str]) -> None:
    w = out.write
    w(f"# traceview report ({md_text(doc['tool']['version'])})\n\n")
    for t in doc["traces"]:
        s = t["summary"]
        rank = f" (rank {md_text(t['rank'])})" if t.get("rank") is not None else ""
        w(f"## {md_code(t['path'])}{rank}\n\n")
        if t.get("verdict_text"):
            w(f"**{md_text(t['verdict_text'])}**\n\n")
        w(f"{s['steps']} step(s) · avg step {num((s['avg_step_us'] or 0) / 1000, 2)} ms · GPU busy "
          f"{num(s['gpu_busy_pct'])} % · device {md_text(t['metadata'].get('device') or '-')}\n\n")
        prof = t.get("profiling")
        if prof and prof.get("note"):
            w(f"> profiler overhead: {md_text(prof['note'])}\n\n")
        for warn in t.get("warnings", []):
            w(f"> warning: {_cell(warn)}\n\n")
        _findings(t.get("findings") or [], w)
    for j in doc.get("jobs", []):
        w(f"## job {md_code(j['path'])} (ranks {md_text(j.get('ranks'))})\n\n")
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
    w("| severity | code | rule | finding | count | cost ms | save ms/step | % step | layer |\n")
    w("|---|---|---|---|---:|---:|---:|---:|---|\n")
    for f in fs:
        w(f"| {_cell(f['severity'])} | {_cell(f['code'])} | {_cell(f['rule'])} | {_cell(f['title'])} | {f['count']} | "
          f"{num(f['cost_us'] / 1000, 3)} | {num(f['savings_us'] / 1000, 3)} | {num(f['savings_pct'])} | "
          f"{_cell(f.get('layer') or '-')} |\n")
    w("\n")
    for f in fs:
        note = (f.get("evidence") or {}).get("note")
        note = f"**Note:** {md_text(note)}\n\n" if isinstance(note, str) and note else ""
        w(f"<details><summary>{html_text(f['code'])} {html_text(f['rule'])}: {html_text(f['title'])}</summary>\n\n"
          f"{note}{f['fix']}\n\n</details>\n\n")
