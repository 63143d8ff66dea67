"""SARIF 2.1.0: findings as code-scanning results (GitHub code scanning, GitLab, IDE viewers).

Each finding is a result on the trace file; where the rule found the Python source line (traces
recorded with stacks) it is a second location. Levels: error -> error, warning -> warning, info -> note.
"""

from __future__ import annotations

import re
from typing import IO

import msgspec

LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_SRC = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\)")


def _rules() -> list[dict]:
    from traceview.rules import RULES

    out = []
    for code, m in sorted(RULES.items()):
        doc = (m.__doc__ or "").strip()
        out.append({"id": code, "name": m.NAME, "shortDescription": {"text": m.TITLE},
                    "fullDescription": {"text": doc.split("\n\n")[0] if doc else m.TITLE},
                    "help": {"text": doc, "markdown": doc},
                    "defaultConfiguration": {"level": LEVEL.get(m.SEVERITY, "warning")}})
    return out


def _result(f: dict, path: str) -> dict:
    locs = [{"physicalLocation": {"artifactLocation": {"uri": path}}}]
    src = (f.get("evidence") or {}).get("source")
    m = _SRC.match(src) if isinstance(src, str) else None
    if m:
        locs.insert(0, {"physicalLocation": {"artifactLocation": {"uri": m["file"]},
                                             "region": {"startLine": int(m["line"])}}})
    text = (f"{f['title']}: {f['count']} occurrence(s), cost {f['cost_us'] / 1000:,.3f} ms, save "
            f"{f['savings_us'] / 1000:,.3f} ms/step ({f['savings_pct']} % of the step). {f['fix']}")
    return {"ruleId": f["code"], "level": LEVEL.get(f["severity"], "warning"), "message": {"text": text},
            "locations": locs,
            "properties": {k: f.get(k) for k in ("rule", "steps", "count", "cost_us", "savings_us", "savings_pct",
                                                 "layer")}}


def render(doc: dict, out: IO[str]) -> None:
    results = [_result(f, t["path"]) for t in doc["traces"] for f in t.get("findings") or []]
    results += [_result(f, j["path"]) for j in doc.get("jobs", []) for f in j.get("findings") or []]
    notes = [{"level": "error", "message": {"text": e["error"]}} for e in doc.get("errors", [])]
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "traceview", "version": doc["tool"]["version"],
                                      "rules": _rules()}},
                  "results": results,
                  "invocations": [{"executionSuccessful": not doc.get("errors"),
                                   "toolExecutionNotifications": notes}]}],
    }
    out.write(msgspec.json.format(msgspec.json.encode(sarif), indent=2).decode())
    out.write("\n")
