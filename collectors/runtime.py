"""In-process side of `traceview collect`: runs inside the profiled script and imports torch.

The bootstrap (`collectors/_boot/sitecustomize.py`) calls `attach_from_env()` before the user's script
starts. From then on a `Session` owns one `torch.profiler.profile` per capture and advances it at every
step boundary: the first optimizer's `step()` (global post-hook), `collectors.step()`, or nothing at all
in time-window mode. It also times every step so that the manifest can compare profiled with
unprofiled step time (profiling inflates host time and biases verdicts toward "CPU-bound").
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerAction, ProfilerActivity

from collectors import manifest as mf
from collectors import settle as st


def teardown_cupti() -> None:
    """Have Kineto finalize CUPTI when a capture ends (`TEARDOWN_CUPTI=1`), unless the user chose otherwise.

    Kineto leaves CUPTI attached after profiling unless this variable is "1" (pytorch/pytorch#144455): every
    later kernel launch still goes through its callbacks, so the rest of the job runs slower (a 4-layer
    TinyGPT on an H200, torch 2.11 / CUDA 13: 6.10 ms a step after the capture against 5.40 ms with teardown,
    5.4-6.0 ms before it). Torch itself turns teardown off where CUDA graphs and an old CUDA crash with it.
    """
    os.environ.setdefault("TEARDOWN_CUPTI", "1")


MODULE_PREFIX = "module::"
# Keep the manifest bounded on long jobs (on-demand captures of a multi-day run).
_MAX_SAMPLES = 512

_SESSION: Session | None = None


def current() -> Session | None:
    return _SESSION


def attach_from_env() -> Session:
    """Start profiling this process according to the JSON config in $TRACEVIEW_COLLECT."""
    global _SESSION
    # torch warns once per process that a schedule's cycles don't accumulate events: that is our intent.
    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")
    if _SESSION is None:
        _SESSION = Session(json.loads(os.environ["TRACEVIEW_COLLECT"]))
        _SESSION.start()
    return _SESSION


def _warn(msg: str) -> None:
    print(f"traceview collect: {msg}", file=sys.stderr, flush=True)


class _Boundary:
    """One step boundary: when the step ending there ended, and when the next one started.

    The two differ when the profiler changed state at the boundary (warm-up, trace start, export):
    that cost belongs to no step, so step times run from one boundary's start to the next one's end.
    """

    __slots__ = ("step", "phase", "wall_ns", "event", "start_wall_ns", "start_event")

    def __init__(self, step: int, phase: str, wall_ns: int, event: Any) -> None:
        self.step = step
        self.phase = phase
        self.wall_ns = self.start_wall_ns = wall_ns
        self.event = self.start_event = event


class Session:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.run_dir = Path(cfg["run_dir"])
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.cuda = torch.cuda.is_available()
        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        if not self.cuda and self.rank == 0:
            _warn("CUDA is not available: recording CPU activities only")

        self.prof: torch.profiler.profile | None = None
        self.prof_running = False
        self.steps = 0  # boundaries seen; the step now running has this index
        self.step_source: str | None = None
        self._opt_ref: weakref.ref | None = None
        self._explicit = False
        self._disabled = False
        self._capture = 0
        self._capture_first_step = 0
        self._traces: list[dict[str, Any]] = []
        self._warnings: list[str] = []
        self._in_boundary = False
        self._pending_signal: int | None = None  # a SIGTERM/SIGHUP that came inside a step boundary
        self._stop_requested = False
        self._meta_written = 0.0
        self._traced = False
        self._profiler_enabled = torch._C._autograd._profiler_enabled
        self._cached: dict[str, Any] = {}
        self._pending: deque[_Boundary] = deque()
        self._samples: dict[str, deque[float]] = {}
        self._wall_samples: dict[str, deque[float]] = {}
        self._methods: set[str] = set()
        # on-demand state
        self._control_path = self.run_dir / "control.json"
        self._control_mtime = 0
        self._handled_seq = self._read_control().get("seq", 0) if cfg.get("on_demand") else 0
        self._planned: tuple[int, int] | None = None  # (first active step, n steps)
        self._usr2 = False
        self._lock = threading.RLock()
        self._meta_path = self.run_dir / f"rank{self.rank}.collect.json"
        self._annotator: _ModuleAnnotator | None = None
        self._terminated: str | None = None  # name of the signal that ended the job, if one did
        # settle state (schedule mode): no profiler until the step time stops moving (collectors/settle.py)
        self._settling = False
        self._settle_t0: float | None = None
        self._settle_start: int | None = None  # the step the profiler starts at, agreed on by all ranks
        self._settle_active: int | None = None  # the capture's length agreed on with it (None: --active)
        self._claimed_active: int | None = None
        self._claimed_by = self.rank
        self._settle_timed_out = False  # this rank gave up waiting (--settle-max-s)
        self._settle_info: dict[str, Any] | None = None
        self._loaders: st.LoaderWatch | None = None  # the DataLoaders' prefetch buffers, watched while settling
        self._ready: list[int] = []  # batches they held ready at each step boundary while settling
        self._period = 1  # their workers: a loader-fed step alternates with this period

    # ---------------------------------------------------------------- setup
    def start(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self._on_optimizer_step)
        if self.cfg.get("modules"):
            self._annotator = _ModuleAnnotator()
            self._annotator.install()
        if self.cfg.get("window_s"):
            self._start_window_timer()
        elif self.cfg.get("on_demand"):
            self._register_pid()
            if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR2"):
                if signal.getsignal(signal.SIGUSR2) in (signal.SIG_DFL, None):
                    signal.signal(signal.SIGUSR2, self._on_usr2)
        elif self.cfg["wait"] > 0 and st.applies(self.cfg.get("settle"), self.world_size,
                                                 int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))):
            self._settling = True  # the profiler starts once the step time has settled (_poll_settle)
            self._loaders = st.LoaderWatch()
            self._loaders.install()
        else:
            self._start_profiler(self._schedule(skip_first=0), first_step=0)
        atexit.register(self.finish)
        self._install_term_handler()
        self._write_meta()

    def _note(self, msg: str) -> None:
        """A warning for the manifest (`warnings`), printed once for the job (by rank 0)."""
        self._warnings.append(msg)
        if self.rank == 0:
            _warn(msg)

    def _install_term_handler(self) -> None:
        """SIGTERM (a scheduler, torchrun stopping its workers, the launcher dying) kills a process without
        running atexit: flush the capture first. Only where nobody else handles SIGTERM."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, self._on_terminate)

    def _on_terminate(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._terminated is not None:
            # a repeated signal (a second kill, or PR_SET_PDEATHSIG again on each re-parenting) must not cut
            # the trace being written
            return
        if self._in_boundary and self._pending_signal is None:
            # The handler runs in the main thread, which may be inside a step boundary, the profiler half-way
            # through its step transition (the lock is re-entrant): stopping it there can lose the capture. The
            # boundary ends in microseconds and then terminates (`boundary`).
            self._pending_signal = signum
            return
        if self._terminated is None:
            self._terminated = name
            msg = f"terminated by {name} at step {self.steps}: what was recorded so far was saved"
            self._warnings.append(msg)
            _warn(msg)
            try:
                self.finish()
                if self.rank == 0 and mf.launcher_lost(self.run_dir, self.cfg.get("launcher_pid")):
                    # the launcher died (killed): nobody else will say how the job ended
                    mf.merge(self.run_dir, exit_code=128 + signum, signal=name, launcher_lost=True,
                             finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            except Exception as exc:  # never mask the signal
                _warn(f"flushing on {name} failed: {exc!r}")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # end as the signal would have: the exit status says so

    def _schedule(self, skip_first: int) -> Any:
        return torch.profiler.schedule(
            skip_first=skip_first,
            wait=self.cfg["wait"],
            warmup=self.cfg["warmup"],
            active=self.cfg["active"],
            repeat=self.cfg["repeat"],
        )

    def _new_profiler(self, schedule: Any) -> torch.profiler.profile:
        teardown_cupti()
        prof = torch.profiler.profile(
            activities=self.activities,
            schedule=schedule,
            on_trace_ready=self._on_trace_ready,
            record_shapes=bool(self.cfg.get("shapes")),
            profile_memory=bool(self.cfg.get("memory")),
            with_stack=bool(self.cfg.get("stack")),
        )
        meta = json.dumps({"run": self.cfg.get("run"), "rank": self.rank, "world_size": self.world_size})
        if hasattr(prof, "preset_metadata_json"):
            prof.preset_metadata_json("traceview_collect", meta)
        return prof

    def _start_profiler(self, schedule: Any, first_step: int) -> None:
        prof = self._new_profiler(schedule)
        # Number ProfilerStep#N by the job's own step index, also for on-demand captures.
        prof.step_num = first_step
        prof.current_action = schedule(first_step)
        if hasattr(prof, "_prev_schedule_action"):
            prof._prev_schedule_action = prof.current_action
        prof.start()
        self.prof = prof
        self.prof_running = True

    def _stop_profiler(self) -> None:
        prof, self.prof, self.prof_running = self.prof, None, False
        if prof is not None:
            prof.stop()

    # -------------------------------------------------------- step boundaries
    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._explicit:
            return
        # Several optimizers (GANs, per-group optimizers) step once each per iteration: follow the first.
        if self._opt_ref is None:
            self._opt_ref = weakref.ref(optimizer)
        elif self._opt_ref() is not optimizer:
            return
        self.boundary("optimizer")

    def boundary(self, source: str) -> None:
        """End the running step and start the next one."""
        if self._disabled:
            return
        if source == "explicit" and not self._explicit:
            self._explicit = True
        try:
            with self._lock:
                self._boundary(source)
        except Exception as exc:  # never break the user's training loop
            self._disabled = True
            _warn(f"profiling disabled after an error at step {self.steps}: {exc!r}")
            try:
                self._stop_profiler()
            except Exception:
                pass
        finally:
            self._in_boundary = False
            if self._pending_signal is not None:  # deferred by _on_terminate: the transition is complete now
                sig, self._pending_signal = self._pending_signal, None
                self._on_terminate(sig, None)

    def _boundary(self, source: str) -> None:
        self.step_source = self.step_source or source
        self._in_boundary = True
        before = self._state()
        mark = self._mark(self._phase())
        self.steps += 1
        exported = self._capture
        if self.cfg.get("on_demand"):
            self._poll_on_demand()
        elif self._settling:
            self._poll_settle()
        elif self.prof is not None and self.prof_running:
            self.prof.step()
        after = self._state()
        if after != before or exported != self._capture:
            self._restart(mark)  # the profiler's own work at this boundary belongs to no step
        recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        if after in recording and (before not in recording or exported != self._capture):
            self._capture_first_step = self.steps
        self._in_boundary = False
        if self.cfg.get("on_demand") and time.monotonic() - self._meta_written > 1.0:
            self._write_meta()  # a live status (steps seen, step times) for `trigger` and for people
        if self._stop_requested:
            self._stop_requested = False
            self._stop_profiler()

    def _state(self) -> ProfilerAction | None:
        return self.prof.current_action if self.prof is not None and self.prof_running else None

    def _phase(self) -> str:
        action = self._state()
        if action is None or action == ProfilerAction.NONE:
            return "unprofiled"
        if action == ProfilerAction.WARMUP:
            return "warmup"
        return "profiled"

    # ----------------------------------------------------------- step timing
    def _event(self) -> Any:
        if self.cuda and torch.cuda.is_initialized():
            # A CUDA event per boundary times the GPU-side step period without a sync inside the
            # profiled window (a sync there would show up in the trace as a host sync).
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return None

    def _mark(self, phase: str) -> _Boundary:
        if phase != "unprofiled":
            self._traced = True
        elif self._traced:
            # After a capture CUPTI stays attached and launches stay slower: keep those steps apart.
            phase = "post_capture"
        mark = _Boundary(self.steps, phase, time.perf_counter_ns(), self._event())
        self._pending.append(mark)
        self._resolve(block=False)
        return mark

    def _restart(self, mark: _Boundary) -> None:
        mark.start_wall_ns = time.perf_counter_ns()
        mark.start_event = self._event()

    def _resolve(self, block: bool) -> None:
        if not block and self._profiler_enabled():
            return  # cudaEventQuery/ElapsedTime calls would land in the trace: read events later
        while len(self._pending) >= 2:
            a, b = self._pending[0], self._pending[1]
            if b.event is not None:
                if block:
                    b.event.synchronize()
                elif not b.event.query():
                    return
            self._pending.popleft()
            if b.step == 0:
                continue  # step 0 runs from start-up (imports, model build) to the first boundary
            wall_ms = (b.wall_ns - a.start_wall_ns) / 1e6
            if a.start_event is not None and b.event is not None:
                ms, method = a.start_event.elapsed_time(b.event), "cuda_event"
            else:
                ms, method = wall_ms, "wall"
            self._methods.add(method)
            self._samples.setdefault(b.phase, deque(maxlen=_MAX_SAMPLES)).append(round(ms, 4))
            self._wall_samples.setdefault(b.phase, deque(maxlen=_MAX_SAMPLES)).append(round(wall_ms, 4))

    # ------------------------------------------------------------- exporting
    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        name = f"rank{self.rank}.{time.time_ns()}.pt.trace.json.gz"
        prof.export_chrome_trace(str(self.run_dir / name))
        # Inside prof.step() the profiler already counts the next step; from stop() it does not.
        last = prof.step_num - 1 if self._in_boundary else prof.step_num
        first = min(self._capture_first_step, last)
        self._traces.append(
            {
                "rank": self.rank,
                "file": name,
                "capture": self._capture,
                "first_step": first,
                "last_step": last,
            }
        )
        self._capture += 1
        self._write_meta()
        if self.rank == 0:
            try:
                mf.merge(self.run_dir)
            except Exception as exc:
                _warn(f"manifest merge failed: {exc!r}")

    # -------------------------------------------------------------- on-demand
    def _read_control(self) -> dict[str, Any]:
        try:
            return json.loads(self._control_path.read_text())
        except (OSError, ValueError):
            return {}

    def _on_usr2(self, signum: int, frame: Any) -> None:
        self._usr2 = True

    def _poll_on_demand(self) -> None:
        s = self.steps  # index of the step that starts now
        if self.prof is not None:
            self.prof.step()
            # The capture's schedule returns NONE once its steps are saved: drop the profiler.
            if self.prof.current_action == ProfilerAction.NONE:
                self._stop_profiler()
                self._planned = None
            return
        request = None
        try:
            mtime = self._control_path.stat().st_mtime_ns
        except OSError:
            mtime = 0
        if mtime != self._control_mtime:
            self._control_mtime = mtime
            ctl = self._read_control()
            if int(ctl.get("seq", 0)) > self._handled_seq:
                self._handled_seq = int(ctl["seq"])
                request = (
                    self._agree_start(self.run_dir / f"control.{self._handled_seq}.start", s + 1),
                    int(ctl.get("steps") or self.cfg["active"]),
                )
        if request is None and self._usr2:
            request = (s + 1, int(self.cfg.get("ondemand_steps") or self.cfg["active"]))
        self._usr2 = False
        if request is not None:
            self._planned = request
        if self._planned is not None and s + 1 >= self._planned[0]:
            # One warm-up step (this one) absorbs CUPTI's start-up cost; then the requested steps.
            sched = torch.profiler.schedule(skip_first=s, wait=0, warmup=1, active=self._planned[1], repeat=1)
            self._capture_first_step = s + 1
            self._start_profiler(sched, first_step=s)

    # ------------------------------------------------------------------ settle
    def _poll_settle(self) -> None:
        """Start the schedule once the unprofiled step time has settled (or after `max_s` seconds); on several
        ranks the first rank to get there picks the step, so that every rank records the same steps."""
        s = self.steps  # index of the step that starts now
        cfg, wait = self.cfg["settle"], self.cfg["wait"]
        now = time.monotonic()
        if self._settle_t0 is None and s >= 2:
            # step 0 runs from start-up (imports, model build), step 1 compiles, autotunes and loads kernels (a
            # torch.compile'd step can take minutes): neither counts against --settle-max-s
            self._settle_t0 = now
        elapsed = now - self._settle_t0 if self._settle_t0 is not None else 0.0
        claim = self.run_dir / "settle.start"
        if self._settle_start is None and self.world_size > 1 and claim.exists():
            self._settle_start = self._agree_start(claim, s)
            self._settle_active = self._claimed_active
        ready = self._loaders.ready() if self._loaders is not None else None
        if ready is not None:
            self._ready.append(ready)
            self._period = max(self._period, self._loaders.workers())
        k = self._period
        if self._settle_start is None and s > wait:
            samples = list(self._samples.get("unprofiled", ()))
            drains = st.draining(self._ready, wait, k)  # a flat step time that only lasts while the buffer holds
            done = st.settled(samples, wait, cfg["tol"], k) and not drains
            if done or (self._settle_t0 is not None and elapsed >= cfg["max_s"]):
                if self.world_size > 1:
                    # the rank that decides the step decides the capture's length too, from its own settling
                    # steps: every rank must record the same steps
                    seen = list(self._samples.get("settle", ())) + samples
                    self._settle_start = self._agree_start(claim, s, st.lengthen(seen, self.cfg["active"]))
                    self._settle_active = self._claimed_active
                else:
                    self._settle_start = s
                self._settle_timed_out = not done
                if not done:
                    r = st.trend(samples, wait, k)
                    msg = (f"the step time had not settled after {elapsed:.0f} s ({s} steps"
                           + ("; the DataLoader's prefetch buffer was still draining (the workers are slower "
                              "than the loop)" if drains else
                              f"; the last steps ran at {r:.2f}x the ones before" if r else
                              f"; too few to compare two windows of {st.window(wait, k)}")
                           + "): recording now (--settle-max-s); its unprofiled reference is the last steps before "
                           "the capture")
                    self._note(msg)
        if self._settle_start is None or s < self._settle_start:
            return
        self._settling = False
        # the reference is the two windows compared (and the steps until now, still pending); before them, warm-up
        keep = 2 * st.window(wait, k)
        for store in (self._samples, self._wall_samples):
            u = list(store.get("unprofiled", ()))
            if len(u) > keep:
                store.setdefault("settle", deque(maxlen=_MAX_SAMPLES)).extend(u[:-keep])
                store["unprofiled"] = deque(u[-keep:], maxlen=_MAX_SAMPLES)
        self._settle_info = {"steps": s, "seconds": round(elapsed, 3),
                             "settled": not self._settle_timed_out}
        if self._ready:  # the DataLoaders' buffers at each boundary (batches ready), the two windows compared
            self._settle_info["loader_ready"] = self._ready[-keep:]
            self._settle_info["loader_period"] = k
        if self._loaders is not None:
            self._loaders.uninstall()
            self._loaders = None
        seen = list(self._samples.get("settle", ())) + list(self._samples.get("unprofiled", ()))
        # several ranks: the length the first rank to settle wrote beside the step (`_agree_start`), as each rank
        # sees its own slow steps and all must record the same ones
        n = st.lengthen(seen, self.cfg["active"]) if self.world_size == 1 else self._settle_active
        if n is not None and n > self.cfg["active"]:
            self._settle_info["lengthened"] = {"active": n, "requested": self.cfg["active"]}
            of = (f"{len(seen)} settling steps" if self.world_size == 1 else
                  f"settling steps of rank {self._claimed_by}, the first to settle")
            self._note(f"slow steps recur up to {n} steps apart (more than {st.SLOW_X:g}x the fastest of the "
                       f"{of}): the capture records {n} steps instead of "
                       f"{self.cfg['active']} so that it holds one (--active)")
            self.cfg["active"] = n
        # the schedule as if its wait steps had ended now: the step that starts now is its first warm-up step
        self._start_profiler(self._schedule(skip_first=max(0, self._settle_start - wait)), first_step=s)

    def _agree_start(self, claim: Path, proposal: int, active: int | None = None) -> int:
        """A step agreed on by all ranks through the file `claim`: the first rank to write it decides. The line it
        writes is `START ACTIVE RANK` (ACTIVE 0: the requested capture length); the ACTIVE and RANK read or written
        are left in `_claimed_active` (None for 0) and `_claimed_by`."""
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            for _ in range(100):
                try:
                    text = claim.read_text()
                    if not text.endswith("\n"):  # the writer's line not complete yet
                        raise ValueError(text)
                    start, n, by = (int(x) for x in text.split())
                    self._claimed_active, self._claimed_by = n or None, by
                    return max(start, 0)
                except (OSError, ValueError):
                    time.sleep(0.01)
            self._claimed_active, self._claimed_by = None, self.rank
            return proposal
        # A step of margin lets ranks a step behind still start their warm-up in time.
        start = proposal + 1 if self.world_size > 1 else proposal
        self._claimed_active, self._claimed_by = active, self.rank
        with os.fdopen(fd, "w") as f:
            f.write(f"{start} {active or 0} {self.rank}\n")
        return start

    def _register_pid(self) -> None:
        try:
            mf.register_pid(os.getpid(), self.run_dir)
        except OSError:
            pass

    # ------------------------------------------------------------ time window
    def _start_window_timer(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            _warn("window mode needs the main thread; not profiling")
            return
        delay = float(self.cfg.get("delay_s") or 0.0)
        signal.signal(signal.SIGALRM, self._on_alarm)
        if delay > 0:
            signal.setitimer(signal.ITIMER_REAL, delay)
        else:
            self._on_alarm(signal.SIGALRM, None)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self.prof is None and self._capture == 0:
            self._capture_first_step = self.steps
            self._start_profiler(lambda _step: ProfilerAction.RECORD, first_step=self.steps)
            signal.setitimer(signal.ITIMER_REAL, float(self.cfg["window_s"]))
        elif self.prof is not None:
            if self._in_boundary:
                self._stop_requested = True  # the alarm interrupted prof.step(): stop right after it
            else:
                self._stop_profiler()  # (RECORD, None) stops the trace and exports it

    # ------------------------------------------------------------------ exit
    def finish(self) -> None:
        if self.cfg.get("window_s") and threading.current_thread() is threading.main_thread():
            signal.setitimer(signal.ITIMER_REAL, 0)  # an alarm left armed would kill the exiting process
        with self._lock:
            try:
                if self.prof is not None and self.prof_running:
                    action = self.prof.current_action
                    if action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE) and not self.cfg.get(
                        "window_s"
                    ):
                        msg = f"the job ended inside a capture (step {self.steps}): its trace is partial"
                        self._warnings.append(msg)
                        _warn(msg)
                    self._stop_profiler()
            except Exception as exc:
                _warn(f"stopping the profiler failed: {exc!r}")
            if self.cuda and torch.cuda.is_initialized():
                self._resolve(block=True)
            else:
                self._resolve(block=False)
            if self.steps == 0 and not self.cfg.get("window_s"):
                msg = (
                    "no step boundary seen (no optimizer.step() and no collectors.step()): "
                    "nothing was captured; use collectors.step() or --window-s"
                )
                self._note(msg)
            elif self._settling:  # the job ended before its step time settled (and before --settle-max-s)
                r = st.trend(list(self._samples.get("unprofiled", ())), self.cfg["wait"], self._period)
                msg = (f"the job ended after {self.steps} steps while its step time was still settling (--settle"
                       + (f"; the last steps ran at {r:.2f}x the ones before" if r else "") + "): nothing was "
                       "captured; run more steps, or --no-settle to record after --wait steps regardless")
                self._note(msg)
            self._write_meta(final=True)
            if self.cfg.get("on_demand"):
                mf.unregister_pid(os.getpid())
            if self.rank == 0:
                try:
                    mf.merge(self.run_dir)
                except Exception as exc:
                    _warn(f"manifest merge failed: {exc!r}")

    def _device_info(self) -> dict[str, Any]:
        if "device" in self._cached:
            return self._cached["device"]
        info: dict[str, Any] = {"device": "cpu", "gpu_name": None}
        if self.cuda and torch.cuda.is_initialized():  # never initialise CUDA ourselves
            dev = torch.cuda.current_device()
            info = {"device": f"cuda:{dev}", "gpu_name": torch.cuda.get_device_name(dev)}
            self._cached["device"] = info
        return info

    def _versions(self) -> dict[str, Any]:
        if "versions" not in self._cached:
            self._cached["versions"] = self._read_versions()
        return self._cached["versions"]

    def _read_versions(self) -> dict[str, Any]:
        v: dict[str, Any] = {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": None,
            "nccl": None,
        }
        try:
            v["cudnn"] = torch.backends.cudnn.version() if self.cuda else None
            if self.cuda:
                nccl = torch.cuda.nccl.version()
                v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            pass
        return v

    def _write_meta(self, final: bool = False) -> None:
        samples = {k: list(v) for k, v in self._samples.items()}
        walls = {k: list(v) for k, v in self._wall_samples.items()}
        meta = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            **_cpus(),
            "argv": sys.argv,
            **self._device_info(),
            "activities": ["cpu", "cuda"] if self.cuda else ["cpu"],
            "versions": self._versions(),
            "finished": final,
            "step_source": self.step_source or ("window" if self.cfg.get("window_s") else None),
            "steps_seen": self.steps,
            "step_time_method": "cuda_event" if "cuda_event" in self._methods else "wall",
            "unprofiled_step_ms": samples.get("unprofiled", []),
            "profiled_step_ms": samples.get("profiled", []),
            "post_capture_step_ms": samples.get("post_capture", []),
            # "1": CUPTI was finalized after each capture, so the post-capture steps run at the unprofiled pace
            "teardown_cupti": os.environ.get("TEARDOWN_CUPTI"),
            "warmup_step_ms": samples.get("warmup", []),
            # the unprofiled steps before the step time settled (--settle), and when it did
            "settle_step_ms": samples.get("settle", []),
            "settle": self._settle_info,
            "unprofiled_step_wall_ms": walls.get("unprofiled", []),
            "profiled_step_wall_ms": walls.get("profiled", []),
            # (a loader-fed loop's: the mean over whole periods of its workers, manifest.reference_ms)
            "unprofiled_step_ms_median": mf.reference_ms({"unprofiled_step_ms": samples.get("unprofiled"),
                                                          "settle": self._settle_info}),
            "profiled_step_ms_median": mf.reference_ms({"profiled_step_ms": samples.get("profiled"),
                                                        "settle": self._settle_info}, "profiled_step_ms"),
            "traces": self._traces,
            "warnings": self._warnings,
            "terminated_by": self._terminated,
        }
        self._meta_written = time.monotonic()
        try:
            mf.write_json_atomic(self._meta_path, meta)
        except OSError as exc:
            _warn(f"cannot write {self._meta_path}: {exc!r}")


def _cpus() -> dict[str, int | None]:
    """The host's CPUs as this rank sees them: `cpu_count` (the machine's logical CPUs) and `cpu_affinity` (those
    the process may run on, which its DataLoader workers inherit): how many worker processes can run at once."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        affinity = None
    return {"cpu_count": os.cpu_count(), "cpu_affinity": affinity}


class _ModuleAnnotator:
    """Wraps every nn.Module call in a `module::<qualified.path>` record_function range.

    Global forward hooks see every module without touching the user's model. A module called
    while no other module call is open is a root; names come from that root's named_modules(),
    computed once per root, so `blocks.3.attn` reads as in the user's code. Ranges are only
    opened while the profiler records, so wait steps pay two cheap Python calls per module.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._enabled = torch._C._autograd._profiler_enabled
        self._compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._enter = torch.ops.profiler._record_function_enter_new
        self._exit = torch.ops.profiler._record_function_exit._RecordFunction

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        register_module_forward_pre_hook(self._pre)
        try:
            register_module_forward_hook(self._post, always_call=True)
        except TypeError:  # older torch: no always_call; _post copes with unbalanced stacks
            register_module_forward_hook(self._post)

    def _stack(self) -> list:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def _name(self, root: Any, module: Any) -> str:
        names = self._names.get(root)
        if names is None or (module is not root and id(module) not in names):
            # First call of this root, or a submodule created after the first call.
            cls = type(root).__name__
            names = {id(m): MODULE_PREFIX + (n or cls) for n, m in root.named_modules()}
            self._names[root] = names
            if id(module) not in names:
                names[id(module)] = MODULE_PREFIX + type(module).__name__
        return names[id(module)]

    def _pre(self, module: Any, args: Any) -> None:
        if self._compiling():
            return  # keep Dynamo from tracing our hook into compiled graphs
        stack = self._stack()
        handle = None
        if self._enabled():
            root = stack[0][1] if stack else module
            # The same op record_function uses: a `user_annotation` range (cpu_op would be miscounted as op time).
            handle = self._enter(self._name(root, module), None)
        stack.append((id(module), module if not stack else stack[0][1], handle))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._compiling():
            return
        stack = self._stack()
        mid = id(module)
        if not any(e[0] == mid for e in stack):
            return
        while stack:  # also closes ranges left open by a module whose forward raised
            eid, _root, handle = stack.pop()
            if handle is not None:
                try:
                    self._exit(handle)
                except Exception:
                    pass
            if eid == mid:
                break
