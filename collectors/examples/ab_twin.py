"""A twin's saving measured in ONE process, with the problem's trace taken in that same process.

Two processes of the same launch-bound loop can run the host 10–45 % apart on a shared machine, which alone is
the size of a launch-bound fix's saving; a twin timed in two processes, or a trace taken in a third, mixes that
in. Here one process runs, in order:

1. the problem (`A`) once, long enough for `traceview collect`'s capture: its wait steps are the unprofiled
   steps the profiler-cost model is solved to, its active steps the trace the prediction is made from;
2. `--rounds` rounds of the problem and its fix (`B`), in ABBA order, each a fresh run of the example's own
   `main()` (the model rebuilt, its first step left out as the example's step timer does), timed with CUDA
   events and no profiler.

The saving is the median over rounds of (A's median step − B's median step); the rounds' spread says how sure.
A and B are example modules of this package with their options, as `record_collected*.sh` runs them:

    traceview collect --wait 8 --warmup 1 --active 3 --shapes --name gpt2_item -- \\
        python -m collectors.examples.ab_twin --rounds 6 \\
        "real_models --model gpt2 --attn sdpa --amp --sync-item --batch 2 --seq 256" \\
        "real_models --model gpt2 --attn sdpa --amp --batch 2 --seq 256"

The collector follows the first optimizer that steps (the problem's first run); once that run ends its optimizer
is gone and the later runs are not profiled. Prints one `AB_RESULT {json}` line, and writes it to the
collector's run folder as `ab_result.json`.
"""

from __future__ import annotations

import argparse
import gc
import json
import runpy
import shlex
import statistics
import sys

import torch

from collectors.examples import _common

#: steps left out of a self-timed program's run (as the held-out sets' programs timed alone are read: steps 12 on)
USER_WARMUP = 12


def run_once(spec: str, steps: int | None, skip: int = 0) -> list[float]:
    """Run `collectors.examples.<module> ARGS` in this process; its steady step times (ms)."""
    argv = shlex.split(spec)
    if steps is not None:
        argv += ["--steps", str(steps)]  # argparse keeps the last
    got: list[dict] = []
    report = _common.StepTimer.report

    def keep(self: _common.StepTimer, name: str, skip: int = 1) -> dict:
        out = report(self, name, skip)
        got.append(out)
        return out

    _common.StepTimer.report = keep  # type: ignore[method-assign]
    saved = sys.argv
    sys.argv = [argv[0], *argv[1:]]
    try:
        ns = runpy.run_module(f"collectors.examples.{argv[0]}", run_name="__main__")
    finally:
        sys.argv = saved
        _common.StepTimer.report = report  # type: ignore[method-assign]
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if not got and ns.get("EVENTS"):
        # a program that times itself with one CUDA event per step (user_programs `--time`): its steps after the
        # first USER_WARMUP, which hold cuDNN autotuning, allocator growth and lazy initialisation
        ev = ns["EVENTS"]
        return [a.elapsed_time(b) for a, b in zip(ev, ev[1:], strict=False)][USER_WARMUP:]
    if not got:
        raise SystemExit(f"ab_twin: {argv[0]} reported no step times")
    return got[-1]["step_ms"][skip:] or got[-1]["step_ms"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("problem", help='the problem: "module ARGS" (a module of collectors.examples)')
    ap.add_argument("fixed", help='its fixed twin: "module ARGS"')
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument(
        "--steps", type=int, default=None, help="steps of each timed run (default: the example's)"
    )
    ap.add_argument(
        "--trace-steps", type=int, default=64,
        help="steps of the first (captured) problem run; the collector waits until its step time settles (64)",
    )
    ap.add_argument(
        "--skip", type=int, default=0,
        help="steps of each timed run left out besides the example's own first one: a loop that takes several "
        "steps to settle (an allocator that frees its cache every step) is timed in steady state",
    )
    args = ap.parse_args()
    traced = run_once(args.problem, args.trace_steps)
    runs: dict[str, list[list[float]]] = {"problem": [], "fixed": []}
    for r in range(args.rounds):
        order = ("problem", "fixed") if r % 2 else ("fixed", "problem")
        for side in order:
            runs[side].append(run_once(getattr(args, side), args.steps, args.skip))
    med = {k: [statistics.median(v) for v in runs[k]] for k in runs}
    write_result(ab_result(args.problem, args.fixed, med, traced, steps=args.steps, skip=args.skip,
                           per_round_problem_ms=[round(x, 3) for x in med["problem"]],
                           per_round_fixed_ms=[round(x, 3) for x in med["fixed"]]))  # (traced: its profiled steps among them)


def ab_result(problem: str, fixed: str, rounds: dict[str, list[float]], traced: list[float], **extra) -> dict:
    """The A/B record tools/ab_labels.py reads: each side's step (ms) per round in `rounds` ("problem", "fixed",
    in round order), the traced run's steps, and `extra` fields after them."""
    per_round = [a - b for a, b in zip(rounds["problem"], rounds["fixed"], strict=True)]
    return {
        "problem": problem,
        "fixed": fixed,
        "problem_step_ms": round(statistics.median(rounds["problem"]), 4),
        "fixed_step_ms": round(statistics.median(rounds["fixed"]), 4),
        "saving_ms": round(statistics.median(per_round), 4),
        "per_round_saving_ms": [round(x, 3) for x in per_round],
        "traced_run_step_ms": [round(x, 3) for x in traced],
        "rounds": len(per_round),
        **extra,
    }


def write_result(out: dict) -> None:
    """Print the record as one `AB_RESULT {json}` line, and write it next to the trace (`ab_result.json` in the
    collector's run folder) when this process runs under `traceview collect`."""
    print("AB_RESULT " + json.dumps(out), flush=True)
    session = _collector()
    if session is not None:
        (session.run_dir / "ab_result.json").write_text(json.dumps(out, indent=1) + "\n")


def _collector() -> object | None:
    """The `traceview collect` session of this process, if it runs under one."""
    try:
        from collectors import runtime
    except ImportError:
        return None
    return runtime.current()


if __name__ == "__main__":
    main()
