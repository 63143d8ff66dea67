"""SARIF 2.1.0: findings as code-scanning results (GitHub code scanning, GitLab, IDE viewers).

Each finding is a result on the trace file; where the rule found the Python source line (traces
recorded with stacks) it is a second location. Levels: error -> error, warning -> warning, info -> note.
"""

from __future__ import annotations

import re
from typing import IO
from urllib.parse import quote

import msgspec

from ..safe_text import printable

LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_SRC = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_MAX_LINE = 2**31 - 1  # SARIF's integers; a longer line number is clamped
# Markdown a viewer may render from a message (links, images, emphasis, code, HTML), a mention, an autolink
_MD = re.compile(r"[\[\]()<>`*_!|~#@\\]|://|www\.")


def _source_uri(file: str) -> str | None:
    """The repository-relative URI of a Python frame's file, or None: a location only from a relative path (no
    scheme such as `javascript:`, no absolute path, no `..`), percent-encoded."""
    f = file.strip().replace("\\", "/")
    if not f or _SCHEME.match(f) or f.startswith("/") or ".." in f.split("/") or printable(f, True) != f:
        return None
    return quote(f, safe="/")


def _file_uri(path: str) -> str:
    """The URI of an input file: its path percent-encoded (`:` too: never read as a scheme)."""
    return quote(path.replace("\\", "/"), safe="/")


def _line(digits: str) -> int | None:
    """A region's start line (>= 1; clamped to SARIF's integers), or None for line 0."""
    n = _MAX_LINE if len(digits) > 10 else min(int(digits), _MAX_LINE)
    return n if n >= 1 else None


def plain(text: str) -> str:
    """Message text that no viewer renders as anything but itself: one line, no control characters, Markdown
    and link syntax and mentions spaced out by a zero-width space."""
    return _MD.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], printable(text, one_line=True))


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
    locs = [{"physicalLocation": {"artifactLocation": {"uri": _file_uri(path)}}}]
    src = (f.get("evidence") or {}).get("source")
    m = _SRC.match(src) if isinstance(src, str) else None
    uri, line = (_source_uri(m["file"]), _line(m["line"])) if m else (None, None)
    if uri and line:
        locs.insert(0, {"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": line}}})
    text = (f"{f['title']}: {f['count']} occurrence(s), cost {f['cost_us'] / 1000:,.3f} ms, save "
            f"{f['savings_us'] / 1000:,.3f} ms/step ({f['savings_pct']} % of the step). {f['fix']}")
    return {"ruleId": f["code"], "level": LEVEL.get(f["severity"], "warning"), "message": {"text": plain(text)},
            "locations": locs,
            "properties": {k: f.get(k) for k in ("rule", "steps", "count", "cost_us", "savings_us", "savings_pct",
                                                 "layer")}}


def render(doc: dict, out: IO[str]) -> None:
    results = [_result(f, t["path"]) for t in doc["traces"] for f in t.get("findings") or []]
    results += [_result(f, j["path"]) for j in doc.get("jobs", []) for f in j.get("findings") or []]
    notes = [{"level": "error", "message": {"text": plain(e["error"])}} for e in doc.get("errors", [])]
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
