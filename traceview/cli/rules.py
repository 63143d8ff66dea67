"""CLI pieces of the rules engine: analyze options, `traceview rules`, `traceview rule CODE`, exit codes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..errors import TraceError
from ..finding_model import SEVERITIES, severity_rank
from ..options import Options

if TYPE_CHECKING:
    import argparse


def _csv(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for s in values for v in s.split(",") if v.strip()]


def add_rule_options(a: argparse.ArgumentParser) -> None:
    """The rule selection and threshold flags of `analyze`."""
    a.add_argument("--select", action="append", metavar="CODES",
                   help="run only these rules: codes, code prefixes (TV1) or slugs, comma separated (default ALL)")
    a.add_argument("--ignore", action="append", metavar="CODES", help="skip these rules (wins over --select)")
    a.add_argument("--config", metavar="FILE", help="TOML file with [tool.traceview] settings "
                                                    "(default: ./pyproject.toml)")
    a.add_argument("--set", action="append", metavar="RULE.OPTION=VALUE", dest="set_options",
                   help="override one rule option, e.g. --set launch-bound.moderate_pct=5")
    a.add_argument("--fail-on", choices=SEVERITIES, default=None,
                   help="exit 1 when a finding at or above this severity exists (default: exit 0 whatever the "
                        "findings, unless `fail-on` is set in [tool.traceview]; bad input always exits 2)")
    a.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings (input errors still exit 2)")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`traceview rules` and `traceview rule CODE`."""
    r = sub.add_parser("rules", help="list the rules (code, slug, severity, title)")
    r.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a table (default); json: code, slug, severity, title and option defaults per rule")
    r.set_defaults(func=cmd_rules)
    one = sub.add_parser("rule", help="print one rule's documentation")
    one.add_argument("code", help="a code (TV101) or slug (launch-bound)")
    one.set_defaults(func=cmd_rule)


def build_options(args: argparse.Namespace) -> Options:
    """The run's Options from the analyze flags and `[tool.traceview]`; sets args.fail_on from the config."""
    opts = Options.build(step=getattr(args, "step", None), select=_csv(getattr(args, "select", None)),
                         ignore=_csv(getattr(args, "ignore", None)), config=getattr(args, "config", None),
                         sets=getattr(args, "set_options", None), fail_on=getattr(args, "fail_on", None),
                         max_bytes=getattr(args, "max_bytes", None),
                         jobs=getattr(args, "jobs", None), what_if=_csv([args.what_if] if getattr(args, "what_if", None) else None),
                         unprofiled_ms=getattr(args, "unprofiled_ms", None))
    args.fail_on = opts.fail_on
    return opts


def exit_code(doc: dict, args: argparse.Namespace) -> int:
    fail_on = getattr(args, "fail_on", None)
    if not fail_on or getattr(args, "exit_zero", False):
        return 0
    limit = severity_rank(fail_on)
    found = [f for t in doc.get("traces", []) for f in t.get("findings", [])]
    found += [f for j in doc.get("jobs", []) for f in j.get("findings", [])]
    return 1 if any(severity_rank(f["severity"]) >= limit for f in found) else 0


def cmd_rules(args: argparse.Namespace) -> int:
    from traceview.rules import RULES

    rows = [{"code": c, "rule": m.NAME, "severity": m.SEVERITY, "title": m.TITLE,
             "options": {k: o.default for k, o in m.OPTIONS.items()}} for c, m in sorted(RULES.items())]
    if args.format == "json":
        import json

        print(json.dumps(rows, indent=1))
        return 0
    from ..formatters.term import console, table

    con = console(sys.stdout)
    con.print(table(con, "traceview rules (`traceview rule CODE` for one's documentation)",
                    [("code", "left"), ("rule", "left"), ("severity", "left"), ("title", "left")],
                    [[r["code"], r["rule"], r["severity"], r["title"]] for r in rows], name_col=None, wrap_col=3))
    return 0


def cmd_rule(args: argparse.Namespace) -> int:
    from traceview.rules import BY_NAME, RULES

    key = args.code
    mod = RULES.get(key.upper()) or BY_NAME.get(key)
    if mod is None:
        raise TraceError(f"unknown rule {key!r} (codes: {', '.join(sorted(RULES))})")
    from ..docs import rule_doc

    sys.stdout.write(f"# {mod.CODE} {mod.NAME}\n\n{rule_doc(mod)}\n")  # the docstring and the evidence keys
    return 0
