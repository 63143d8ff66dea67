"""Time `traceview analyze --format json` on synthesised jobs of many ranks (tools/synth_ranks.py), serial and
with worker processes: the time per rank should stay flat as the ranks grow (linear), and the workers should
divide the per-file part.

    .venv/bin/python bench/bench_ranks.py --ranks 64 256 --jobs 1 2 [--src sample_traces/nccl_h200x2/ddp_rank1_slowed]

Each run is a fresh `python -m traceview analyze DIR -j J --format json` process; prints seconds, seconds per
rank and peak RSS (of the process and its workers), and checks that every run names the injected straggler.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
from synth_ranks import synthesize  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--src", type=Path, default=REPO / "sample_traces" / "nccl_h200x2" / "ddp_rank1_slowed")
    a = ap.parse_args()
    print("| ranks | jobs | seconds | s per rank | straggler | cause | children peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.ranks:
            d = Path(tmp) / f"job{n}"
            synthesize(a.src, d, n, straggler=n // 2)
            for j in a.jobs:
                t = time.perf_counter()
                out = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(d), "-j", str(j), "--format",
                                      "json"], capture_output=True, text=True, cwd=REPO)  # fmt: skip
                el = time.perf_counter() - t
                if out.returncode not in (0, 1):
                    print(out.stderr[-2000:], file=sys.stderr)
                    return 1
                (job,) = json.loads(out.stdout)["jobs"]
                s = job["nccl"]["straggler"]
                c = s.get("cause") or {}
                rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
                print(f"| {n} | {j} | {el:.1f} | {el / n:.3f} | {s['rank']} (injected {n // 2}) | "
                      f"{c.get('class')} +{(c.get('excess_us_per_step') or 0) / 1000:.1f} ms/step | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
