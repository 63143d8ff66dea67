"""One trace on 1 core against N threads: the C scan alone and `traceview analyze` end to end (issue 32 item 2).

    python bench/bench_threads.py [TRACE] [--gb 1] [--threads 1,16] [--repeat 3] [--out FILE.md]

TRACE (default: the developers' big_train_60steps, else sample_traces/gpu_h200/train_tinygpt_modules tiled 20x)
is tiled in time to about `--gb` GB of JSON (tools/inflate_trace.py; `--gb 0`: the trace as is), then measured in
one run, interleaved, medians of `--repeat`:
- scan: the C scanner alone (`_scan.Scanner`, threads=t) fed the JSON from memory in the 2 MiB pieces the reader
  hands over, in this process: wall and CPU seconds, MB/s, each thread count's speed-up over 1 thread;
- end to end: `traceview analyze --format json` in a fresh process on one core (`taskset -c 0`, where taskset
  exists), on all cores with the scanner in 1 thread (`TRACEVIEW_THREADS=1`: polars' threads only) and on all
  cores with the scanner in t threads (`TRACEVIEW_THREADS=t`); seconds, MB/s, peak RSS, speed-up over one core.
Needs no network: python3 with numpy, polars and the built C scanner.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_BIG = ROOT.parent / "shared/traces/big/big_train_60steps.json.gz"
SEED = ROOT / "sample_traces/gpu_h200/train_tinygpt_modules.json.gz"


def _json_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def scan_times(data: bytes, threads: list[int], repeat: int) -> dict[int, tuple[float, float]]:
    """{threads: (median wall s, median CPU s)} of the C scan of `data` fed in the reader's pieces."""
    from traceview.ingest import _scan, argtables
    from traceview.ingest.stream import PIECE

    structs, tables, _ = argtables.spec()
    pieces = [data[i : i + PIECE] for i in range(0, len(data), PIECE)]
    res: dict[int, list[tuple[float, float]]] = {t: [] for t in threads}
    for k in range(repeat + 1):  # the first round warms up (page faults of the first buffers), not counted
        for t in threads:
            s = _scan.Scanner(argtables.tables_of, structs, tables, threads=t)
            c, w = time.process_time(), time.perf_counter()
            for p in pieces:
                if not s.feed(p):
                    raise SystemExit("the C scanner refused the trace")
            if s.finish() is None:
                raise SystemExit("the C scanner refused the trace")
            if k:
                res[t].append((time.perf_counter() - w, time.process_time() - c))
            del s
    return {
        t: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v)) for t, v in res.items()
    }


def e2e_times(path: Path, threads: list[int], repeat: int) -> dict[str, tuple[float, float]]:
    """{case: (median seconds, median peak RSS MiB)} of `traceview analyze` in fresh processes."""
    tv = [sys.executable, "-m", "traceview", "analyze", str(path), "--format", "json", "-o", os.devnull]
    cases: dict[str, list[str]] = {}
    if shutil.which("taskset"):  # the scanner's default: the cores it may use, 1 here
        cases["1 core (taskset -c 0)"] = ["env", "-u", "TRACEVIEW_THREADS", "taskset", "-c", "0", *tv]
    for t in threads:
        cases[f"all cores, scanner {t} thread{'s' if t > 1 else ''}"] = ["env", f"TRACEVIEW_THREADS={t}", *tv]
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for k in range(repeat + 1):  # a warm-up round: bytecode caches, the page cache
        for name, cmd in cases.items():
            r = run(cmd, False)
            if k:
                res[name].append(r)
    return {
        k: (statistics.median(s for s, _ in v), statistics.median(r for _, r in v)) for k, v in res.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=None)
    ap.add_argument(
        "--gb", type=float, default=1.0, help="tile the trace to about this many GB of JSON (0: as is)"
    )
    ap.add_argument("--threads", default=f"1,{len(os.sched_getaffinity(0))}", help="scanner thread counts")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-e2e", action="store_true", help="the scan alone")
    ap.add_argument("--out", default=None, help="also write the Markdown tables to this file")
    a = ap.parse_args()
    threads = sorted({int(x) for x in a.threads.split(",") if x.strip()})
    src = Path(a.trace) if a.trace else SHARED_BIG if SHARED_BIG.is_file() else SEED
    with tempfile.TemporaryDirectory(prefix="tv-threads-") as tmp:
        path = src
        if a.gb > 0:
            mb0 = len(_json_bytes(src)) / 1e6
            copies = max(1, round(a.gb * 1000 / mb0))
            if copies > 1:
                path = Path(tmp) / f"{src.name.split('.')[0]}_x{copies}.json"
                subprocess.run(
                    [
                        sys.executable,
                        str(ROOT / "tools/inflate_trace.py"),
                        str(src),
                        str(path),
                        "--copies",
                        str(copies),
                    ],
                    check=True,
                    capture_output=True,
                )
        data = _json_bytes(path)
        mb = len(data) / 1e6
        lines = [
            f"# One trace, 1 vs N threads: {path.name} ({mb:.0f} MB of JSON)\n",
            f"`python bench/bench_threads.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} cores "
            f"({len(os.sched_getaffinity(0))} usable), {a.repeat} interleaved runs, medians; load average at "
            f"the start {os.getloadavg()[0]:.1f}.\n",
            "## The C scan alone (in memory, 2 MiB pieces)\n",
            "| threads | wall s | MB/s | CPU s | speed-up vs 1 thread |",
            "|---|---|---|---|---|",
        ]
        sc = scan_times(data, threads, a.repeat)
        del data
        base = sc[min(threads)][0]
        lines += [f"| {t} | {w:.3f} | {mb / w:.0f} | {c:.2f} | {base / w:.2f}x |" for t, (w, c) in sc.items()]
        if not a.no_e2e:
            e2e = e2e_times(path, threads, a.repeat)
            one = e2e.get("1 core (taskset -c 0)", next(iter(e2e.values())))[0]
            lines += [
                "\n## `traceview analyze --format json` end to end\n",
                "| run | seconds | MB/s | peak RSS MiB | speed-up vs 1 core |",
                "|---|---|---|---|---|",
            ]
            lines += [
                f"| {k} | {s:.2f} | {mb / s:.0f} | {r:.0f} | {one / s:.2f}x |" for k, (s, r) in e2e.items()
            ]
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
