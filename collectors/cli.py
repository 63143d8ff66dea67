"""`traceview collect` and `traceview trigger` (argparse subcommands; no torch import here).

`collect` runs the user's command with `collectors/_boot` prepended to PYTHONPATH: Python imports
its `sitecustomize.py` at start-up in every process of the job, and the first eligible process of
each rank attaches the profiler (collectors.runtime). This works for `python train.py` and for
`torchrun`, whose workers are fresh Python processes that inherit the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from collectors import manifest as mf
from collectors import outfilter, settle

_PKG_DIR = Path(__file__).resolve().parent
_BOOT_DIR = _PKG_DIR / "_boot"
_TORCHRUN_MODULES = {"torch.distributed.run", "torch.distributed.launch", "torchrun"}


def add_parsers(subparsers: Any) -> None:
    """Register `collect` and `trigger` on an argparse subparsers object."""
    c = subparsers.add_parser(
        "collect",
        help="run a training/inference script under torch.profiler, unmodified",
        description=(
            "Run COMMAND (python script.py ... or torchrun ...) under torch.profiler with CPU+CUDA "
            "activities. Step boundaries come from optimizer.step(), collectors.step(), or a time window. "
            "Traces land in OUT/RUN/rank<R>.<stamp>.pt.trace.json.gz with OUT/RUN/manifest.json."
        ),
        usage="%(prog)s [options] -- COMMAND [ARGS ...]",
    )
    c.add_argument(
        "--wait", type=int, default=5, help="unprofiled steps first, timed for the overhead (default 5)"
    )
    c.add_argument(
        "--settle",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep waiting past --wait until the step time stops moving (GPU clocks, autotuning, a prefetch "
        "buffer draining): the reference and the capture are the steady state (default on; "
        "$TRACEVIEW_SETTLE=0 turns the default off)",
    )
    c.add_argument(
        "--settle-max-s", type=float, default=30.0, help="record after this many seconds even if unsettled (30)"
    )
    c.add_argument(
        "--warmup", type=int, default=1, help="traced-but-discarded steps before recording (default 1)"
    )
    c.add_argument("--active", type=int, default=3, help="recorded steps per capture (default 3)")
    c.add_argument(
        "--repeat", type=int, default=1, help="captures (wait+warmup+active cycles); 0 = forever (default 1)"
    )
    c.add_argument("--stack", action="store_true", help="record Python stacks (with_stack; costly)")
    c.add_argument("--memory", action="store_true", help="record allocator events (profile_memory)")
    c.add_argument("--shapes", action="store_true", help="record input shapes and dtypes (record_shapes)")
    c.add_argument(
        "--modules", action="store_true", help="annotate every nn.Module call as module::<qualified.path>"
    )
    c.add_argument(
        "--on-demand",
        action="store_true",
        help="record nothing until `traceview trigger <pid|run dir> --steps N` (or SIGUSR2 to a rank)",
    )
    c.add_argument(
        "--on-demand-steps", type=int, default=None, help="steps captured on SIGUSR2 (default: --active)"
    )
    c.add_argument(
        "--window-s", type=float, default=None, help="time-window mode: record S seconds, no steps needed"
    )
    c.add_argument(
        "--delay-s", type=float, default=0.0, help="time-window mode: start recording after D seconds"
    )
    c.add_argument("--out", default="tv_traces", help="output folder (default ./tv_traces)")
    c.add_argument("--name", default=None, help="run name: the subfolder of --out (default: a timestamp)")
    c.add_argument("command", nargs=argparse.REMAINDER, help="-- python train.py ARGS... | -- torchrun ...")
    c.set_defaults(func=cmd_collect)

    t = subparsers.add_parser(
        "trigger",
        help="ask an --on-demand job to record its next N steps",
        description="Ask a job started with `traceview collect --on-demand` to record its next N steps.",
    )
    t.add_argument("target", help="a pid of the job (launcher, torchrun or a rank) or its run folder")
    t.add_argument("--steps", type=int, default=3, help="steps to record (default 3)")
    t.add_argument("--wait-s", type=float, default=0.0, help="wait up to S seconds for the traces to appear")
    t.set_defaults(func=cmd_trigger)


# ----------------------------------------------------------------------------- collect
def _is_torchrun(cmd: list[str]) -> bool:
    if Path(cmd[0]).name.startswith("torchrun"):
        return True
    return any(a == "-m" and i + 1 < len(cmd) and cmd[i + 1] in _TORCHRUN_MODULES for i, a in enumerate(cmd))


def _run_dir(out: str, name: str | None) -> Path:
    base = Path(out).resolve()
    run = name or time.strftime("%Y%m%d-%H%M%S")
    path = base / run
    if name is None:  # two runs in one second must not mix their traces
        k = 2
        while path.exists():
            path, k = base / f"{run}-{k}", k + 1
    return path


def usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, checked before anything is created on disk."""
    for flag in ("wait", "warmup", "repeat"):
        if getattr(args, flag) < 0:
            return f"--{flag} must be >= 0"
    if args.active < 1:
        return "--active must be >= 1"
    if args.on_demand_steps is not None and args.on_demand_steps < 1:
        return "--on-demand-steps must be >= 1"
    if args.window_s is not None and args.window_s <= 0:
        return "--window-s must be > 0"
    if args.settle_max_s <= 0:
        return "--settle-max-s must be > 0"
    if args.delay_s < 0:
        return "--delay-s must be >= 0"
    if args.window_s is not None and args.on_demand:
        return "--window-s and --on-demand exclude each other"
    return None


