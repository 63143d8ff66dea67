"""Table helpers shared by the terminal renderers."""

from __future__ import annotations

from collections.abc import Iterator

from rich.table import Table

STEP_ROWS = 10  # per-step tables show the first and last this many steps; --format json has them all


def step_rows(rows: list[dict], table: Table) -> Iterator[dict]:
    """The rows to print of a per-step table; a long trace (thousands of steps) shows its first and last
    STEP_ROWS and one row saying how many are left out, so the report stays readable and fast."""
    for k, r in enumerate(rows):
        if len(rows) > 2 * STEP_ROWS + 1 and k == STEP_ROWS:
            table.add_row("…", f"{len(rows) - 2 * STEP_ROWS:,} more")
            table.caption = "steps left out of this table are in --format json"
        if len(rows) <= 2 * STEP_ROWS + 1 or k < STEP_ROWS or k >= len(rows) - STEP_ROWS:
            yield r


def cut_rows(rows: list[list], ncols: int) -> list[list]:
    """The rows of a per-step table to print: a long trace (thousands of steps) shows its first and last
    STEP_ROWS and one row saying how many are left out (they are all in --format json)."""
    if len(rows) <= 2 * STEP_ROWS + 1:
        return rows
    gap = ["…", f"{len(rows) - 2 * STEP_ROWS:,} more", *([""] * (ncols - 2))]
    return [*rows[:STEP_ROWS], gap, *rows[-STEP_ROWS:]]
