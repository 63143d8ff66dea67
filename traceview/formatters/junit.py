"""JUnit XML for CI test reports: one test suite per trace, one test case per selected rule.

A rule's case fails when it has a finding of severity warning or error (info findings are reported
as system-out); an input that could not be analyzed is an error case.
"""

from __future__ import annotations

from typing import IO
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from ..safe_text import xml_chars


def escape(s: str) -> str:
    """Text content: XML-escaped, and without the control characters XML 1.0 cannot hold (a trace's names
    may contain any)."""
    return _escape(xml_chars(s))


def quoteattr(s: str) -> str:
    return _quoteattr(xml_chars(s))


def _rule_codes() -> list[tuple[str, str]]:
    from traceview.rules import RULES

    return [(c, m.NAME) for c, m in sorted(RULES.items())]


def _case(name: str, classname: str, findings: list[dict]) -> tuple[str, bool]:
    bad = [f for f in findings if f["severity"] in ("warning", "error")]
    body = ""
    if bad:
        msg = "; ".join(f"{f['severity']}: {f['title']} (save {f['savings_us'] / 1000:,.3f} ms/step)" for f in bad)
        detail = "\n\n".join(f"{f['code']} {f['title']}\n{f['fix']}" for f in bad)
        body += f"<failure message={quoteattr(msg)} type={quoteattr(bad[0]['severity'])}>{escape(detail)}</failure>"
    info = [f for f in findings if f["severity"] == "info"]
    if info:
        body += "<system-out>" + escape("\n".join(f"info: {f['title']}" for f in info)) + "</system-out>"
    return f"    <testcase name={quoteattr(name)} classname={quoteattr(classname)}>{body}</testcase>\n", bool(bad)


def render(doc: dict, out: IO[str]) -> None:
    suites = []
    total = fails = 0
    entries = [(t["path"], t.get("findings") or []) for t in doc["traces"]]
    entries += [(j["path"], j.get("findings") or []) for j in doc.get("jobs", [])]
    for path, fs in entries:
        cases, nf = [], 0
        for code, slug in _rule_codes():
            xml, failed = _case(f"{code} {slug}", path, [f for f in fs if f["code"] == code])
            cases.append(xml)
            nf += failed
        total += len(cases)
        fails += nf
        suites.append(f"  <testsuite name={quoteattr(path)} tests=\"{len(cases)}\" failures=\"{nf}\" errors=\"0\">\n"
                      + "".join(cases) + "  </testsuite>\n")
    errs = doc.get("errors", [])
    if errs:
        cases = "".join(f"    <testcase name=\"load\" classname={quoteattr(e['path'])}><error message="
                        f"{quoteattr(e['error'])}/></testcase>\n" for e in errs)
        suites.append(f"  <testsuite name=\"inputs\" tests=\"{len(errs)}\" failures=\"0\" errors=\"{len(errs)}\">\n"
                      f"{cases}  </testsuite>\n")
        total += len(errs)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(f"<testsuites name=\"traceview\" tests=\"{total}\" failures=\"{fails}\" errors=\"{len(errs)}\">\n")
    out.write("".join(suites))
    out.write("</testsuites>\n")
