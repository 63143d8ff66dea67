"""A Hugging Face `TrainerCallback` that profiles a window of training steps with traceview's collector: the
trace and the manifest with unprofiled vs profiled step times, as `traceview collect` writes them, in
`out/name/`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from . import _session


class TraceviewCallback(TrainerCallback):
    """Profile training steps `wait + warmup` .. `wait + warmup + active - 1` (0-based), `repeat` times.

    >>> trainer = Trainer(..., callbacks=[TraceviewCallback("tv_traces", wait=2, warmup=1, active=3)])
    then `traceview analyze tv_traces/<name>`."""

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
        self.options = options
        self.session: Any = None
        self.run_dir: Path | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session = _session.start(
            self.out, self.name, *self.schedule, launcher="hf-trainer", **self.options
        )
        self.run_dir = self.session.run_dir

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            self.session.boundary("explicit")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is not None:
            _session.stop(self.session)
            self.session = None
