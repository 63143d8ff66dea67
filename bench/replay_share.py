"""The replay model's share of one `traceview analyze --format json` run: prints {wall_s, replay_s, share, cpu_s,
replay_cpu_s, cpu_share, calls, loops_s} (CPU: this process's, every thread; steadier than wall time on a shared
machine; loops_s: the loop finder's time, every call of `analyses.loops.loop_runs`, the same way).

    python bench/replay_share.py TRACE

Runs the CLI in this process with a timer around the outermost calls of the replay model (every `replay()`,
the fidelity section, the rules' fix transforms), wherever they were imported; wall time runs from this
script's start to the CLI's exit (imports included, as in the end-to-end figure). Calls in several threads at
once (traceview.parallel) count once: the replay's time is the wall time during which any of them runs, its CPU
the process's CPU time then (every thread's, so an upper bound when other work overlaps).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

T0, C0 = time.perf_counter(), time.process_time()


def main() -> None:
    import threading

    import traceview.analyses.fixes as fixes
    import traceview.analyses.loops as loops
    import traceview.analyses.replay as replay
    import traceview.report  # noqa: F401 - every module that imports the replay's functions
    from traceview.cli.main import main as cli

    # the outermost calls of each thread; the time counted is while at least one thread is inside one (the
    # analysis runs independent parts in threads: calls that overlap are counted once, as the wall clock sees them)
    def clock() -> dict:  # (each timer's own nesting depth per thread: its functions' calls nest in one another)
        return {"s": 0.0, "cpu": 0.0, "calls": 0, "active": 0, "t": 0.0, "c": 0.0, "local": threading.local()}

    spent, finder = clock(), clock()
    lock = threading.Lock()

    def timed(fn, spent: dict):
        local = spent["local"]

        def wrapper(*a, **k):
            outer = getattr(local, "depth", 0) == 0
            local.depth = getattr(local, "depth", 0) + 1
            if outer:
                with lock:
                    if spent["active"] == 0:
                        spent["t"], spent["c"] = time.perf_counter(), time.process_time()
                    spent["active"] += 1
            try:
                return fn(*a, **k)
            finally:
                local.depth -= 1
                if outer:  # the outermost call only: nested ones are inside its time
                    with lock:
                        spent["active"] -= 1
                        spent["calls"] += 1
                        if spent["active"] == 0:
                            spent["s"] += time.perf_counter() - spent["t"]
                            spent["cpu"] += time.process_time() - spent["c"]
        return wrapper

    targets = {id(f): timed(f, spent) for f in (replay.replay, replay.fidelity, fixes.transforms)}
    targets[id(loops.loop_runs)] = timed(loops.loop_runs, finder)
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name.startswith("traceview") or name.startswith("rules")):
            continue
        for attr, val in list(vars(mod).items()):
            if id(val) in targets and callable(val):
                setattr(mod, attr, targets[id(val)])

    def report() -> None:
        wall, cpu = time.perf_counter() - T0, time.process_time() - C0
        print(json.dumps({"wall_s": round(wall, 3), "replay_s": round(spent["s"], 3),
                          "share": round(spent["s"] / wall, 4), "cpu_s": round(cpu, 3),
                          "replay_cpu_s": round(spent["cpu"], 3), "cpu_share": round(spent["cpu"] / cpu, 4),
                          "calls": spent["calls"], "loops_s": round(finder["s"], 4)}), flush=True)

    atexit.register(report)
    sys.argv = ["traceview", "analyze", sys.argv[1], "--format", "json", "-o", os.devnull]
    cli()  # as `traceview analyze` runs: it ends the process, the exit handler prints


if __name__ == "__main__":
    main()
