"""Unit conversions at the edge (frames hold Int64 ns; reports show µs and %)."""

from __future__ import annotations


def us(ns: float | int | None) -> float | None:
    """ns -> µs rounded to the ns (3 decimals)."""
    return None if ns is None else round(ns / 1000, 3)


def pct(part: float | int | None, whole: float | int | None) -> float | None:
    if part is None or not whole:
        return None
    return round(100.0 * part / whole, 2)


def num(v: float | None, nd: int = 1) -> str:
    """A number for a terminal/Markdown table cell: thousands separators, `-` for missing."""
    return "-" if v is None else f"{v:,.{nd}f}"


def per_step(v: float) -> str:
    """A count per step for prose: whole where it is (19), else one decimal (63.3), never `63.3333`."""
    return f"{round(v)}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"
