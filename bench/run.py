"""One command for every benchmark number: writes bench/RESULTS.md.

    python bench/run.py [--trace BIG.json.gz] [--sizes 0.5,1,2] [--repeat 5] [--no-peers] [--out bench/RESULTS.md]

Measured in one run on this machine, in fresh processes, interleaved, medians (a 2-core machine is noisy):
- cost vs size: `traceview analyze --format json` on the benchmark trace, on larger traces made at bench
  time by tiling it in time (tools/inflate_trace.py; never committed) and on 1 M / 10 M tiny synthetic events
  (tools/tiny_events.py), with `orjson.loads` and `json.loads` of
  the same bytes (already in memory) as baselines, and each process's peak RSS;
- start-up: a tiny bundled trace end to end (JSON and text report), `import traceview.report` alone,
  `import numpy, polars` (the floor of any run; OpenBLAS's threads off, as the CLI runs, and on, for reference)
  and `python -c pass`;
- peers: HTA (`TraceAnalysis` load + temporal + idle breakdown) on the benchmark trace, once (skipped, and the
  report says so, where `hta` is not importable);
- the replay model's share of the benchmark trace's end-to-end time (bench/replay_share.py, medians);
- core scaling: the largest tiled trace on one core (`taskset -c 0`) against all cores, where taskset exists;
- phases and hot spots: where `traceview analyze` spends its time on the benchmark trace (pyinstrument, when
  installed): inclusive time of the run's phases, and the functions with the most self time.

The benchmark trace: `--trace`, else ../shared/traces/big/big_train_60steps.json.gz when present, else one made
from a bundled sample (sample_traces/gpu_h200/train_tinygpt_modules.json.gz tiled 20 times, about 120 MB of JSON).
Needs no network: python3 with polars, numpy and orjson (HTA and pyinstrument optional). A summary of ratios
(speed vs `orjson.loads`, peak RSS / JSON, start-up over the import floor, replay share, HTA, core scaling) leads
the report. Speed is never asserted in tests.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import DECODE, HTA, TV_SAME, measure, run  # noqa: E402
from bench_threads import scan_times  # noqa: E402
from chart import scaling_svg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_BIG = ROOT.parent / "shared/traces/big/big_train_60steps.json.gz"
SEED = ROOT / "sample_traces/gpu_h200/train_tinygpt_modules.json.gz"
TINY = ROOT / "sample_traces/gpu_h200/seed_single_gemm_eager.json.gz"
INFLATE = ROOT / "tools/inflate_trace.py"
TINY_EVENTS = ROOT / "tools/tiny_events.py"
REPLAY_SHARE = ROOT / "bench/replay_share.py"
T = TypeVar("T")


def cpu_model() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    """The 1-minute load average (other work on the machine skews every time here), or 'unknown'."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (OSError, AttributeError):
        return "unknown"


def importable(mod: str) -> bool:
    """Whether this interpreter can import `mod` (in a child: importing HTA here would cost seconds)."""
    return subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True).returncode == 0


def replay_share(path: Path, repeat: int) -> dict:
    """Median {wall_s, replay_s, share, cpu_share, loops_s} of bench/replay_share.py over `repeat` runs."""
    import json

    got = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, str(REPLAY_SHARE), str(path)], check=True, capture_output=True, text=True)
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(g[k] for g in got) for k in ("wall_s", "replay_s", "share", "cpu_share", "loops_s")}


def json_mb(path: Path) -> float:
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as fh:
        n = 0
        while chunk := fh.read(1 << 24):
            n += len(chunk)
    return n / 1e6


def inflate(src: Path, dst: Path, copies: int) -> Path:
    subprocess.run([sys.executable, str(INFLATE), str(src), str(dst), "--copies", str(copies)], check=True)
    return dst


