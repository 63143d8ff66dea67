"""The run manifest (`<run dir>/manifest.json`): what ran, how it was profiled, and step times.

Plain stdlib: the launcher and `traceview trigger` use it without torch. Each profiled rank writes
`rank<R>.collect.json`; `merge()` folds those into `manifest.json` (rank 0 after each export and at
exit, the launcher once the job has ended). docs/collect.md documents the schema.
"""

from __future__ import annotations

import json
import os
import re
import stat
import statistics
import tempfile
from pathlib import Path
from typing import Any

from traceview.ingest.manifest import (  # one schema: the analyzer reads what this writes
    MANIFEST_NAME,
    MANIFEST_VERSION,
    rank_loader_period,
    recurring_slow,
    step_reference,
)

__all__ = ["MANIFEST_NAME", "MANIFEST_VERSION", "rank_loader_period"]
_RANK_META = re.compile(r"^rank(\d+)\.collect\.json$")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON next to `path` and rename it over: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def rank_metas(run_dir: Path) -> list[dict[str, Any]]:
    metas = []
    for p in Path(run_dir).iterdir():
        if _RANK_META.match(p.name):
            meta = read_json(p)
            if meta:
                metas.append(meta)
    return sorted(metas, key=lambda m: m.get("rank", 0))


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def reference_ms(rank: dict[str, Any], key: str = "unprofiled_step_ms") -> float | None:
    """A rank's step time (ms) from its steps `key`: their median, the mean over whole periods where its batches
    came from several DataLoader workers in turn (`settle.loader_period`)."""
    xs = rank.get(key) or []
    v = step_reference(xs, rank_loader_period(rank)) if xs else None
    return round(v, 4) if v is not None else None


#: recorded step times whose slowest is more than this many times the fastest are not one steady state
SPREAD_WARN = 2.0


def _spread(ranks: list[dict[str, Any]], key: str) -> tuple[float | None, float | None, float | None]:
    """(slowest / fastest, fastest ms, slowest ms) of the recorded step times `key` on the rank where they vary
    most (each rank's steps are compared with its own: ranks may run different work)."""
    best = (None, None, None)
    for r in ranks:
        xs = [x for x in r.get(key) or [] if x and x > 0]
        k = rank_loader_period(r)
        if k > 1:  # steps fed by k DataLoader workers in turn alternate by design: compare whole periods
            xs = [sum(xs[i:i + k]) / k for i in range(0, len(xs) - k + 1, k)]
        if len(xs) >= 2 and (best[0] is None or max(xs) / min(xs) > best[0]):
            best = (round(max(xs) / min(xs), 2), round(min(xs), 3), round(max(xs), 3))
    return best


def spread_summary(ranks: list[dict[str, Any]], unprofiled_key: str) -> dict[str, Any]:
    """The spread of the recorded step times, profiled and unprofiled, and a warning above SPREAD_WARN."""
    out: dict[str, Any] = {}
    warn = []
    for name, key in (("profiled", "profiled_step_ms"), ("unprofiled", unprofiled_key)):
        ratio, lo, hi = _spread(ranks, key)
        out[f"{name}_spread"] = ratio
        if ratio is not None and ratio > SPREAD_WARN:
            warn.append(f"{name} steps vary {ratio:.1f}x ({lo:.2f} to {hi:.2f} ms)")
    out["spread_warning"] = (
        "; ".join(warn) + ": a noisy machine, a warm-up step or a data stall; the medians may not be the "
        "steady state: record more steps (--warmup/--active) on a quiet machine, or look at the slow step"
    ) if warn else None
    return out


