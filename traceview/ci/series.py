"""Several profiled iterations of one job side by side (TorchTitan's `iteration_<N>/` folders): how the same
job's step time and primary class move over time, for `batch`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..ingest.layouts import ITERATION_DIR


def iterations(rows: list[dict]) -> list[dict[str, Any]]:
    """One entry per job profiled at two or more iterations: {job, iterations: [{iteration, input, status, step_ms,
    primary, delta_pct (step time vs the first iteration, %)}]}, iterations in ascending order."""
    groups: dict[str, list[tuple[int, dict]]] = {}
    for r in rows:
        parent, _, leaf = r["input"].rpartition("/")
        m = ITERATION_DIR.match(leaf)
        if m and r["kind"] in ("run", "trace"):
            folder = (
                Path(r["path"]) if r["kind"] == "run" else Path(r["path"]).parent
            )  # the iteration_<N> folder
            groups.setdefault(parent or folder.parent.name or ".", []).append((int(m.group(1)), r))
    out = []
    for job, members in sorted(groups.items()):
        if len(members) < 2:
            continue
        members.sort(key=lambda m: m[0])
        first = next((r["step_ms"] for _, r in members if r["step_ms"]), None)
        its = [
            {
                "iteration": n,
                "input": r["input"],
                "status": r["status"],
                "step_ms": r["step_ms"],
                "primary": r["primary"],
                "delta_pct": round(100 * (r["step_ms"] / first - 1), 1)
                if first and r["step_ms"] is not None
                else None,
            }
            for n, r in members
        ]
        out.append({"job": job, "iterations": its})
    return out


def terminal(series: list[dict], out: Any) -> None:
    """A table per job: its iterations, step time and change from the first."""
    if not series:
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(file=out, width=160 if not out.isatty() else None)
    for s in series:
        t = Table(title=f"{escape(s['job'])}: {len(s['iterations'])} profiled iterations of one job")
        for c, j in (
            ("iteration", "right"),
            ("status", "left"),
            ("step ms", "right"),
            ("vs first", "right"),
            ("primary", "left"),
        ):
            t.add_column(c, justify=j)  # type: ignore[arg-type]
        for it in s["iterations"]:
            d = it["delta_pct"]
            t.add_row(
                str(it["iteration"]),
                it["status"],
                f"{it['step_ms']:,.3f}" if it["step_ms"] is not None else "-",
                f"{d:+.1f} %" if d is not None else "-",
                it["primary"] or "-",
            )
        con.print(t)