def median_runs(cases: dict[str, tuple[list[str], bool]], repeat: int) -> dict[str, tuple[float, float]]:
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    if repeat > 1:  # warm-up: bytecode caches, page cache (a file made just before is in the page cache)
        for cmd, inner in cases.values():
            run(cmd, inner)
    for _ in range(repeat):  # interleaved: the machine's noise hits every case alike
        for k, (cmd, inner) in cases.items():
            res[k].append(run(cmd, inner))
    return {k: (statistics.median(s for s, _ in v), statistics.median(r for _, r in v)) for k, v in res.items()}


def tv_cmd(path: Path, prefix: tuple[str, ...] = ()) -> list[str]:
    return [*prefix, sys.executable, "-m", "traceview", "analyze", str(path), "--format", "json", "-o", os.devnull]


def read_halves(path: Path) -> dict:
    """CPU seconds of gunzip and of the C scan, each alone (bench_scan.py, in its own process)."""
    import json

    out = subprocess.run([sys.executable, str(ROOT / "bench/bench_scan.py"), str(path)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def size_cases(path: Path) -> dict[str, tuple[list[str], bool]]:
    """traceview end to end and the bare decoders on the same file: one row of the cost-vs-size table."""
    return {"traceview": (tv_cmd(path), False),
            "orjson": ([sys.executable, "-c", DECODE.format(mod="orjson"), str(path)], True),
            "json": ([sys.executable, "-c", DECODE.format(mod="json"), str(path)], True)}


def profile(path: Path) -> dict | None:
    """pyinstrument's JSON report of `traceview analyze` on `path`; None without pyinstrument or a report."""
    try:
        import pyinstrument  # noqa: F401
    except ImportError:
        return None
    import json

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "p.json"
        subprocess.run([sys.executable, "-m", "pyinstrument", "-r", "json", "-o", str(out), "-m", "traceview",
                        "analyze", str(path), "--format", "json", "-o", os.devnull], check=True,
                       capture_output=True)
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError):  # no report written: the tables are left out, the other numbers stay
            return None


def _key(node: dict) -> str:
    return f"{node['function']} ({Path(node.get('file_path_short') or node.get('file_path') or '?').name})"


def hot_spots(doc: dict, top: int = 15) -> list[tuple[str, float]]:
    """(function, share of wall time) from pyinstrument's self time, the `top` largest."""
    total = doc.get("duration") or 1.0
    self_time: dict[str, float] = {}

    def walk(node: dict) -> None:
        kids = node.get("children") or []
        own = node["time"] - sum(c["time"] for c in kids)
        key = _key(node)
        self_time[key] = self_time.get(key, 0.0) + max(own, 0.0)
        for c in kids:
            walk(c)

    walk(doc["root_frame"])
    return sorted(((k, v / total) for k, v in self_time.items()), key=lambda x: -x[1])[:top]


#: the phases of a run, by the function (and file) that holds each; imports are module bodies of the packages
PHASES = [("import polars", "<module>", "polars/__init__.py"), ("import numpy", "<module>", "numpy/__init__.py"),
          ("load: whole (scan, frames, call tree)", "load_file", "traceview/ingest/loader.py"),
          ("load: waiting for the scan thread", "wait", "traceview/ingest/stream.py"),
          ("analysis: whole", "_analyze_trace", "traceview/report.py"),
          ("analysis: rules", "run_rules", "traceview/sections/findings.py"),
          ("analysis: layer attribution (computed first in prepare; rules and layer table share it)", "attribution",
           "analyses/layers.py"),
          ("analysis: layer table", "layer_table", "analyses/layers.py"),
          ("analysis: prepare (the layer attribution, then the classification)", "prepare", "traceview/ruleapi.py")]


def phases(doc: dict) -> list[tuple[str, float, float]]:
    """(phase, seconds, share of wall time): inclusive time of each phase's outermost calls."""
    total = doc.get("duration") or 1.0
    found = {name: 0.0 for name, _, _ in PHASES}

    def walk(node: dict, inside: frozenset) -> None:
        path = (node.get("file_path") or "").replace("\\", "/")
        hit = {name for name, fn, f in PHASES if node["function"].endswith(fn) and path.endswith(f)}
        for name in hit - inside:
            found[name] += node["time"]
        for c in node.get("children") or []:
            walk(c, inside | hit)

    walk(doc["root_frame"], frozenset())
    return [(name, found[name], found[name] / total) for name, _, _ in PHASES]


FLOOR = "import numpy, polars (the floor; OpenBLAS threads off, as in the CLI)"
FLOOR_BLAS = "import numpy, polars, OpenBLAS's default threads"


TEXT = "tiny trace end to end, text report"


def startup(repeat: int) -> tuple[list[str], float]:
    """(the start-up table's lines, seconds traceview adds to the floor): a tiny bundled trace end to end
    (`traceview analyze --format json`, import to exit; and the default text report, which also imports rich)
    beside `import numpy, polars`, interleaved in one run, medians of wall and of CPU (user + sys) seconds:
    on a shared machine CPU time is the steadier of the two."""
    py = sys.executable
    text = [py, "-m", "traceview", "analyze", str(TINY), "-o", os.devnull]
    # The floor runs the threads the CLI runs: the CLI turns OpenBLAS's threads off (cli.main sets
    # OPENBLAS_NUM_THREADS=1 before numpy loads), and with them on `import numpy` starts a BLAS thread per core
    # that spins for ~0.1 CPU s beside the import (and ~20 ms of wall on 2 cores). Against that floor the CPU
    # delta compared traceview's main thread with the floor's main thread plus another thread's spinning, and
    # understated what traceview adds; the default floor stays in the table, for reference, not in the deltas.
    one_blas = "import os; os.environ['OPENBLAS_NUM_THREADS'] = '1'; "
    cases = {"tiny trace end to end": tv_cmd(TINY), TEXT: text,
             "import traceview.report": [py, "-c", one_blas + "import traceview.report"],
             FLOOR: [py, "-c", one_blas + "import numpy, polars"], FLOOR_BLAS: [py, "-c", "import numpy, polars"],
             "python -c pass": [py, "-c", "pass"]}
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cases}
    for cmd in cases.values():  # warm-up: bytecode caches, page cache
        run_cpu(cmd)
    for _ in range(repeat):
        for k, cmd in cases.items():
            got[k].append(run_cpu(cmd))
    med = {k: tuple(statistics.median(r[j] for r in v) for j in range(3)) for k, v in got.items()}
    lines = ["\n## Start-up\n", "| what | seconds | CPU seconds | peak RSS MiB |", "|---|---|---|---|"]
    lines += [f"| {k} | {w:.3f} | {c:.3f} | {r:.0f} |" for k, (w, c, r) in med.items()]
    for k, what in (("tiny trace end to end", "JSON"), (TEXT, "text")):
        wall, cpu = med[k][0] - med[FLOOR][0], med[k][1] - med[FLOOR][1]
        ratio = med[k][0] / med[FLOOR][0]
        lines.append(f"\ntraceview adds {wall:.3f} s ({cpu:.3f} CPU s) to the floor for a tiny trace, import "
                     f"to exit, {what} report (target 0.05 s); {ratio:.2f}x the floor's time (both run with "
                     "OpenBLAS's threads off).")
    return lines, med["tiny trace end to end"][0] - med[FLOOR][0]