def slow_summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Slow steps that recur after the warm-up (`recurring_slow`), on the rank with the most, and the line that
    says so: a median reference and a short capture both miss them."""
    got = [(r.get("rank", 0), s) for r in ranks if (s := recurring_slow(r))]
    if not got:
        return {"slow_steps": None, "slow_steps_warning": None}
    rank, s = max(got, key=lambda x: x[1]["slow"] / x[1]["of"])
    cap = (f"the capture holds {s['captured_slow']} of them" if s["captured_slow"]
           else f"none of the {s['captured']} captured steps is one: record more (--active 10) so the trace shows "
                "what a slow step runs")
    return {"slow_steps": {"rank": rank, **s}, "slow_steps_warning": (
        f"{s['slow']} of {s['of']} unprofiled steps after the warm-up took more than 3x the fastest "
        f"({s['fastest_ms']:.2f} ms; up to {s['slowest_ms']:.2f}; mean {s['mean_ms']:.2f} against a median of "
        f"{s['median_ms']:.2f}): slow steps recur — a setup that new input shapes trigger (cuDNN plans or "
        f"autotuning, recompiles), a data stall, or periodic work (logging, checkpoints); {cap}")}


def settle_summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the wait phase ran until the step time settled (--settle): the steps it took (the slowest rank),
    whether every rank settled before `max_s`, and the settling steps' median beside the reference's."""
    got = [r["settle"] for r in ranks if r.get("settle")]
    if not got:
        return {}
    before = [m for m in (_median(r.get("settle_step_ms", [])) for r in ranks) if m is not None]
    return {
        "settle_steps": max(g.get("steps", 0) for g in got),
        "settled": all(g.get("settled", True) for g in got),
        "settle_ms_median": max(before) if before else None,
    }


def step_time_summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Profiled vs unprofiled step time over ranks (the slowest rank's median sets the job's pace)."""
    key = "unprofiled_step_ms"
    if not any(r.get(key) for r in ranks):  # --wait 0 or on-demand after a capture: the next best thing
        key = "post_capture_step_ms"
    unprof = [m for m in (reference_ms(r, key) for r in ranks) if m is not None]
    prof = [m for m in (reference_ms(r, "profiled_step_ms") for r in ranks) if m is not None]
    u = max(unprof) if unprof else None
    p = max(prof) if prof else None
    methods = {r.get("step_time_method") for r in ranks if r.get("step_time_method")}
    return {
        "method": "cuda_event" if "cuda_event" in methods else ("wall" if methods else None),
        "unprofiled_ms_median": u,
        "profiled_ms_median": p,
        "overhead_pct": round(100.0 * (p - u) / u, 1) if u and p else None,
        "unprofiled_source": key,
        "unprofiled_samples": sum(len(r.get(key, [])) for r in ranks),
        "profiled_samples": sum(len(r.get("profiled_step_ms", [])) for r in ranks),
        **settle_summary(ranks),
        **spread_summary(ranks, key),
        **slow_summary(ranks),
    }


def merge(run_dir: Path, **updates: Any) -> dict[str, Any]:
    """Fold the per-rank files into manifest.json (keeping what the launcher wrote) and return it."""
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST_NAME
    man = read_json(path)
    if not man:  # started without the launcher (TRACEVIEW_COLLECT set by hand)
        cfg = json.loads(os.environ.get("TRACEVIEW_COLLECT", "{}"))
        man = base_manifest(run_dir, cfg, argv=[], launcher="unknown")
    man.update(updates)
    ranks = rank_metas(run_dir)
    man["ranks"] = ranks
    man["world_size"] = max([r.get("world_size", 1) for r in ranks] + [man.get("world_size") or 1])
    if ranks:
        first = ranks[0]
        man["versions"] = first.get("versions")
        man.setdefault("options", {})["activities"] = first.get("activities")
        man["gpu_name"] = next((r["gpu_name"] for r in ranks if r.get("gpu_name")), None)
        for k in ("cpu_count", "cpu_affinity"):  # the lowest rank's host (each rank keeps its own)
            man[k] = first.get(k)
        if not man.get("argv"):
            man["argv"] = first.get("argv", [])
    man["traces"] = sorted(
        (t for r in ranks for t in r.get("traces", [])), key=lambda t: (t["capture"], t["rank"])
    )
    man["step_time"] = step_time_summary(ranks)
    write_json_atomic(path, man)
    return man


def base_manifest(run_dir: Path, cfg: dict[str, Any], argv: list[str], launcher: str) -> dict[str, Any]:
    import shlex
    import socket
    import time

    schedule = None
    if not cfg.get("on_demand") and not cfg.get("window_s"):
        schedule = {k: cfg.get(k) for k in ("wait", "warmup", "active", "repeat")}
    return {
        "manifest_version": MANIFEST_VERSION,
        "tool": "traceview collect",
        "run": cfg.get("run") or Path(run_dir).name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "finished": None,
        "exit_code": None,
        "signal": None,  # name of the signal that ended the job (SIGTERM...), if one did
        "launcher_lost": False,  # the launcher died first: a rank wrote exit_code
        "command": shlex.join(argv),
        "argv": argv,
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "launcher": launcher,
        "world_size": None,
        "mode": "on_demand" if cfg.get("on_demand") else ("window" if cfg.get("window_s") else "schedule"),
        "schedule": schedule,
        "options": {
            "activities": None,  # filled from the ranks: ["cpu"] or ["cpu", "cuda"]
            "record_shapes": bool(cfg.get("shapes")),
            "profile_memory": bool(cfg.get("memory")),
            "with_stack": bool(cfg.get("stack")),
            "modules": bool(cfg.get("modules")),
            "settle": cfg.get("settle") if schedule else None,  # {"tol", "max_s"}: collectors/settle.py
            "module_prefix": "module::",
            "on_demand": bool(cfg.get("on_demand")),
            "ondemand_steps": cfg.get("ondemand_steps"),
            "window_s": cfg.get("window_s"),
            "delay_s": cfg.get("delay_s"),
        },
        "versions": None,
        "gpu_name": None,
        "cpu_count": None,
        "cpu_affinity": None,
        "ranks": [],
        "traces": [],
        "step_time": None,
    }


# ---------------------------------------------------------------- launcher liveness
LOCK_NAME = ".launcher.lock"


def hold_launcher_lock(run_dir: Path) -> int | None:
    """The launcher holds an exclusive flock on `<run>/.launcher.lock` while it lives; the kernel drops it
    when the launcher dies, however it dies (SIGKILL included). Returns the fd to keep open."""
    try:
        import fcntl

        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except (ImportError, OSError):
        return None


def release_launcher_lock(run_dir: Path, fd: int | None) -> None:
    """The job is over: remove the lock file (before closing it, so no rank ever sees it free and takes the
    launcher for lost) and close it."""
    if fd is None:
        return
    try:
        os.unlink(Path(run_dir) / LOCK_NAME)
    except OSError:
        pass
    os.close(fd)


def launcher_lost(run_dir: Path, pid: int | None = None) -> bool:
    """True when the run had a launcher and it is gone (its process, `pid`, has exited, or its lock is free): then
    no one else will write the job's end into the manifest. The process is asked first: the SIGTERM that
    PR_SET_PDEATHSIG sends when the launcher dies can arrive before the kernel has released the dead launcher's
    lock."""
    if isinstance(pid, int) and pid > 0 and _exited(pid):
        return True
    try:
        import fcntl

        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
    except (ImportError, OSError):
        return False  # started without `traceview collect`, or cannot tell
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: the launcher lives
    finally:
        os.close(fd)
    return True


def _exited(pid: int) -> bool:
    """The process has exited (gone, or a zombie its parent has not reaped yet); False when it cannot tell."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    return state in ("Z", "X")


