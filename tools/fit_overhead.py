"""Refit the profiler-cost model (analyses.overhead.COST_US) on the calibration runs of tools/overhead_split.json and
print the error of the replayed unprofiled step against the collector's measurement, for the calibration and the
evaluation runs, beside the do-nothing baseline (the traced step as the guess).

    python tools/fit_overhead.py            # fit, then both tables with the fitted costs
    python tools/fit_overhead.py --check    # both tables with the committed costs (no fit)
    python tools/fit_overhead.py --check --events-only   # also refit a pure per-event model (no host share)
                                                         # on the same calibration runs and score it beside

The ground truth is each run's steady unprofiled step (manifest.steady_unprofiled_ms: the median of the
collector's unprofiled wait steps after the first, which still warms up; collected4/5's labels take the same rule).

A run whose traced step differs from the collector's profiled CUDA-event step by more than TRACE_TOL is set
aside (listed, not scored): its trace is not the steps the collector timed (input stalls in the captured window,
a different step mix), so no profiler-cost model can take the traced step to the unprofiled one.
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

from traceview.analyses import overhead, replay  # noqa: E402
from traceview.analyses.windows import complete_steps  # noqa: E402
from traceview.ingest.loader import load  # noqa: E402
from traceview.ingest.manifest import rank_step_samples, rank_step_times, steady_unprofiled_ms  # noqa: E402
from traceview.sections import job_answer  # noqa: E402

SAMPLES = ROOT / "sample_traces"
SPLIT = json.loads((ROOT / "tools/overhead_split.json").read_text())
#: held-out runs whose unprofiled timing is not a steady state (labels.json: unprofiled_step_ms null)
UNSTEADY = {
    f"{SPLIT['held_out']}/{k}"
    for k, v in json.loads((SAMPLES / SPLIT["held_out"] / "labels.json").read_text())["runs"].items()
    if v["unprofiled_step_ms"] is None
}
#: |traced / profiled CUDA-event step - 1| above which a run's trace is not the steps the collector timed
TRACE_TOL = overhead.TRACE_TOL
GRID = {
    "host_share": np.arange(0.0, 0.701, 0.01),
    "launch_slope": np.arange(0.0, 0.1001, 0.01),
    "op": np.arange(0.0, 4.01, 0.5),
    "runtime": np.arange(0.0, 4.01, 0.5),
    "python": np.arange(0.0, 8.01, 0.5),
    "long_op": np.arange(0.0, 3.01, 0.25),
}
#: the pure per-event alternative (--events-only): no host share, a cost per recorded row of each kind
EVENTS_GRID = {
    "op": np.arange(0.0, 8.01, 0.5),
    "runtime": np.arange(0.0, 8.01, 0.5),
    "python": np.arange(0.0, 16.01, 1.0),
}
#: the committed model: the per-event costs, the host share and its slope in the trace's launch floor, the cost of
#: a recorded op beyond the share's reach in row floors
COMMITTED = {
    **overhead.COST_US,
    "host_share": overhead.HOST_SHARE,
    "launch_slope": overhead.LAUNCH_SLOPE,
    "long_op": overhead.LONG_OP_FLOORS,
}


def group(run: str) -> str:
    """calibration (fitted on), held-out (collected3: never fitted on) or evaluation (every other run)."""
    if run in SPLIT["calibration"]:
        return "calibration"
    return "held-out" if run.split("/")[0] == SPLIT["held_out"] else "evaluation"


def runs() -> list[dict]:
    """Every bundled rank trace with a manifest: {run, group, trace, steps, unprof_ns, traced_ns, job}. `job`: the
    run's ranks when it has more than one (the analyzer estimates each from the job's replay, `estimate_ns`)."""
    out = []
    for m in sorted(SAMPLES.glob("*/*/manifest.json")):
        run = f"{m.parent.parent.name}/{m.parent.name}"
        files = sorted(m.parent.glob("*.pt.trace.json.gz"))
        loaded = [load(f) for f in files]
        # the job in the analyzer's rank order (report.py: by rank, then path)
        order = sorted(range(len(loaded)), key=lambda k: (loaded[k].meta.rank is None, loaded[k].meta.rank or 0,
                                                           loaded[k].meta.path))
        job = {"traces": [loaded[k] for k in order],
               "steps": [complete_steps(loaded[k], loaded[k].steps)[0] for k in order], "est": {}} \
            if len(files) > 1 else None
        for f, t in zip(files, loaded, strict=True):
            st, _ = complete_steps(t, t.steps)
            man = t.meta.manifest or json.loads(m.read_text())
            _, prof, _ = rank_step_times(man, f.name, t.meta.rank)
            # the ground truth: the steady unprofiled step (the first wait step still warms up)
            unprof = steady_unprofiled_ms(man, f.name, t.meta.rank)
            if not unprof or st.height == 0 or run in UNSTEADY:
                continue
            traced = float((st["end"] - st["ts"]).mean())
            out.append(
                {
                    "run": run,
                    "rank": t.meta.rank,
                    "group": group(run),
                    "trace": t,
                    "steps": st,
                    "unprof_ns": unprof * 1e6,
                    "prof_ns": (prof or 0.0) * 1e6,
                    "traced_ns": traced,
                    "set_aside": aside_reason(traced, prof, len(rank_step_samples(man, f.name, t.meta.rank))),
                    "job": job,
                    "pos": next(k for k, x in enumerate(job["traces"]) if x is t) if job else 0,
                }
            )
    return out


def aside_reason(traced_ns: float, prof_ms: float | None, n_unprofiled: int) -> str | None:
    """Why a run cannot be scored (None: it can): its trace is not the steps the collector timed (traced step vs the
    profiled CUDA-event step off by more than TRACE_TOL), or it has no steady unprofiled step (one unprofiled step
    recorded: the first, which still warms up — the ground truth's own rule, steady_unprofiled_ms)."""
    if prof_ms and abs(traced_ns / (prof_ms * 1e6) - 1) > TRACE_TOL:
        return f"traced step vs the collector's profiled CUDA-event step off by more than {100 * TRACE_TOL:.0f} %"
    if n_unprofiled == 1:
        return "one unprofiled step recorded, the first (still warming up): no steady measurement"
    return None


def estimate_ns(r: dict, cost: dict[str, float]) -> float:
    """The rank's estimated unprofiled step as the analyzer makes it: from its job's replay where the run's ranks
    form a job it replays (`job_answer.unprofiled_estimates`), else from the trace's own replay."""
    job = r.get("job")
    if job is not None:
        key = tuple(sorted(cost.items()))
        if key not in job["est"]:
            job["est"][key] = job_answer.unprofiled_estimates(job["traces"], job["steps"], dict(cost))
        got = job["est"][key]
        if got is not None:
            return float(got[r["pos"]].mean())
    return float(overhead.unprofiled_steps(r["trace"], r["steps"], cost).mean())


def errors(rs: list[dict], cost: dict[str, float]) -> list[float]:
    return [abs(estimate_ns(r, cost) / r["unprof_ns"] - 1) for r in rs]


def loss(rs: list[dict], cost: dict[str, float]) -> float:
    e = errors(rs, cost)
    return statistics.median(e) + 0.5 * statistics.mean(e)


#: parameters searched together: each value of the first with the second re-fitted on its grid (the share's
#: slope moves the share every trace needs; one at a time, the descent stops where neither moves alone)
JOINT = ("launch_slope", "host_share")


def fit(rs: list[dict], start: dict[str, float], grid_of: dict | None = None) -> dict[str, float]:
    """Coordinate descent over `grid_of` (GRID) from `start` (a few rounds; each step replays every calibration
    run), the JOINT pair searched together."""
    grids = grid_of or GRID
    best = dict(start)
    cur = loss(rs, best)
    for _ in range(3):
        moved = False
        for k, grid in grids.items():
            for v in grid:
                cands = [{**best, k: float(v)}]
                if k == JOINT[0] and JOINT[1] in grids:
                    cands = [{**best, k: float(v), JOINT[1]: float(w)} for w in grids[JOINT[1]]]
                for c in cands:
                    got = loss(rs, c)
                    if got < cur - 1e-9:
                        best, cur, moved = c, got, True
        if not moved:
            break
    return {k: round(v, 6) for k, v in best.items()}


def table(rs: list[dict], cost: dict[str, float]) -> dict[str, dict[str, float]]:
    out = {}
    for g in ("calibration", "held-out", "evaluation"):
        sel = [r for r in rs if r["group"] == g and not r["set_aside"]]
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
        f"Model: host share {cost['host_share']:.2f} of dispatch time"
        + (
            f" ({cost['launch_slope']:+.2f} per µs of the trace's launch floor above {overhead.LAUNCH_REF_US:g} µs)"
            if cost.get("launch_slope")
            else ""
        )
        + ", "
        + ", ".join(f"{k} {cost[k]:g} µs" for k in ("op", "runtime", "python"))
        + " per recorded row"
        + (
            f", {cost['long_op']:g} × the trace's row floor per recorded op more than"
            f" {replay.HOST_SHARE_MAX_NS / 1e6:g} ms into its host interval"
            if cost.get("long_op")
            else ""
        )
        + ", and the collector's module hooks measured in the trace"
        + " (`python tools/fit_overhead.py --check`).",
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
    for r in (r for r in rs if r["group"] == "held-out" and not r["set_aside"]):
        e = estimate_ns(r, cost)
        lines.append(
            f"| {r['run'].split('/', 1)[1]} | {r['traced_ns'] / 1e6:.2f} | {e / 1e6:.2f} | {r['unprof_ns'] / 1e6:.2f} | "
            f"{100 * (e / r['unprof_ns'] - 1):+.1f} % |"
        )
    aside = [r for r in rs if r["set_aside"]]
    if aside:
        lines += [
            "",
            "Set aside, not in the tables: a run whose trace is not the steps the collector timed, or whose only "
            "unprofiled step is the first:",
            "",
        ]
        lines += [
            f"- {r['run']} rank {r['rank']}: traced {r['traced_ns'] / 1e6:.2f} ms, profiled {r['prof_ns'] / 1e6:.2f} ms, "
            f"measured unprofiled {r['unprof_ns'] / 1e6:.2f} ms, estimated {estimate_ns(r, cost) / 1e6:.2f} ms "
            f"({r['set_aside']})"
            for r in aside
        ]
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
    ap.add_argument(
        "--events-only",
        action="store_true",
        help="also refit and score a pure per-event model (no host share) on the same calibration runs",
    )
    a = ap.parse_args()
    rs = runs()
    cal = [r for r in rs if r["group"] == "calibration" and not r["set_aside"]]
    cost = dict(COMMITTED) if a.check else fit(cal, COMMITTED)
    print("cost per recorded event (µs) and host share:", json.dumps(cost))
    md = markdown(rs, cost)
    print(md)
    if a.write_docs:
        write_docs(md)
    if a.events_only:
        ev = fit(
            cal, {"op": 3.0, "runtime": 3.0, "python": 2.0, "host_share": 0.0, "long_op": 0.0}, EVENTS_GRID
        )
        print("pure per-event model refitted on the calibration runs:", json.dumps(ev))
        print("\n".join(markdown(rs, ev).splitlines()[:8]))


if __name__ == "__main__":
    main()
