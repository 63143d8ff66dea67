"""A small trace's polars queries and main-thread CPU (issue 32, start-up): where `traceview analyze --format json`
spends the fixed cost per query that dominates a tiny trace's run.

    python bench/count_queries.py TRACE [TRACE ...] [--top 40]    # queries per traceview function, deterministic
    python bench/count_queries.py TRACE --time 15 [--root DIR ...] # CPU seconds at exit, interleaved runs, medians

Counting wraps `LazyFrame._collect_eager` (every eager DataFrame/Series call that runs a query: select, filter,
drop, join, group_by(...).agg, sort, a Series method dispatched to an expression...) and `LazyFrame.collect`
(traceview's lazy chains), each charged to the innermost traceview function on the stack (a query inside
another counts once). Timing runs the CLI as the user does (`python -m traceview analyze`, its own exit) in a
child process per run, trees interleaved, and reads `time.thread_time()` (the main thread: the critical path)
and `time.process_time()` (every thread) from an exit handler. `--root` names a tree to run (another checkout,
e.g. the commit before a change); its `rules/` is imported as `traceview.rules` whatever the environment's install
points at.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the child's code: the tree's `rules/` as `traceview.rules` (an editable install may map it elsewhere), the CPU
#: clocks printed at exit (the CLI ends the process with `os._exit` after running the exit handlers)
PROBE = """
import atexit, sys, time
from importlib.machinery import PathFinder
class _Rules:
    @staticmethod
    def find_spec(name, path=None, target=None):
        return PathFinder.find_spec(name, [{root!r}]) if name == "traceview.rules" else None
sys.meta_path.insert(0, _Rules)
atexit.register(lambda: print("CPU", time.thread_time(), time.process_time(), file=sys.stderr))
sys.argv = ["traceview", *sys.argv[1:]]
from traceview.cli.main import main
sys.exit(main())
"""


class _Rules:
    """Imports `traceview.rules` from the counted tree's `rules/` (an editable install may map it elsewhere)."""

    root = str(ROOT)

    @classmethod
    def find_spec(cls, name: str, path=None, target=None):  # (the meta path finder protocol)
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(name, [cls.root]) if name == "traceview.rules" else None


def count(paths: list[str], root: Path = ROOT) -> tuple[Counter, Counter]:
    """({traceview function: queries}, {"eager"/"lazy": queries}) of `analyze --format json` of each path, in
    this process, with the tree at `root` (default: the one this script lives in)."""
    sys.path.insert(0, str(root))
    _Rules.root = str(root)
    sys.meta_path.insert(0, _Rules)
    os.environ.setdefault("POLARS_MAX_THREADS", "1")  # the CLI's setting for a small input (cli.main)
    import polars as pl

    from traceview.cli.main import main

    by_fn: Counter = Counter()
    kinds: Counter = Counter()
    depth = threading.local()
    here = str(root / "traceview"), str(root / "rules")
    helpers = str(root / "traceview" / "frames.py")  # (a helper's query is charged to its caller)

    def caller() -> str:
        f = sys._getframe(2)
        while f is not None and (not f.f_code.co_filename.startswith(here) or f.f_code.co_filename == helpers):
            f = f.f_back
        if f is None:
            return "(outside traceview)"
        rel = Path(f.f_code.co_filename).relative_to(root).as_posix()
        return f"{rel}:{f.f_code.co_qualname}"

    def wrap(name: str, kind: str) -> None:
        orig = getattr(pl.LazyFrame, name)

        def counted(self, *a, **k):
            n = getattr(depth, "n", 0)
            if n == 0:
                by_fn[caller()] += 1
                kinds[kind] += 1
            depth.n = n + 1
            try:
                return orig(self, *a, **k)
            finally:
                depth.n = n

        setattr(pl.LazyFrame, name, counted)

    wrap("_collect_eager", "eager")
    wrap("collect", "lazy")
    for p in paths:
        main(["analyze", p, "--format", "json", "-o", os.devnull])
    return by_fn, kinds


def time_runs(paths: list[str], roots: list[Path], n: int) -> dict[tuple[str, Path], list[tuple[float, float]]]:
    """{(path, root): [(main-thread CPU s, process CPU s)] * n}, each root's child run interleaved with the
    others' so that the box's load falls on all of them alike."""
    # the CLI picks the polars threads, as a user's run would; bytecode caches are written and read, as they are
    env = {k: v for k, v in os.environ.items() if k not in ("POLARS_MAX_THREADS", "PYTHONDONTWRITEBYTECODE")}
    got: dict[tuple[str, Path], list[tuple[float, float]]] = {(p, r): [] for p in paths for r in roots}
    for i in range(n + 1):  # the first round warms bytecode and page caches and is dropped
        for p in paths:
            for r in roots:
                cmd = [sys.executable, "-c", PROBE.format(root=str(r)), "analyze", os.path.abspath(p),
                       "--format", "json", "-o", os.devnull]
                out = subprocess.run(cmd, cwd=r, env=env, capture_output=True, text=True, check=True).stderr
                line = [ln for ln in out.splitlines() if ln.startswith("CPU ")][-1]
                if i:
                    got[(p, r)].append(tuple(float(x) for x in line.split()[1:]))
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--top", type=int, default=40, help="functions to list (by queries)")
    ap.add_argument("--time", type=int, default=0, metavar="N", help="time N runs per tree instead of counting")
    ap.add_argument("--root", action="append", type=Path,
                    help="a tree to time (repeatable) or to count (the first; default: this one)")
    a = ap.parse_args()
    if a.time:
        roots = [r.resolve() for r in a.root or [ROOT]]
        for (p, r), runs in time_runs(a.paths, roots, a.time).items():
            th, pr = (statistics.median(x[j] for x in runs) for j in (0, 1))
            print(f"{Path(p).name} {r}: main thread {th:.3f} s, process {pr:.3f} CPU s (medians of {len(runs)})")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    by_fn, kinds = count(a.paths, (a.root or [ROOT])[0].resolve())
    total = sum(kinds.values())
    print(f"{total} queries ({kinds['eager']} eager + {kinds['lazy']} lazy) over {len(a.paths)} trace(s)")
    for fn, k in by_fn.most_common(a.top):
        print(f"{k:5d}  {fn}")


if __name__ == "__main__":
    main()