# ---------------------------------------------------------------- pid registry (for `trigger <pid>`)
def _registry() -> Path:
    """A private per-user directory: $XDG_RUNTIME_DIR/traceview-collect, else <tmp>/traceview-collect-<uid>.
    One that exists already must be a real directory (not a link) owned by this user and closed to others:
    another local user could otherwise pre-create it and point `trigger <pid>` at a folder they control."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(xdg) if xdg and os.path.isabs(xdg) and os.path.isdir(xdg) else Path(tempfile.gettempdir())
    d = base / ("traceview-collect" if base != Path(tempfile.gettempdir()) else f"traceview-collect-{os.getuid()}")
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{d} is not a private directory of this user (owner uid {st.st_uid}, mode "
                              f"{stat.S_IMODE(st.st_mode):o}): not used")
    return d


def register_pid(pid: int, run_dir: Path) -> None:
    """Record pid -> run folder for `trigger <pid>`; without a safe registry, `trigger <run dir>` and the
    /proc fallback still work."""
    try:
        (_registry() / str(pid)).write_text(str(Path(run_dir).resolve()))
    except OSError as e:
        import sys

        print(f"traceview collect: pid registry not used: {e}", file=sys.stderr)


def unregister_pid(pid: int) -> None:
    try:
        (_registry() / str(pid)).unlink()
    except OSError:
        pass


def run_dir_of_pid(pid: int) -> Path | None:
    try:
        return Path((_registry() / str(pid)).read_text().strip())
    except OSError:
        pass
    # Any process of the job carries the config in its environment (Linux only).
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"TRACEVIEW_COLLECT="):
            try:
                cfg = json.loads(item.split(b"=", 1)[1])
                return Path(cfg["run_dir"])
            except (ValueError, KeyError, TypeError):
                return None
    return None
