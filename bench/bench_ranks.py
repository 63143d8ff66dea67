"""Time `traceview analyze --format json` on synthesised jobs of many ranks (tools/synth_ranks.py), serial and
with worker processes: the time per rank should stay flat as the ranks grow (linear), the workers should divide
the per-file part, and the main process's peak memory should grow by a rank's summary per rank, not a trace.

    python bench/bench_ranks.py --ranks 64 256 --jobs 1 16 [--src sample_traces/nccl_h200x2/ddp_rank1_slowed]

Each run is a fresh `traceview analyze DIR -j J --format json` process (`-j 1`: serial, in that process); prints
the ranks, the machine's cores, the worker processes, seconds, seconds per rank, the peak RSS of the analyzing
process and of its largest worker (each run measured alone: in a fresh wrapper process), and checks
that every run names the injected straggler. The lead's scale check (issue 26: 256 rank files in <= 60 s on 16
cores) is `python bench/bench_ranks.py --ranks 256 --jobs 16`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
from synth_ranks import synthesize  # noqa: E402

#: run in a fresh interpreter per measurement: the CLI in-process, then its own and its workers' peak RSS
_MEASURE = (
    "import json, resource, sys, time\n"
    "from traceview.cli.main import main\n"
    "t = time.perf_counter()\n"
    "try:\n"
    "    rc = main(sys.argv[1:])\n"
    "except SystemExit as e:\n"
    "    rc = e.code\n"
    "el = time.perf_counter() - t\n"
    "sys.stdout.flush()\n"
    "print(json.dumps({'rc': rc, 'seconds': el, 'main_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,\n"
    "                  'workers_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}), file=sys.stderr)\n"
)


def measure(d: Path, jobs: int) -> tuple[dict, dict]:
    """(the job entry, {seconds, main_kb, workers_kb}) of one fresh `traceview analyze` run."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, "analyze", str(d), "-j", str(jobs), "--format", "json"],
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    stats = json.loads(out.stderr.strip().splitlines()[-1])
    if stats["rc"] not in (0, 1, None):
        raise SystemExit(out.stderr[-2000:])
    (job,) = json.loads(out.stdout)["jobs"]
    return job, stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--src", type=Path, default=REPO / "sample_traces" / "nccl_h200x2" / "ddp_rank1_slowed")
    a = ap.parse_args()
    cores = os.cpu_count()
    print(
        "| ranks | cores | workers | seconds | s per rank | straggler | cause | peak RSS MiB (main) "
        "| peak RSS MiB (largest worker) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.ranks:
            d = Path(tmp) / f"job{n}"
            synthesize(a.src, d, n, straggler=n // 2)
            for j in a.jobs:
                job, m = measure(d, j)
                s = job["nccl"]["straggler"]
                c = s.get("cause") or {}
                workers = m["workers_kb"] / 1024 if j > 1 else None
                print(
                    f"| {n} | {cores} | {j if j > 1 else 'none'} | {m['seconds']:.1f} | {m['seconds'] / n:.3f} | "
                    f"{s['rank']} (injected {n // 2}) | {c.get('class')} +{(c.get('excess_us_per_step') or 0) / 1000:.1f} "
                    f"ms/step | {m['main_kb'] / 1024:.0f} | {f'{workers:.0f}' if workers else '-'} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
