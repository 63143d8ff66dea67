"""The size bound of the MCP server's answers: compact JSON text, a token budget, and what was left out to fit.

An answer is measured as its compact JSON text (the text block the server sends), in bytes; the budget in
tokens is taken at `BYTES_PER_TOKEN` bytes a token (JSON with identifiers and numbers runs at ~3-4 bytes a
token, so a budget of 8000 stays well under the ~25k tokens clients refuse). To fit, `fit` first cuts long
strings (kernel names run to 1-2 kB) to 400 characters, then halves the largest list until the answer fits
(shorter strings only when no list is left to halve), and lists in `left_out` what it dropped: numbers are
never changed, only whole list items and the tails of strings.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_BUDGET_TOKENS = 8000
MAX_BUDGET_TOKENS = 20000  # clients refuse answers over ~25k tokens
MIN_BUDGET_TOKENS = 1000
BYTES_PER_TOKEN = 4
STRING_CAPS = (400, 160, 80)  # longest string kept, tried in turn


def text(answer: Any) -> str:
    """The answer as the server sends it: compact JSON, keys in the order built (same input, same bytes)."""
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def size(answer: Any) -> int:
    return len(text(answer).encode())


def _cut_strings(obj: Any, cap: int, counter: list[int]) -> Any:
    if isinstance(obj, str) and len(obj) > cap:
        counter[0] += 1
        return obj[: cap - 1] + "…"
    if isinstance(obj, dict):
        return {k: _cut_strings(v, cap, counter) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cut_strings(v, cap, counter) for v in obj]
    return obj


def _lists(obj: Any, path: str) -> list[tuple[str, list]]:
    """Every list of two or more items in `obj`, with its path (`a.b[0].c`)."""
    out: list[tuple[str, list]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k != "left_out":
                out += _lists(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        if len(obj) > 1:
            out.append((path, obj))
        for i, v in enumerate(obj):
            out += _lists(v, f"{path}[{i}]")
    return out


def fit(answer: dict, budget_tokens: int, reserve: int = 0) -> dict:
    """`answer` cut to `budget_tokens` less `reserve` bytes (see the module docstring); `left_out` says what was
    cut: per list its path, the items shown and the items it had, and how many strings were shortened.
    Deterministic; `answer` itself is not changed."""
    limit = budget_tokens * BYTES_PER_TOKEN - reserve  # `reserve`: bytes the caller adds after (next_offset)
    if size(answer) <= limit:
        return answer
    left: dict[str, dict[str, int]] = {}
    cut = [0]

    def out() -> dict:  # the answer with its note of what was left out (the note counts against the budget)
        notes = [{"path": p, **v} for p, v in sorted(left.items())]
        why = f"answer bound: {budget_tokens} tokens (~{limit} bytes of JSON)"
        return {**answer, "left_out": {"lists": notes, "strings_shortened": cut[0], "why": why}}

    for cap in STRING_CAPS:  # long strings first at 400 characters, then lists halved; shorter strings last
        answer = _cut_strings(answer, cap, cut)
        while size(out()) > limit:
            lists = _lists(answer, "")
            if not lists:
                break
            path, biggest = max(
                lists, key=lambda pl: (size(pl[1]), pl[0])
            )  # ties: the last path, a fixed order
            total = left.get(path, {}).get("total", len(biggest))
            keep = len(biggest) // 2
            del biggest[keep:]
            left[path] = {"shown": keep, "total": total}
            for p in [p for p in left if p.startswith(path + "[") and _index(p, path) >= keep]:
                del left[p]  # notes on lists inside the items just dropped
        if size(out()) <= limit:
            return out()
    # nothing left to cut (a single huge scalar or object): refuse rather than overflow
    raise ValueError(f"the answer does not fit the budget of {budget_tokens} tokens even when cut")


def _index(path: str, parent: str) -> int:
    """The item index right after `parent` in `path` (`a.b[3].c`, `a.b` -> 3)."""
    return int(path[len(parent) + 1 :].split("]", 1)[0])


def shown(answer: dict, path: str, asked: int) -> int:
    """How many items of the list at top-level key `path` survived `fit` (for the next page's offset)."""
    for note in (answer.get("left_out") or {}).get("lists", []):
        if note["path"] == path:
            return note["shown"]
    return asked