def hta_run(path: Path) -> tuple[float, float]:
    """HTA's (seconds, peak RSS MiB) on one trace: load + temporal + idle breakdown (bench_load.HTA)."""
    return run([sys.executable, "-c", HTA, str(path)], True)


def same_work(path: Path) -> tuple[float, float]:
    """traceview's (seconds, peak RSS MiB) doing HTA's work on one trace: the load and the two breakdowns, timed from
    after the imports as HTA's is (bench_load.TV_SAME)."""
    return run([sys.executable, "-c", TV_SAME, str(path)], True)


def peer_table(path: Path, repeat: int) -> tuple[list[str], float, float, float]:
    """The peers' table rows on one trace ([rows], HTA's seconds, its peak RSS MiB, traceview's seconds doing the
    same work: the median of `repeat` runs, half before HTA's one run (~20 s) and half after)."""
    tv = [same_work(path) for _ in range(max(1, repeat // 2))]
    hs, hr = hta_run(path)
    tv += [same_work(path) for _ in range(max(1, repeat - repeat // 2))]
    ts, tr = statistics.median(r[0] for r in tv), statistics.median(r[1] for r in tv)
    rows = [f"| HTA TraceAnalysis load + temporal + idle breakdown | {hs:.2f} | {hr:.0f} | |",
            f"| traceview, the same work (load + temporal + idle breakdown, timed as HTA's: after the imports) | "
            f"{ts:.3f} | {tr:.0f} | HTA {hs / ts:.1f}x slower |"]
    return rows, hs, hr, ts


def chart_series(rows: list, hta_pts: list[tuple[float, float, float]]) -> dict[str, list]:
    """The chart's lines from the cost-vs-size rows: traceview on the (tiled) benchmark trace and on tiny events,
    the bare decoders on the same files, HTA where it ran."""
    series: dict[str, list] = {"traceview": [], "traceview, tiny events": [], "orjson.loads": [], "json.loads": [],
                               "HTA": list(hta_pts)}
    for name, mb, r in rows:
        series["traceview, tiny events" if "tiny events" in name else "traceview"].append((mb, *r["traceview"]))
        for key, label in (("orjson", "orjson.loads"), ("json", "json.loads")):
            if key in r:
                series[label].append((mb, *r[key]))
    return series


def run_cpu(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds: user + sys, peak RSS MiB) of one child process (`bench_load.measure`)."""
    _, wall, cpu, rss = measure(cmd)
    return wall, cpu, rss


def tiny_events(millions: float, tmpd: Path, repeat: int,
                decoders: bool = True) -> tuple[str, float, dict[str, tuple[float, float]]]:
    """(row name, MB of JSON, {traceview[, orjson, json]: (seconds, peak RSS MiB)}) of `millions` tiny events."""
    p = tmpd / f"tiny{millions:g}M.json.gz"
    subprocess.run([sys.executable, str(TINY_EVENTS), str(p), "--events", str(int(millions * 1e6))],
                   check=True, capture_output=True)
    try:
        cases = size_cases(p) if decoders else {"traceview": (tv_cmd(p), False)}
        return f"{millions:g} M tiny events (tools/tiny_events.py)", json_mb(p), median_runs(cases, repeat)
    finally:
        p.unlink()


def memory(millions: list[float], repeat: int, traces: list[Path]) -> list[str]:
    """The peak-RSS table: traceview's peak RSS over the JSON's size, for tiny-event traces and `traces`.

    "The JSON" is the trace's uncompressed JSON text: its size in bytes (a .json.gz gunzipped; `json_mb`), not
    any decoder's memory. Peak RSS is the `traceview analyze --format json -o /dev/null` process's `ru_maxrss`
    (the whole run: interpreter, imports, load, every analysis, the report), median of `repeat` runs."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="tv-bench-") as tmp:
        for m in millions:
            name, mb, r = tiny_events(m, Path(tmp), repeat, decoders=False)
            rows.append((name, mb, r["traceview"], "<= 1.5"))
    for t in traces:
        mb = json_mb(t)
        r = median_runs({"traceview": (tv_cmd(t), False)}, repeat)["traceview"]
        rows.append((t.name, mb, r, "<= 1.2" if mb >= 900 else ""))
    lines = ["\n## Peak RSS / JSON (traceview analyze --format json; the JSON: its uncompressed size in bytes)\n",
             "| trace | MB JSON | seconds | peak RSS MiB | RSS / JSON | target |", "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {mb:.0f} | {s:.2f} | {rss:.0f} | {rss * 1.048576 / mb:.2f} | {tgt} |"
              for n, mb, (s, rss), tgt in rows]
    return lines


def reason(e: BaseException) -> str:
    """One line saying why a measurement failed."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def guarded(notes: list[str], what: str, fn: Callable[..., T], *args: object) -> T | None:
    """fn(*args), or None with "Not measured: <what>: <reason>" added to `notes` when it fails (a child that
    failed raises SystemExit in bench_load.measure): one failure must not cost the run its other numbers."""
    try:
        return fn(*args)
    except (Exception, SystemExit) as e:
        notes.append(f"Not measured: {what}: {reason(e)}" if what else f"Not measured: {reason(e)}")
        return None


def section(title: str, fn: Callable[[], list[str]]) -> list[str]:
    """A report section's lines, or its title and one "Not measured: <reason>" line when measuring or writing
    it fails: the sections after it and the Summary are still written."""
    try:
        return fn()
    except (Exception, SystemExit) as e:
        return [title, f"Not measured: {reason(e)}"]


def figure(what: str, value: Callable[[], str], target: str = "") -> str:
    """One Summary row; "not run" where the numbers it needs are missing (their section failed)."""
    try:
        got = value()
    except (Exception, SystemExit):
        got = "not run"
    return f"| {what} | {got} | {target} |"


def one_core_scaling(p: Path, repeat: int) -> tuple[tuple[float, float], dict]:
    """(traceview's (seconds, peak RSS MiB) on one core, the C scan alone: {threads: (wall s, CPU s)}) on `p`."""
    one = median_runs({"one core": (tv_cmd(p, ("taskset", "-c", "0")), False)}, repeat)["one core"]
    cores = len(os.sched_getaffinity(0))  # the C scan alone, 1 thread vs one per core (in memory)
    return one, scan_times(p.read_bytes(), sorted({1, cores}), max(repeat, 3))


def profile_lines(big: Path) -> list[str]:
    """The phases and hot-spots tables of pyinstrument's profile of `big`; none without pyinstrument."""
    doc = profile(big)
    if not doc:
        return []
    lines = [f"\n## Phases (inclusive time, pyinstrument, benchmark trace; {doc['duration']:.2f} s "
             "under the profiler)\n", "| phase | seconds | share of wall time |\n|---|---|---|"]
    lines += [f"| {k} | {sec:.3f} | {100 * v:.1f} % |" for k, sec, v in phases(doc)]
    lines.append("\n## Hot spots (self time, pyinstrument, benchmark trace)\n")
    lines.append("| function | share of wall time |\n|---|---|")
    return lines + [f"| `{k}` | {100 * v:.1f} % |" for k, v in hot_spots(doc)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=None)
    ap.add_argument("--sizes", default="0.5,1,2", help="larger traces to make, GB of JSON (empty: none)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tiny-events", default="1,10", help="millions of tiny synthetic events (tools/tiny_events.py)")
    ap.add_argument("--big-repeat", type=int, default=1, help="runs per size above the benchmark trace")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--hta-max-mb", type=float, default=600,
                    help="run HTA on the tiled sizes up to this many MB of JSON too (the chart's HTA line)")
    ap.add_argument("--no-scaling", action="store_true", help="skip the one-core run of the largest tiled trace")
    ap.add_argument("--out", default=str(ROOT / "bench/RESULTS.md"))
    ap.add_argument("--only", choices=("memory", "startup", "peers"), default=None,
                    help="run one entry and print it (RESULTS.md untouched): memory, the peak RSS / JSON of the "
                         "--tiny-events traces (and --trace, when given); startup, a tiny trace over the import "
                         "floor; peers, HTA against traceview doing its work on --trace (or the benchmark trace)")
    a = ap.parse_args()
    if a.only == "peers":
        big = Path(a.trace) if a.trace else SHARED_BIG
        peer_rows = peer_table(big, a.repeat)[0]
        print("\n".join(["| what | seconds | peak RSS MiB | |", "|---|---|---|---|", *peer_rows]))
        return
    if a.only == "startup":
        print("\n".join(startup(max(a.repeat, 5))[0]))
        return
    if a.only == "memory":
        print("\n".join(memory([float(x) for x in a.tiny_events.split(",") if x.strip()], a.big_repeat,
                               [Path(a.trace)] if a.trace else [])))
        return
    t0 = time.monotonic()

    def stage(what: str) -> None:
        """A progress line on stderr, with the time so far: a run cut short by a time limit shows where it was."""
        print(f"[bench +{time.monotonic() - t0:.0f} s] {what}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="tv-bench-") as tmp:
        tmpd = Path(tmp)
        big = Path(a.trace) if a.trace else SHARED_BIG if SHARED_BIG.is_file() else None
        if big is None:
            big = inflate(SEED, tmpd / "bench_base.json.gz", 20)  # (~120 MB of JSON, near the 132 MB benchmark trace)
        mb = json_mb(big)
        cmd = " ".join(["python bench/run.py", *sys.argv[1:]])
        lines = ["# Benchmark results\n", f"`{cmd}` on {platform.node() or 'this machine'} ({cpu_model()}, "
                 f"{os.cpu_count()} cores, Python {platform.python_version()}), {a.repeat} interleaved runs, medians; "
                 f"load average at the start {load_average()}.\n"]
        # Every measurement runs guarded: a failure leaves a "Not measured: ..." line where its numbers would be,
        # and the other sections and the Summary (which says "not run" for what is missing) are still written.
        size_notes: list[str] = []  # failed rows of the cost-vs-size and read-pipeline tables
        rows, halves = [], []
        # the largest tiled trace on one core against all cores (taskset: Linux)
        scaling: tuple | None = () if not a.no_scaling and shutil.which("taskset") else None
        scaling_note = ""
        peers = not a.no_peers and guarded([], "HTA", importable, "hta")
        hta_pts: list[tuple[float, float, float]] = []  # (MB, seconds, peak RSS MiB): the chart's HTA line
        stage(f"{big.name} ({mb:.0f} MB): traceview, orjson, json x{a.repeat}")
        base = guarded(size_notes, big.name, median_runs, size_cases(big), a.repeat)
        if base:
            rows.append((big.name, mb, base))
        stage("replay share")
        share_note: list[str] = []
        share = guarded(share_note, "", replay_share, big, a.repeat)
        h = guarded(size_notes, f"{big.name}, read pipeline", read_halves, big)
        if h:
            halves.append((big.name, h, base["traceview"][0] if base else None))
        sizes = [float(x) for x in a.sizes.split(",") if x.strip()]
        for gb in sizes:
            copies = max(2, round(gb * 1000 / mb))
            name = f"{big.name} x{copies}"
            stage(f"x{copies}: tile, then traceview, orjson, json x{a.big_repeat}")
            p = guarded(size_notes, f"{name} (tiling)", inflate, big, tmpd / f"x{copies}.json", copies)
            if p is None:
                continue
            try:
                m = json_mb(p)
                r = guarded(size_notes, name, median_runs, size_cases(p), a.big_repeat)
                if r:
                    rows.append((name, m, r))
                h = guarded(size_notes, f"{name}, read pipeline", read_halves, p)
                if h:
                    halves.append((name, h, r["traceview"][0] if r else None))
                if peers and m <= a.hta_max_mb:
                    stage(f"x{copies}: HTA")
                    pt = guarded([], "HTA", hta_run, p)  # a missing point only shortens the chart's HTA line
                    if pt:
                        hta_pts.append((m, *pt))
                if scaling is not None and (os.cpu_count() or 1) > 1 and gb == max(sizes):  # the largest size only
                    stage(f"x{copies}: one core, then the C scan alone")
                    notes: list[str] = []
                    got = guarded(notes, name, one_core_scaling, p, a.big_repeat)
                    scaling = (name, m, got[0], r["traceview"], got[1]) if got and r else None
                    scaling_note = notes[0] if notes else "" if r else f"Not measured: {name} did not run"
            finally:
                p.unlink()
        for millions in [float(x) for x in a.tiny_events.split(",") if x.strip()]:
            stage(f"{millions:g} M tiny events")
            row = guarded(size_notes, f"{millions:g} M tiny events", tiny_events, millions, tmpd, a.big_repeat)
            if row:
                rows.append(row)
        lines.append("## Cost vs size (`traceview analyze --format json` end to end)\n")
        lines.append("| trace | MB JSON | traceview s | MB/s | vs orjson.loads | peak RSS MiB | RSS / JSON | orjson s | json s |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for name, m, r in rows:
            tv, oj, js = r["traceview"], r["orjson"], r["json"]
            lines.append(f"| {name} | {m:.0f} | {tv[0]:.2f} | {m / tv[0]:.0f} | {oj[0] / tv[0]:.2f}x | {tv[1]:.0f} | "
                         f"{tv[1] * 1.048576 / m:.2f} | {oj[0]:.2f} | {js[0]:.2f} |")
        lines += [f"\n{n}" for n in size_notes]
        lines.append("\n## The read pipeline, each half alone (bench_scan.py, CPU seconds of its thread)\n")
        lines.append("The CLI runs gunzip and the C scan in two threads while the main thread imports; on "
                     f"{os.cpu_count()} cores they share the cores with it.\n")
        lines.append("| trace | MB JSON | gunzip CPU s | scan CPU s | scan MB/s | traceview wall s |")
        lines.append("|---|---|---|---|---|---|")
        for name, h, wall in halves:
            lines.append(f"| {name} | {h['mb']:.0f} | {h['gunzip_cpu_s']:.2f} ({h['inflate']}) | "
                         f"{h['scan_cpu_s']:.2f} | {h['mb'] / max(h['scan_cpu_s'], 1e-9):.0f} | "
                         f"{'not run' if wall is None else f'{wall:.2f}'} |")
        # start-up
        stage("start-up")
        over_floor = None

        def startup_section() -> list[str]:
            nonlocal over_floor
            st_lines, over_floor = startup(max(a.repeat, 5))
            return st_lines

        lines += section("\n## Start-up\n", startup_section)

        replay_title = "\n## The replay model (bench/replay_share.py, benchmark trace, medians)\n"

        def replay_section() -> list[str]:  # the replay model
            if share is None:
                return [replay_title, *share_note]
            return [replay_title,
                    f"Replay (every `replay()`, the fidelity section, the fix transforms) {share['replay_s']:.2f} s of "
                    f"{share['wall_s']:.2f} s end to end: {100 * share['share']:.1f} % (target <= 15 %); "
                    f"{100 * share['cpu_share']:.1f} % of the run's CPU time.",
                    f"\nThe loop finder (analyses/loops.py, every `loop_runs` call, its cache included) "
                    f"{share['loops_s']:.3f} s."]

        lines += section(replay_title, replay_section)

        def scaling_section() -> list[str]:  # core scaling
            if not scaling:
                return [f"\n## Core scaling\n\n{scaling_note}"] if scaling_note else []
            name, m, one, allc, scans = scaling
            out = [f"\n## Core scaling ({name}, {m:.0f} MB of JSON)\n",
                   "| cores | seconds | MB/s | peak RSS MiB |\n|---|---|---|---|",
                   f"| 1 (taskset -c 0) | {one[0]:.2f} | {m / one[0]:.0f} | {one[1]:.0f} |",
                   f"| {os.cpu_count()} | {allc[0]:.2f} | {m / allc[0]:.0f} | {allc[1]:.0f} |",
                   f"\n{os.cpu_count()} cores are {one[0] / allc[0]:.2f}x faster than one.",
                   "\nThe C scan alone (bench/bench_threads.py's, in memory, medians):\n",
                   "| scanner threads | wall s | MB/s | CPU s |\n|---|---|---|---|"]
            return out + [f"| {t} | {w:.3f} | {m / w:.0f} | {c:.2f} |" for t, (w, c) in scans.items()]

        lines += section("\n## Core scaling\n", scaling_section)
        hta = hta_same = None

        def peers_section() -> list[str]:
            nonlocal hta, hta_same
            if a.no_peers:
                return ["\nPeers: not run (--no-peers)."]
            if not peers:
                return ["\nPeers: HTA is not importable in this Python (`pip install HolisticTraceAnalysis`): skipped."]
            stage(f"{big.name}: HTA")
            peer_rows, hs, hr, ts = peer_table(big, a.repeat)
            hta_pts.append((mb, hs, hr))
            hta = hs / base["traceview"][0] if base else None
            hta_same = hs / ts
            return ["\n## Peers (benchmark trace, one run)\n",
                    "| what | seconds | peak RSS MiB | traceview faster by |\n|---|---|---|---|",
                    *peer_rows, f"| traceview's whole analysis end to end (the cost-vs-size row) | "
                    f"{base['traceview'][0] if base else float('nan'):.2f} | | "
                    f"{'not run' if hta is None else f'HTA {hta:.1f}x slower'} |"]

        lines += section("\n## Peers (benchmark trace, one run)\n", peers_section)
        # the ratios of issue 32, first; a figure whose numbers are missing reads "not run"
        summary = ["## Summary (ratios measured in this run)\n", "| figure | value | target |", "|---|---|---|"]
        tv, oj = (base["traceview"], base["orjson"]) if base else (None, None)
        summary.append(figure(f"{big.name}: speed vs `orjson.loads`", lambda: f"{oj[0] / tv[0]:.2f}x"))
        summary.append(figure(f"{big.name}: peak RSS / JSON", lambda: f"{tv[1] * 1.048576 / mb:.2f}"))
        for name, m, r in rows[1 if base else 0:]:
            if "tiny events" in name or m >= 900:
                summary.append(figure(f"{name}: peak RSS / JSON", lambda r=r, m=m: f"{r['traceview'][1] * 1.048576 / m:.2f}",
                                      "<= 1.5" if "tiny events" in name else "<= 1.2"))
        summary.append(figure("start-up over `import numpy, polars` (tiny trace)", lambda: f"+{over_floor:.3f} s",
                              "<= +0.05 s"))
        summary.append(figure(f"replay share of end to end ({big.name})", lambda: f"{100 * share['share']:.1f} %",
                              "<= 15 %"))
        if scaling or scaling_note:
            what = scaling[0] if scaling else "largest tiled trace"
            summary.append(figure(f"{what}: {os.cpu_count()} cores vs 1", lambda: f"{scaling[2][0] / scaling[3][0]:.2f}x",
                                  ">= 6x on 16 cores"))
            summary.append(figure(f"{what}: MB/s end to end, all cores", lambda: f"{scaling[1] / scaling[3][0]:.0f}",
                                  ">= 500"))

            def scan_ratio() -> str:
                (_, (w1, _)), (_, (wn, _)) = list(scaling[4].items())[0], list(scaling[4].items())[-1]
                return f"{w1 / wn:.2f}x"

            threads = list(scaling[4]) if scaling else []
            summary.append(figure(f"{what}: C scan alone, {threads[-1]} threads vs {threads[0]}" if threads
                                  else f"{what}: C scan alone", scan_ratio))
        summary.append(figure(f"HTA / traceview, the same work: load + temporal + idle breakdown ({big.name})",
                              lambda: f"{hta_same:.1f}x", ">= 40x"))
        summary.append(figure(f"HTA / traceview's whole analysis end to end ({big.name})", lambda: f"{hta:.1f}x"))
        lines[2:2] = summary + [""]
        # time and memory vs size, every row of this run (and HTA where it ran)
        svg_path = Path(a.out).with_name("scaling.svg")
        chart: list[str] = []

        def write_chart() -> None:
            svg_path.write_text(scaling_svg(chart_series(rows, hta_pts), note=f"{cpu_model()}, {os.cpu_count()} "
                                            "cores; medians of this run's rows (bench/RESULTS.md)"))
            chart.append(f"![time and peak RSS vs size]({svg_path.name})\n")

        guarded(chart, "the chart", write_chart)
        lines[2 + len(summary) + 1:2 + len(summary) + 1] = chart
        stage("pyinstrument phases")
        lines += section("\n## Phases (inclusive time, pyinstrument, benchmark trace)\n", lambda: profile_lines(big))
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
