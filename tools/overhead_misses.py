"""Why the profiler-cost model misses where it misses: the evaluation's worst scored runs beside what their own
process measured later, the host share each run's reference needs, and whether anything in the trace predicts it.

    python tools/overhead_misses.py          # the runs above overhead.ERROR_BAND, the share study, the what-ifs

For each scored run of `fit_overhead --check` whose error is above ERROR_BAND: its wait steps (the reference is
their median after the first), the same process's unprofiled steps after the capture and, for an `ab_traced` run,
its ABBA rounds (`ab_result.json`: a fresh instance of the problem timed in the same process after the capture),
the host share whose replay reproduces the reference (`overhead.measured_transform`) against the fitted one
(`overhead.host_share`). Then, over the scored host-bound runs (GPU busy under half the traced step, no long
share), the spread of that solved share and its correlation with what the trace reads (launch floor, row floor,
traced µs per recorded op); and what leaving out runs whose ABBA rounds disagree with the reference would do to
the evaluation table (a candidate `unsteady_reason` criterion, docs/profiling-overhead.md says why it is not one).
Nothing here feeds the model; it documents docs/profiling-overhead.md's "worst runs" paragraph.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_overhead as fo  # noqa: E402

from traceview.analyses import overhead  # noqa: E402
from traceview.model import RUNTIME_CATS  # noqa: E402


def rounds_ms(run: str) -> float | None:
    """The ABBA rounds' problem step (ms) of an ab_traced run, None without."""
    p = fo.SAMPLES / run / "ab_result.json"
    return json.loads(p.read_text()).get("problem_step_ms") if p.is_file() else None


def entry(r: dict) -> dict:
    """The rank's entry of the manifest as written (the parsed one keeps no post-capture steps)."""
    raw = json.loads((fo.SAMPLES / r["run"] / "manifest.json").read_text())
    return fo.rank_entry(raw, Path(r["trace"].meta.path).name, r["rank"])


def recorded_cover(r: dict) -> float:
    """The share of the steps' host span that the busiest thread spends inside recorded ops and runtime calls."""
    st = r["steps"]
    lo, hi = int(st["cpu_ts"].min()), int(st["cpu_end"].max())
    h = r["trace"].host.filter(pl.col("ts").is_between(lo, hi, closed="left") & pl.col("end").is_not_null()
                               & pl.col("cat").is_in(["cpu_op", *RUNTIME_CATS]))
    tid = h["tid"].value_counts(sort=True)["tid"][0]
    x = h.filter(pl.col("tid") == tid).sort("ts")
    ts, end = x["ts"].to_numpy(), np.maximum.accumulate(x["end"].to_numpy())
    first = np.flatnonzero(np.r_[True, ts[1:] > end[:-1]])  # (the union of the rows: its pieces' starts and ends)
    return float((np.r_[end[first[1:] - 1], end[-1]] - ts[first]).sum()) / (hi - lo)


def post_window_ms(r: dict) -> float | None:
    """The first settle window of the steps after the capture (`unsteady_reason`'s), None with fewer."""
    raw = json.loads((fo.SAMPLES / r["run"] / "manifest.json").read_text())
    e, k = entry(r), fo.rank_loader_period(entry(r))
    post = [float(x) for x in e.get("post_capture_step_ms") or [] if isinstance(x, (int, float)) and x > 0]
    h = fo.settle_window(int((raw.get("schedule") or {}).get("wait") or 0), k)
    return (fo.period_mean(post[:h], k) if k > 1 else fo.median(post[:h])) if len(post) >= h else None


def stats(sel: list[dict]) -> str:
    e = [abs(r["err"]) for r in sel]
    return (f"n {len(e)}, median {100 * statistics.median(e):.1f} %, 90th {100 * np.percentile(e, 90):.1f} %, "
            f"worst {100 * max(e):.1f} %")


