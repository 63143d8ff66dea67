"""Rule selection by code prefix (ruff's rule selector): `ALL`, a family (`TV1`), a code (`TV101`) or a
slug (`launch-bound`). `--ignore` wins over `--select`."""

from __future__ import annotations

from types import ModuleType

from .errors import TraceError


def all_rules() -> dict[str, ModuleType]:
    from traceview.rules import RULES

    return RULES


def straggler_rules() -> frozenset[str]:
    """Slugs of the rules whose job finding names the straggler rank (`JUDGES_STRAGGLER`, ruleapi.Rule)."""
    return frozenset(m.NAME for m in all_rules().values() if getattr(m, "JUDGES_STRAGGLER", False))


def resolve(selector: str) -> list[str]:
    """Codes matched by one selector; an unknown selector is an error."""
    rules = all_rules()
    s = selector.strip()
    if s.upper() == "ALL":
        return sorted(rules)
    by_name = {m.NAME: c for c, m in rules.items()}
    if s in by_name:
        return [by_name[s]]
    got = sorted(c for c in rules if c.startswith(s.upper()))
    if not got:
        raise TraceError(f"unknown rule selector {selector!r} (codes: {', '.join(sorted(rules))})")
    return got


def selected(select: list[str] | None = None, ignore: list[str] | None = None) -> list[str]:
    """The codes to run, in code order."""
    codes: set[str] = set()
    for s in select or ["ALL"]:
        codes.update(resolve(s))
    for s in ignore or []:
        codes.difference_update(resolve(s))
    return sorted(codes)