def build_config(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    err = usage_error(args)
    if err:
        raise SystemExit(f"traceview collect: {err}")
    return {
        "run": run_dir.name,
        "run_dir": str(run_dir),
        "launcher_pid": os.getpid(),  # rank 0 asks whether it still lives when a signal ends the job
        "wait": args.wait,
        "warmup": args.warmup,
        "active": args.active,
        "repeat": args.repeat,
        "settle": settle.config(args.settle, args.settle_max_s),
        "stack": args.stack,
        "memory": args.memory,
        "shapes": args.shapes,
        "modules": args.modules,
        "on_demand": args.on_demand,
        "ondemand_steps": args.on_demand_steps,
        "window_s": args.window_s,
        "delay_s": args.delay_s,
    }


def child_env(cfg: dict[str, Any], torchrun: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRACEVIEW_COLLECT_PID", None)  # a nested `collect` profiles its own child
    env["PYTHONPATH"] = os.pathsep.join(
        [str(_BOOT_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["TRACEVIEW_COLLECT"] = json.dumps(cfg)
    env["TRACEVIEW_COLLECT_ROOT"] = str(_PKG_DIR.parent)
    env["TRACEVIEW_COLLECT_REQUIRE_RANK"] = "1" if torchrun else "0"
    return env


def cmd_collect(args: argparse.Namespace) -> int:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print(
            "traceview collect: no command given (usage: traceview collect [options] -- python train.py ...)",
            file=sys.stderr,
        )
        return 2
    err = usage_error(args)
    if err:  # before the run folder exists: a typo leaves nothing behind
        print(f"traceview collect: {err}", file=sys.stderr)
        return 2
    run_dir = _run_dir(args.out, args.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = build_config(args, run_dir)
    torchrun = _is_torchrun(cmd)
    man = mf.base_manifest(run_dir, cfg, argv=cmd, launcher="torchrun" if torchrun else "python")
    mf.write_json_atomic(run_dir / mf.MANIFEST_NAME, man)
    lock = mf.hold_launcher_lock(run_dir)  # released by the kernel when we die: ranks can tell

    # the job's stderr goes through a filter process: torch's USDT profiler_start/stop lines to <run>/profiler.log
    sys.stderr.flush()
    errfilter = outfilter.start(run_dir)

    # Signals are taken synchronously (sigtimedwait) so that we know who sent them; the child starts with
    # the mask it would have had, and dies with us (PR_SET_PDEATHSIG) rather than profiling on as an orphan.
    waited = [s for s in _FORWARDED if s is not None] + [signal.SIGCHLD]
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        try:
            child = subprocess.Popen(cmd, env=child_env(cfg, torchrun), preexec_fn=_child_setup(old_mask),
                                     stderr=errfilter.stdin)
        except OSError as exc:
            _end_filter(errfilter)
            print(f"traceview collect: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
            mf.merge(run_dir, exit_code=127, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            mf.release_launcher_lock(run_dir, lock)
            return 127
        errfilter.stdin.close()  # the job holds the pipe now: its end (and its children's) ends the filter
        if cfg["on_demand"]:
            mf.register_pid(os.getpid(), run_dir)
            mf.register_pid(child.pid, run_dir)
        try:
            rc, sent = _wait_forwarding(child, waited)
        finally:
            if cfg["on_demand"]:
                mf.unregister_pid(os.getpid())
                mf.unregister_pid(child.pid)
            _end_filter(errfilter)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    died_of = signal.Signals(-rc).name if rc < 0 else None
    if rc < 0:  # killed by a signal: report it the way a shell does
        rc = 128 - rc
    man = mf.merge(run_dir, exit_code=rc, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   signal=died_of or sent)
    mf.release_launcher_lock(run_dir, lock)  # the job is over: no rank asks any more, no lock file left behind
    _report(run_dir, man)
    return rc


def _end_filter(errfilter: subprocess.Popen) -> None:
    """Wait for the stderr filter to pass the job's last lines; a process the job left behind may hold the pipe
    open: then not longer than a few seconds (the filter ends with it)."""
    if errfilter.stdin and not errfilter.stdin.closed:
        errfilter.stdin.close()
    try:
        errfilter.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


# SIGINT: a Ctrl-C in the terminal reaches the child itself (same process group) and is not repeated; one sent
# to the launcher alone (kill -INT) is passed on. The others are always passed on, so the job can flush.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None), getattr(signal, "SIGUSR2", None),
              getattr(signal, "SIGQUIT", None))
_SI_KERNEL = 0x80  # siginfo.si_code of a signal the kernel raised for the terminal (Ctrl-C, Ctrl-\\)


def _wait_forwarding(child: subprocess.Popen, waited: list[int]) -> tuple[int, str | None]:
    """Wait for the child, passing signals on. Returns (its return code, the last terminating signal passed)."""
    sent = None
    while True:
        rc = child.poll()
        if rc is not None:
            return rc, sent
        info = signal.sigtimedwait(waited, 0.5)  # also wakes on SIGCHLD; the timeout covers a missed one
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        if info.si_signo in (signal.SIGINT, getattr(signal, "SIGQUIT", -1)) and info.si_code == _SI_KERNEL:
            continue  # typed at the terminal: the child's process group got it too
        try:
            child.send_signal(info.si_signo)
        except OSError:
            pass
        if info.si_signo != getattr(signal, "SIGUSR2", -1):
            sent = signal.Signals(info.si_signo).name


def _child_setup(mask: Any) -> Any:
    """preexec_fn: the parent's original signal mask, and SIGTERM when the launcher dies (Linux)."""
    parent = os.getpid()
    prctl = None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not between fork and exec
    except (OSError, AttributeError):
        pass

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the launcher died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


def _report(run_dir: Path, man: dict[str, Any]) -> None:
    ranks, traces = man.get("ranks", []), man.get("traces", [])
    if not ranks:
        print(
            f"traceview collect: no profiled process reported to {run_dir} "
            "(did the command start Python with -I/-E/-S, or not Python at all?)",
            file=sys.stderr,
        )
        return
    st = man.get("step_time") or {}
    line = f"traceview collect: {len(traces)} trace(s) from {len(ranks)} rank(s) in {run_dir}"
    if st.get("unprofiled_ms_median") and st.get("profiled_ms_median"):
        line += (
            f"; step {st['unprofiled_ms_median']:.2f} ms unprofiled vs {st['profiled_ms_median']:.2f} ms profiled"
            f" ({st['overhead_pct']:+.0f}%)"
        )
    if st.get("settle_steps") is not None:  # --settle: where the warm-up ended (or did not)
        before = st.get("settle_ms_median")
        k = max((mf.rank_loader_period(r) for r in ranks), default=1)
        line += (f"; the capture started at step {st['settle_steps']}" + (" (the step time had not settled)"
                 if st.get("settled") is False else " once the step time settled")
                 + (f" and the prefetch buffer of its {k} DataLoader workers no longer drained (the reference is "
                    f"the mean over whole periods of {k} steps)" if k > 1 and st.get("settled") is not False else "")
                 + (f", {before:.2f} ms a step before" if before else ""))
    print(line, file=sys.stderr)
    if st.get("slow_steps_warning"):  # (says more than the spread does: which steps, and whether one was captured)
        print(f"traceview collect: warning: {st['slow_steps_warning']}", file=sys.stderr)
    elif st.get("spread_warning"):
        print(f"traceview collect: warning: {st['spread_warning']}", file=sys.stderr)


# ----------------------------------------------------------------------------- trigger
def _resolve_target(target: str) -> Path | None:
    if target.isdigit():
        return mf.run_dir_of_pid(int(target))
    path = Path(target)
    return path if (path / mf.MANIFEST_NAME).exists() or path.is_dir() else None


def _trace_files(run_dir: Path) -> set[str]:
    return {p.name for p in run_dir.glob("rank*.pt.trace.json*")}


def cmd_trigger(args: argparse.Namespace) -> int:
    if args.steps < 1:
        print("traceview trigger: --steps must be >= 1", file=sys.stderr)
        return 2
    run_dir = _resolve_target(args.target)
    if run_dir is None or not run_dir.is_dir():
        print(
            f"traceview trigger: {args.target!r} is neither a run folder nor a pid of a collect job",
            file=sys.stderr,
        )
        return 2
    man = mf.read_json(run_dir / mf.MANIFEST_NAME)
    if man and man.get("mode") != "on_demand":
        print(f"traceview trigger: {run_dir} was not started with --on-demand", file=sys.stderr)
        return 2
    before = _trace_files(run_dir)
    ctl_path = run_dir / "control.json"
    seq = int(mf.read_json(ctl_path).get("seq", 0)) + 1
    mf.write_json_atomic(ctl_path, {"seq": seq, "steps": args.steps, "requested": time.time()})
    print(f"traceview trigger: asked {run_dir} to record the next {args.steps} step(s) (request {seq})")
    if args.wait_s <= 0:
        return 0
    ranks = max(1, len(man.get("ranks", [])) or int(man.get("world_size") or 1))
    deadline = time.monotonic() + args.wait_s
    while time.monotonic() < deadline:
        new = sorted(_trace_files(run_dir) - before)
        if len(new) >= ranks and not any(n.endswith(".tmp") for n in new):
            for n in new:
                print(run_dir / n)
            return 0
        time.sleep(0.2)
    print("traceview trigger: no trace appeared in time (is the job still stepping?)", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="traceview")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_parsers(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))
