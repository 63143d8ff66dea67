"""Benchmark: `traceview analyze --format json` end to end vs bare JSON decoding (and peers), one run.

    python bench/bench_load.py [TRACE] [--repeat N] [--peers] [--csv out.csv]

Each measurement runs in a fresh process (wall time and that process's peak RSS via wait4);
runs are interleaved and the median is reported, because a 2-core machine is noisy.
Throughput is MB of *uncompressed* JSON per second. The traceview time includes reading,
gunzip, decoding, every analysis and writing the JSON report; the decoder baselines time only
`orjson.loads` / `json.loads` of bytes already in memory (a lower bound for any Python tool).
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# a big trace: make one with `python tools/inflate_trace.py SRC bench/big.json.gz --target-mb 130` (bench/README.md)
DEFAULT = Path(__file__).resolve().parent / "big.json.gz"

DECODE = r"""
import gzip, sys, time
raw = open(sys.argv[1], "rb").read()
data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
import {mod}
t = time.perf_counter(); {mod}.loads(data); print(time.perf_counter() - t)
"""

HTA = r"""
import os, shutil, sys, tempfile, time, logging
logging.disable(logging.CRITICAL)
os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
d = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(d, "rank-0.json" + (".gz" if sys.argv[1].endswith(".gz") else "")))
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter(); ta = TraceAnalysis(trace_dir=d)
ta.get_temporal_breakdown(visualize=False); ta.get_idle_time_breakdown(visualize=False)
print(time.perf_counter() - t)
"""

#: traceview doing HTA's work (the load, the temporal and the idle breakdown: `traceview.analyses.timeline`, the
#: figures tests/hta_ref.py checks against HTA run live), timed as HTA is above: from after the imports
TV_SAME = r"""
import os, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from traceview.analyses import timeline
from traceview.ingest import loader
t = time.perf_counter(); tr = loader.load_file(sys.argv[1])
timeline.temporal_breakdown(tr.gpu); timeline.idle_breakdown(tr.gpu)
print(time.perf_counter() - t)
"""

# as a user runs it: bytecode caches written and used (a sandbox may set PYTHONDONTWRITEBYTECODE, which makes
# every start compile the package's modules from source)
USER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


#: runs the measured command as its own child and prints its wall seconds and peak RSS (KiB) last. A child the
#: benchmark spawned directly would report the benchmark's own peak RSS when that is larger: Linux keeps the
#: larger of the exec'ing process's old address space's high-water mark and the new one's (exec_mmap's
#: setmax_mm_hiwater_rss), and subprocess spawns by vfork, so the old address space is the benchmark's, which
#: holds a tiled trace's bytes for the scan timings (the 1 M tiny events row read 2202 MiB for a 518 MiB run).
#: The wrapper is small, and its child's high-water mark starts from the wrapper's.
_WRAP = (
    "import os, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.Popen(sys.argv[1:])\n"
    "_, status, ru = os.wait4(p.pid, 0)\n"
    "wall = time.perf_counter() - t\n"
    "sys.stdout.flush()\n"
    "cpu = ru.ru_utime + ru.ru_stime\n"
    "print(f'\\nTVBENCH {wall} {ru.ru_maxrss} {os.waitstatus_to_exitcode(status)} {cpu}', flush=True)\n"
)


def measure(cmd: list[str]) -> tuple[list[str], float, float, float]:
    """(the child's stdout lines, wall seconds, CPU seconds: user + sys, peak RSS MiB) of one child process,
    measured by a small wrapper process (`_WRAP`)."""
    p = subprocess.run([sys.executable, "-c", _WRAP, *cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       env=USER_ENV, check=False)
    lines = p.stdout.decode().strip().splitlines()
    last = lines[-1].split() if lines else []
    if len(last) != 5 or last[0] != "TVBENCH" or last[3] != "0":
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return [x for x in lines[:-1] if x.strip()], float(last[1]), float(last[4]), int(last[2]) / 1024


def run(cmd: list[str], inner_time: bool) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one child process (`measure`); seconds from the child's stdout when inner_time."""
    out, wall, _, rss = measure(cmd)
    return (float(out[-1]) if inner_time else wall), rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT),
                    help="the trace to time (default bench/big.json.gz, made by tools/inflate_trace.py)")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved runs per measurement (median reported)")
    ap.add_argument("--peers", action="store_true", help="also time HTA (TraceAnalysis load + 2 breakdowns), once")
    ap.add_argument("--csv", default=None, help="also write the results to this CSV file")
    a = ap.parse_args()
    path = Path(a.trace)
    raw = path.read_bytes()
    mb = len(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw) / 1e6
    py = sys.executable
    tv = [py, "-m", "traceview", "analyze", str(path), "--format", "json", "-o", os.devnull]
    cases = {
        "traceview analyze --format json": (tv, False),
        "orjson.loads": ([py, "-c", DECODE.format(mod="orjson"), str(path)], True),
        "json.loads": ([py, "-c", DECODE.format(mod="json"), str(path)], True),
    }
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(a.repeat):  # interleaved
        for k, (cmd, inner) in cases.items():
            res[k].append(run(cmd, inner))
    if a.peers:
        with tempfile.TemporaryDirectory():
            res["HTA TraceAnalysis (load + temporal + idle)"] = [run([py, "-c", HTA, str(path)], True)]
    base = statistics.median(s for s, _ in res["orjson.loads"])
    rows = []
    print(f"{path.name}: {mb:.1f} MB of JSON, {a.repeat} interleaved runs, medians")
    print(f"{'what':45} {'seconds':>8} {'MB/s':>8} {'vs orjson':>10} {'peak RSS MiB':>13}")
    for k, v in res.items():
        s = statistics.median(x for x, _ in v)
        rss = statistics.median(r for _, r in v)
        rows.append((k, s, mb / s, base / s, rss))
        print(f"{k:45} {s:8.2f} {mb / s:8.1f} {base / s:9.2f}x {rss:13.0f}")
    if a.csv:
        with open(a.csv, "w") as fh:
            fh.write("what,seconds,mb_per_s,speed_vs_orjson,peak_rss_mib\n")
            for r in rows:
                fh.write(f"{r[0]},{r[1]:.3f},{r[2]:.1f},{r[3]:.3f},{r[4]:.0f}\n")


if __name__ == "__main__":
    main()
