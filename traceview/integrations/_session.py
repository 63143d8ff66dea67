"""The collector's profiling session (`traceview collect`'s `collectors.runtime.Session`) started by a framework
hook instead of the launcher: same schedule, same trace names, same manifest with unprofiled vs profiled step
times measured the same way (CUDA events per step on a GPU, wall clock otherwise)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def start(
    out: str | Path,
    name: str | None,
    wait: int,
    warmup: int,
    active: int,
    repeat: int = 1,
    *,
    stack: bool = False,
    memory: bool = False,
    shapes: bool = False,
    modules: bool = False,
    settle: bool | None = None,
    launcher: str = "integration",
) -> Any:
    """Start profiling this process into `out/name/` (name: a time stamp when None); the caller marks each
    step's end with `.boundary("explicit")` and calls `.finish()` at the end. `settle`: as `traceview collect
    --settle` (None: on unless $TRACEVIEW_SETTLE=0). Returns the Session."""
    from collectors import manifest as mf
    from collectors import runtime
    from collectors import settle as settle_mod

    run_dir = Path(out) / (name or time.strftime("%Y%m%d-%H%M%S"))
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "run": run_dir.name,
        "run_dir": str(run_dir),
        "wait": wait,
        "warmup": warmup,
        "active": active,
        "repeat": repeat,
        "settle": settle_mod.config(settle),
        "stack": stack,
        "memory": memory,
        "shapes": shapes,
        "modules": modules,
        "on_demand": False,
        "ondemand_steps": None,
        "window_s": None,
        "delay_s": None,
    }
    if int(os.environ.get("RANK", "0")) == 0 and not (run_dir / mf.MANIFEST_NAME).exists():
        mf.write_json_atomic(run_dir / mf.MANIFEST_NAME, mf.base_manifest(run_dir, cfg, sys.argv, launcher))
    session = runtime.Session(cfg)
    # steps end at the framework's batch-end hook, not at the optimizer's step (a Session that saw an explicit
    # boundary ignores the optimizer hook; set before the first optimizer step could count)
    session._explicit = True
    session.start()
    return session


def stop(session: Any) -> None:
    """Finish the session (stop the profiler, write the manifest) now, not again at exit."""
    import atexit

    session.finish()
    atexit.unregister(session.finish)


class Window:
    """A framework callback's profiling window (mixed into the Lightning and Hugging Face callbacks): where to
    write, the schedule, the collector's options and the running session; the callback calls `begin()` at train
    start, `boundary()` at each batch's end and `end()` at train end. `LAUNCHER` names the framework in the
    manifest."""

    LAUNCHER = "integration"

    def __init__(
        self,
        out: str | Path = "tv_traces",
        name: str | None = None,
        wait: int = 2,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        **options: Any,
    ) -> None:
        self.out, self.name = out, name
        self.schedule = (wait, warmup, active, repeat)
        self.options = options  # stack, memory, shapes, modules, settle: as `traceview collect`'s flags
        self.session: Any = None
        self.run_dir: Path | None = None

    def begin(self) -> None:
        self.session = start(self.out, self.name, *self.schedule, launcher=self.LAUNCHER, **self.options)
        self.run_dir = self.session.run_dir

    def boundary(self) -> None:
        if self.session is not None:
            self.session.boundary("explicit")

    def end(self) -> None:
        if self.session is not None:
            stop(self.session)
            self.session = None
