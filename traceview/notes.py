"""Warnings at scale: one line per kind, not one per step (a 20,000-step trace must not print 20,000)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d[\d,.]*")
KEEP = 3  # lines shown per kind of warning before the rest is counted


def aggregate(warnings: list[str], keep: int = KEEP) -> list[str]:
    """Exact duplicates once; warnings that differ only in their numbers (the same message for step 5, step
    6, ...) as the first `keep` of them plus one line counting the others. Order of first appearance."""
    groups: dict[str, list[str]] = {}
    for w in dict.fromkeys(warnings):
        groups.setdefault(_NUMBER.sub("#", w), []).append(w)
    out: list[str] = []
    for ws in groups.values():
        out.extend(ws[:keep])
        if len(ws) > keep:
            out.append(f"... and {len(ws) - keep:,} more warnings like the one above")
    return out
