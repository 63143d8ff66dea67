"""Refit the profiler-cost model (analyses.overhead.COST_US) on the calibration runs of tools/overhead_split.json and
print the error of the replayed unprofiled step against the collector's measurement, for the calibration and the
evaluation runs, beside the do-nothing baseline (the traced step as the guess).

    python tools/fit_overhead.py            # fit, then both tables with the fitted costs
    python tools/fit_overhead.py --check    # both tables with the committed costs (no fit)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traceview.analyses import overhead  # noqa: E402
from traceview.analyses.windows import complete_steps  # noqa: E402
from traceview.ingest.loader import load  # noqa: E402
from traceview.ingest.manifest import rank_step_times  # noqa: E402

SAMPLES = ROOT / "sample_traces"
SPLIT = json.loads((ROOT / "tools/overhead_split.json").read_text())
#: held-out runs whose unprofiled timing is not a steady state (labels.json: unprofiled_step_ms null)
UNSTEADY = {
    f"{SPLIT['held_out']}/{k}"
    for k, v in json.loads((SAMPLES / SPLIT["held_out"] / "labels.json").read_text())["runs"].items()
    if v["unprofiled_step_ms"] is None
}
GRID = {
    "host_share": np.arange(0.0, 0.701, 0.05),
    "op": np.arange(0.0, 4.01, 0.5),
    "runtime": np.arange(0.0, 4.01, 0.5),
    "python": np.arange(0.0, 8.01, 1.0),
}
#: the committed model: the per-event costs and the host share
COMMITTED = {**overhead.COST_US, "host_share": overhead.HOST_SHARE}


def group(run: str) -> str:
    """calibration (fitted on), held-out (collected3: never fitted on) or evaluation (every other run)."""
    if run in SPLIT["calibration"]:
        return "calibration"
    return "held-out" if run.split("/")[0] == SPLIT["held_out"] else "evaluation"


def runs() -> list[dict]:
    """Every bundled rank trace with a manifest: {run, group, trace, steps, unprof_ns, traced_ns}."""
    out = []
    for m in sorted(SAMPLES.glob("*/*/manifest.json")):
        run = f"{m.parent.parent.name}/{m.parent.name}"
        for f in sorted(m.parent.glob("*.pt.trace.json.gz")):
            t = load(f)
            st, _ = complete_steps(t, t.steps)
            unprof, _prof, _ = rank_step_times(
                t.meta.manifest or json.loads(m.read_text()), f.name, t.meta.rank
            )
            if not unprof or st.height == 0 or run in UNSTEADY:
                continue
            out.append(
                {
                    "run": run,
                    "rank": t.meta.rank,
                    "group": group(run),
                    "trace": t,
                    "steps": st,
                    "unprof_ns": unprof * 1e6,
                    "traced_ns": float((st["end"] - st["ts"]).mean()),
                }
            )
    return out


def estimate_ns(r: dict, cost: dict[str, float]) -> float:
    return float(overhead.unprofiled_steps(r["trace"], r["steps"], cost).mean())


def errors(rs: list[dict], cost: dict[str, float]) -> list[float]:
    return [abs(estimate_ns(r, cost) / r["unprof_ns"] - 1) for r in rs]


def loss(rs: list[dict], cost: dict[str, float]) -> float:
    e = errors(rs, cost)
    return statistics.median(e) + 0.5 * statistics.mean(e)


def fit(rs: list[dict], start: dict[str, float]) -> dict[str, float]:
    """Coordinate descent over GRID from `start` (a few rounds; each step replays every calibration run)."""
    best = dict(start)
    cur = loss(rs, best)
    for _ in range(3):
        moved = False
        for k, grid in GRID.items():
            for v in grid:
                c = {**best, k: float(v)}
                got = loss(rs, c)
                if got < cur - 1e-9:
                    best, cur, moved = c, got, True
        if not moved:
            break
    return best


def table(rs: list[dict], cost: dict[str, float]) -> dict[str, dict[str, float]]:
    out = {}
    for g in ("calibration", "held-out", "evaluation"):
        sel = [r for r in rs if r["group"] == g]
        if not sel:
            continue
        est = errors(sel, cost)
        base = [abs(r["traced_ns"] / r["unprof_ns"] - 1) for r in sel]
        out[g] = {
            "n": len(sel),
            "median": statistics.median(est),
            "worst": max(est),
            "p90": float(np.percentile(est, 90)),
            "baseline_median": statistics.median(base),
            "baseline_worst": max(base),
        }
    return out


def markdown(rs: list[dict], cost: dict[str, float]) -> str:
    """The error tables (summary per group, then each held-out run) as Markdown."""
    lines = [
        f"Model: host share {cost['host_share']:.2f} of dispatch time, "
        + ", ".join(f"{k} {cost[k]:g} µs" for k in ("op", "runtime", "python"))
        + " per recorded row "
        + "(`python tools/fit_overhead.py --check`).",
        "",
        "| runs | n | median | 90th pct | worst | traced step as the guess: median / worst |",
        "|---|---|---|---|---|---|",
    ]
    for g, v in table(rs, cost).items():
        lines.append(
            f"| {g} | {v['n']} | {100 * v['median']:.1f} % | {100 * v['p90']:.1f} % | {100 * v['worst']:.1f} % | "
            f"{100 * v['baseline_median']:.1f} % / {100 * v['baseline_worst']:.1f} % |"
        )
    lines += [
        "",
        "Held-out runs (collected3), ms per step:",
        "",
        "| run | traced | estimated | measured unprofiled | error |",
        "|---|---|---|---|---|",
    ]
    for r in (r for r in rs if r["group"] == "held-out"):
        e = estimate_ns(r, cost)
        lines.append(
            f"| {r['run'].split('/', 1)[1]} | {r['traced_ns'] / 1e6:.2f} | {e / 1e6:.2f} | {r['unprof_ns'] / 1e6:.2f} | "
            f"{100 * (e / r['unprof_ns'] - 1):+.1f} % |"
        )
    return "\n".join(lines) + "\n"


DOCS = (ROOT / "docs/replay.md", ROOT / "docs/profiling-overhead.md")
BEGIN, END = (
    "<!-- fit_overhead: begin (python tools/fit_overhead.py --check --write-docs) -->",
    "<!-- fit_overhead: end -->",
)


def write_docs(md: str) -> None:
    for p in DOCS:
        text = p.read_text()
        a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
        p.write_text(text[:a] + "\n" + md + text[b:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="evaluate the committed costs, no fit")
    ap.add_argument(
        "--write-docs",
        action="store_true",
        help="write the tables into docs/replay.md and docs/profiling-overhead.md",
    )
    a = ap.parse_args()
    rs = runs()
    cost = dict(COMMITTED) if a.check else fit([r for r in rs if r["group"] == "calibration"], COMMITTED)
    print("cost per recorded event (µs) and host share:", json.dumps(cost))
    md = markdown(rs, cost)
    print(md)
    if a.write_docs:
        write_docs(md)


if __name__ == "__main__":
    main()