def main() -> None:
    rs = fo.scored(fo.runs())
    for r in rs:
        r["est"] = fo.estimate_ns(r, dict(fo.COMMITTED))
        r["err"] = r["est"] / r["unprof_ns"] - 1
    ev = [r for r in rs if r["group"] == "evaluation"]
    print("evaluation:", stats(ev))
    print(f"\nscored runs not fitted on above {100 * overhead.ERROR_BAND:.0f} % (ms per step):")
    worst = (r for r in rs if r["group"] != "calibration" and abs(r["err"]) > overhead.ERROR_BAND)
    for r in sorted(worst, key=lambda r: -abs(r["err"])):
        e, t, st = entry(r), r["trace"], r["steps"]
        wait = [float(x) for x in e.get("unprofiled_step_ms") or []]
        post = [float(x) for x in e.get("post_capture_step_ms") or []]
        solved = overhead.measured_transform(t, st, r["unprof_ns"], r["prof_ns"] or None).host_share
        rd = rounds_ms(r["run"])
        print(f"- {r['run']} ({r['group']}): traced {r['traced_ns'] / 1e6:.2f}, estimated {r['est'] / 1e6:.2f}, "
              f"reference {r['unprof_ns'] / 1e6:.2f} ({100 * r['err']:+.1f} %); wait steps {min(wait):.2f}-"
              f"{max(wait):.2f}; after the capture "
              + (f"{len(post)} steps, median {statistics.median(post):.2f}" if post else "none")
              + (f"; ABBA rounds {rd:.2f} (estimate {100 * (r['est'] / (rd * 1e6) - 1):+.1f} %)" if rd else "")
              + f"; host share solved {solved:.2f}, fitted {overhead.host_share(t):.2f} (launch floor "
              f"{overhead.launch_floor_us(t) or float('nan'):.2f} µs, row floor {overhead.row_floor_us(t) or float('nan'):.2f} µs)")
    hb = []
    for r in rs:
        if r["job"] is not None:
            continue
        t, st = r["trace"], r["steps"]
        if float(overhead.gpu_busy_per_step(t, st).mean()) >= 0.5 * r["traced_ns"]:
            continue
        tr = overhead.measured_transform(t, st, r["unprof_ns"], r["prof_ns"] or None)
        if tr.long_share:
            continue
        ops = overhead.events_per_step(t, st)["op"]
        hb.append({"solved": tr.host_share, "miss": tr.host_share - overhead.host_share(t),
                   "cover": recorded_cover(r), "launch floor": overhead.launch_floor_us(t),
                   "row floor": overhead.row_floor_us(t), "µs per op": r["traced_ns"] / 1e3 / max(ops, 1.0)})
    s, d = np.array([x["solved"] for x in hb]), np.array([x["miss"] for x in hb])
    print(f"\nhost share solved over {len(hb)} scored host-bound runs: median {np.median(s):.2f}, "
          f"5th-95th pct {np.percentile(s, 5):.2f}-{np.percentile(s, 95):.2f}; solved less fitted: sd {d.std():.2f}, "
          f"5th-95th pct {np.percentile(d, 5):+.2f} to {np.percentile(d, 95):+.2f}")
    for k in ("launch floor", "row floor", "µs per op"):  # (what the fitted share leaves: does the trace say it?)
        m = np.array([x[k] is not None for x in hb])
        v = np.array([x[k] for x in hb if x[k] is not None], dtype=float)
        print(f"  correlation of solved less fitted with the trace's {k}: {np.corrcoef(v, d[m])[0, 1]:+.2f} "
              f"({int(m.sum())} runs)")
    c = np.array([x["cover"] for x in hb])
    print(f"  correlation of the solved share with the busiest thread's time inside recorded rows: "
          f"{np.corrcoef(c, s)[0, 1]:+.2f}")
    print("\nwhat-if: leave out evaluation runs whose ABBA rounds are off the reference by more than a tolerance")
    for tol in (0.05, 0.10, 0.15):
        off = [r for r in ev if (rd := rounds_ms(r["run"])) and abs(rd * 1e6 / r["unprof_ns"] - 1) > tol]
        keep = [r for r in ev if r not in off]
        print(f"  {100 * tol:.0f} %: {len(off)} left out (their median |error| "
              f"{100 * statistics.median(abs(r['err']) for r in off):.1f} %); the rest: {stats(keep)}")
    slow = [r for r in ev if (a := post_window_ms(r)) is not None and a > r["unprof_ns"] / 1e6 * (1 + fo.SETTLE_TOL)]
    print(f"what-if: leave out evaluation runs whose first settle window after the capture ran more than "
          f"{100 * fo.SETTLE_TOL:.0f} % slower than the reference: {len(slow)} (their median |error| "
          f"{100 * statistics.median(abs(r['err']) for r in slow):.1f} %); the rest: "
          f"{stats([r for r in ev if r not in slow])}")


if __name__ == "__main__":
    main()
