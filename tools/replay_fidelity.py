"""Print the replay's fidelity over every bundled trace with steps: the unmodified graph's replayed step periods
against the traced ones (mean and worst relative error per trace, the bounds 3 % / 8 %).

    python tools/replay_fidelity.py [paths...]     # default: every trace under sample_traces/
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traceview.analyses.replay import FIDELITY_MAX, FIDELITY_MEAN, fidelity  # noqa: E402
from traceview.analyses.windows import complete_steps  # noqa: E402
from traceview.ingest.loader import load  # noqa: E402
from traceview.model import Job  # noqa: E402


def traces(paths: list[str]) -> list[Path]:
    if paths:
        return [Path(p) for p in paths]
    return sorted(p for p in (ROOT / "sample_traces").rglob("*.json*")
                  if p.name.endswith((".json", ".json.gz")) and p.name not in ("labels.json", "manifest.json")
                  and not p.name.endswith(".collect.json"))


def main() -> int:
    rows, misses = [], 0
    for f in traces(sys.argv[1:]):
        try:
            t = load(f)
        except Exception as e:  # noqa: BLE001 - a file the loader refuses is listed, not fatal
            rows.append((str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f), "-", f"not loaded: {e}"))
            continue
        for tr in (t.traces if isinstance(t, Job) else [t]):
            st, _ = complete_steps(tr, tr.steps)
            if st.height == 0:
                continue
            fd = fidelity(tr, st)["fidelity"]
            ok = fd["mean_error_pct"] <= 100 * FIDELITY_MEAN and fd["max_error_pct"] <= 100 * FIDELITY_MAX
            misses += not ok
            name = str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f)
            rows.append((name, tr.meta.rank, f"{st.height:3d} steps  mean {fd['mean_error_pct']:6.2f} %  "
                                            f"max {fd['max_error_pct']:6.2f} %  {'ok' if ok else 'MISS'}"))
    for name, rank, txt in rows:
        print(f"{name[-72:]:72s} r{rank!s:4s} {txt}")
    print(f"{len(rows)} traces, {misses} outside {100 * FIDELITY_MEAN:.0f} % mean / {100 * FIDELITY_MAX:.0f} % max")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
