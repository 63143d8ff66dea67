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
a different step mix), so no profiler-cost model can take the traced step to the unprofiled one. So is a run whose
manifest says its reference is not a steady state (`unsteady_reason`: the collector's --settle gave up, the
reference's own steps vary more than the collector's spread warning allows, or the same process's unprofiled
steps after the capture ran faster than the reference by more than the collector's settle tolerance): the
manifest's own record decides, never the estimate's error.
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

from collectors.manifest import SPREAD_WARN  # noqa: E402
from traceview.analyses import overhead, replay  # noqa: E402
from traceview.analyses.windows import complete_steps  # noqa: E402
from traceview.ingest.loader import load  # noqa: E402
from traceview.ingest.manifest import (  # noqa: E402
    SETTLE_TOL,
    median,
    period_mean,
    rank_entry,
    rank_loader_period,
    rank_step_samples,
    rank_step_times,
    settle_window,
    steady_unprofiled_ms,
)
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
    """Every bundled rank trace with a manifest: {run, group, trace, steps, unprof_ns, traced_ns, set_aside, unsteady,
    job}. `job`: the
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
            raw = json.loads(m.read_text())  # (the parsed manifest keeps no schedule, post-capture steps, settle info)
            _, prof, _ = rank_step_times(man, f.name, t.meta.rank)
            # the ground truth: the steady unprofiled step (the first wait step still warms up)
            unprof = steady_unprofiled_ms(man, f.name, t.meta.rank)
            if not unprof or st.height == 0 or run in UNSTEADY:
                continue
            traced = float((st["end"] - st["ts"]).mean())
            aside = aside_reason(traced, prof, len(rank_step_samples(man, f.name, t.meta.rank)))
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
                    "set_aside": aside,
                    # (left out of the scores only: a calibration run keeps its place in the fit, whose committed
                    # optimum it helped set)
                    "unsteady": None if aside else unsteady_reason(raw, f.name, t.meta.rank, unprof),
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


def reference_steps(xs: list[float], period: int) -> list[float]:
    """The unprofiled steps the ground truth (`steady_unprofiled_ms`) is taken over, as the values it compares: the
    means of whole periods of a loop fed by `period` DataLoader workers in turn, else the steps after the first
    (which still warms up) where there are three or more."""
    if period > 1 and len(xs) >= period:
        return [sum(xs[i:i + period]) / period for i in range(0, len(xs) - period + 1, period)]
    return xs[1:] if len(xs) >= 3 else xs


def unsteady_reason(raw: dict, file_name: str, rank: int | None, unprof_ms: float) -> str | None:
    """Why the manifest says this rank's reference (`unprof_ms`) is not the program's steady step, or None. Read
    from the collector's own record (`raw`: the manifest as written), never from the estimate:

    - the collector's --settle gave up waiting for the step time to settle (`settle.settled` false);
    - the steps the reference is the median of vary more than the collector's spread warning allows
      (collectors.manifest.SPREAD_WARN: slowest over fastest; its warning says "the medians may not be the steady
      state"), compared as the reference takes them (`reference_steps`);
    - the same process's unprofiled steps right after the capture (`post_capture_step_ms`, the first settle window
      of them: `settle_window` of the run's wait) ran faster than the reference by more than the collector's
      settle tolerance (SETTLE_TOL): the program was still getting faster when the reference was timed. Only
      faster: after a capture CUPTI's teardown can leave the first steps slower (docs/collect.md), never faster.
    """
    e = rank_entry(raw, file_name, rank)
    settle = e.get("settle") if isinstance(e.get("settle"), dict) else {}
    if settle.get("settled") is False:
        return "unsteady reference: the collector's --settle recorded before the step time had settled"
    k = rank_loader_period(e)
    wait_steps = [float(x) for x in rank_step_samples(raw, file_name, rank) if x > 0]
    if not wait_steps:  # (a reference taken from the post-capture steps themselves, `--wait 0`: none to compare)
        return None
    xs = reference_steps(wait_steps, k)
    if len(xs) >= 2 and max(xs) / min(xs) > SPREAD_WARN:
        return (f"unsteady reference: its steps vary {max(xs) / min(xs):.1f}x ({min(xs):.2f} to {max(xs):.2f} ms), "
                f"more than the collector's spread warning allows ({SPREAD_WARN:g}x)")
    post = [float(x) for x in e.get("post_capture_step_ms") or [] if isinstance(x, (int, float)) and x > 0]
    h = settle_window(int((raw.get("schedule") or {}).get("wait") or 0), k)
    after = (period_mean(post[:h], k) if k > 1 else median(post[:h])) if len(post) >= h else None
    if after is not None and after < unprof_ms * (1 - SETTLE_TOL):
        return (f"unsteady reference: the same process's first {h} unprofiled steps after the capture ran "
                f"{after:.2f} ms, {100 * (1 - after / unprof_ms):.0f} % faster (the collector's settle tolerance: "
                f"{100 * SETTLE_TOL:.0f} %)")
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


def scored(rs) -> list[dict]:
    """The runs the tables score: neither set aside nor with an unsteady reference."""
    return [r for r in rs if not r["set_aside"] and not r.get("unsteady")]


def table(rs: list[dict], cost: dict[str, float]) -> dict[str, dict[str, float]]:
    out = {}
    for g in ("calibration", "held-out", "evaluation"):
        sel = scored(r for r in rs if r["group"] == g)
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
            f"{100 * (e / r['unprof_ns'] - 1):+.1f} %{' (not scored: unsteady reference)' if r['unsteady'] else ''} |"
        )
    aside = [r for r in rs if r["set_aside"] or r.get("unsteady")]
    if aside:
        lines += [
            "",
            "Not scored in the tables: a run whose trace is not the steps the collector timed or whose only "
            "unprofiled step is the first (set aside, from the fit too), or whose manifest says its reference is not "
            "a steady state (`unsteady_reason`; a calibration run among them stays in the fit):",
            "",
        ]
        lines += [
            f"- {r['run']} rank {r['rank']}: traced {r['traced_ns'] / 1e6:.2f} ms, profiled {r['prof_ns'] / 1e6:.2f} ms, "
            f"measured unprofiled {r['unprof_ns'] / 1e6:.2f} ms, estimated {estimate_ns(r, cost) / 1e6:.2f} ms "
            f"({r['set_aside'] or r['unsteady']})"
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
