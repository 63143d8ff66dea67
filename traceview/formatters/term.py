"""Terminal output helpers: a console sized to the terminal (or `--width`), plain text when piped, tables whose
name column is cut in the middle to fit, compact step lists."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import IO, Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

DEFAULT_WIDTH = 100  # piped output without --width or $COLUMNS
MIN_WIDTH = 40
# a header rule under the column names and nothing else, in ASCII: what a pipe or a log file gets
PLAIN_BOX = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def is_tty(out: IO[str]) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def console(out: IO[str], width: int | None = None) -> Console:
    """A console for `out`: `width` when given, else the terminal's width (a terminal) or $COLUMNS / 100
    (a pipe or file). Colours and box drawing only on a terminal."""
    tty = is_tty(out)
    if width is None:
        env = os.environ.get("COLUMNS", "")
        width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if tty else (
            int(env) if env.isdigit() else DEFAULT_WIDTH)
    con = Console(file=out, width=max(int(width), MIN_WIDTH), highlight=False, force_terminal=tty,
                  no_color=not tty, emoji=False, soft_wrap=False)
    con.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]
    return con


def _broken_pipe() -> None:
    """rich exits with status 1 when the reader of a pipe goes away (`| head`); the CLI exits 0 quietly."""
    raise BrokenPipeError


def plain(con: Console) -> bool:
    return not con.is_terminal


def rule(con: Console, title: str) -> None:
    con.rule(Text(title), characters="-" if plain(con) else "─",  # Text: a path is never read as markup
             style="" if plain(con) else "rule.line")


def middle(name: str | None, n: int) -> str:
    """`name` cut to `n` characters in the middle: a layer path keeps its first and last parts
    (`GPT2LMHeadModel_0/…/GPT2Attention_0`), anything else its start and end."""
    if not name:
        return "-"
    if len(name) <= n:
        return name
    pad = len(name) - len(name.lstrip(" "))
    if pad and n > pad + 4:  # a tree label: keep the indentation, cut the name
        return name[:pad] + middle(name[pad:], n - pad)
    parts = name.split("/")
    if len(parts) > 2:  # a path: the root and as many trailing parts as fit, else only trailing parts
        for k in range(len(parts) - 2, 0, -1):
            with_root = f"{parts[0]}/…/{'/'.join(parts[-k:])}"
            if len(with_root) <= n:
                return with_root
    if len(parts) > 1:
        for k in range(len(parts) - 1, 0, -1):
            tail = "/".join(parts[-k:])
            if len(tail) + 2 <= n:
                return "…/" + tail
    if n < 3:
        return name[:n]
    head = (n - 1) // 2
    return name[:head] + "…" + name[len(name) - (n - 1 - head):]


def step_ranges(steps: Sequence[int]) -> str:
    """`1-3, 7, 9-12`: every step, consecutive runs as ranges (no silent cut)."""
    xs = sorted(set(int(s) for s in steps))
    out: list[str] = []
    k = 0
    while k < len(xs):
        j = k
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[k]) if j == k else f"{xs[k]}-{xs[j]}")
        k = j + 1
    return ", ".join(out) if out else "-"


def _cell(c: Any) -> Text:
    return c if isinstance(c, Text) else Text("-" if c is None else str(c))


def table(con: Console, title: str | None, columns: Sequence[tuple], rows: Sequence[Sequence[Any]],
          name_col: int | None = 0, min_name: int = 24, wrap_col: int | None = None) -> Table | Group:
    """A table that fits the console. `columns`: (header, 'left'|'right'[, drop]) where `drop` > 0 marks a column
    that may be left out when the line is too narrow (highest first) so the name column keeps `min_name`
    characters; cells are strings (or rich Text, never parsed as markup). The `name_col` cells are cut in the
    middle so that no row wraps; the `wrap_col` cells (prose) wrap instead; other text columns get at most a
    quarter of the line."""
    cols = [(c[0], c[1], c[2] if len(c) > 2 else 0) for c in columns]
    cells = [[_cell(c) for c in r] for r in rows]
    keep = list(range(len(cols)))
    flex = name_col if name_col is not None else wrap_col
    if flex is not None and cells:
        cap = max(con.width // 4, 12)
        for k, (h, j, _) in enumerate(cols):
            if k not in (name_col, wrap_col) and j == "left":
                for r in cells:
                    if r[k].cell_len > max(cap, len(h)):
                        r[k] = Text(middle(r[k].plain, max(cap, len(h))), style=r[k].style)

        def width_of(k: int) -> int:  # content + 1 space of padding each inner side + a 1-character divider
            return max([len(cols[k][0])] + [r[k].cell_len for r in cells]) + 3

        def budget() -> int:
            return con.width - sum(width_of(k) for k in keep if k != flex) - 1

        longest = max(r[flex].cell_len for r in cells)
        while budget() < min(min_name, longest) and any(cols[k][2] for k in keep):
            keep.remove(max((k for k in keep if cols[k][2]), key=lambda k: (cols[k][2], k)))
        if name_col is not None:
            b = max(budget(), 8)
            for r in cells:
                r[name_col] = Text(middle(r[name_col].plain, b), style=r[name_col].style)
    t = Table(box=PLAIN_BOX if plain(con) else box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=(0, 1), header_style="" if plain(con) else "bold")
    for k in keep:
        h, j, _ = cols[k]
        # never fold a name into a column of single characters: cut it (the budget above makes that rare)
        t.add_column(h, justify=j, no_wrap=k != wrap_col, overflow="fold" if k == wrap_col else "ellipsis",
                     ratio=1 if k == wrap_col else None)
    for r in cells:
        t.add_row(*[r[k] for k in keep])
    if title is None:
        return t
    # the title on its own line(s), wrapped at the console's width rather than the table's
    return Group(Text(title, style="" if plain(con) else "bold"), t)
