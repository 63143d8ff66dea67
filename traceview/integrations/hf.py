"""A Hugging Face `TrainerCallback` that profiles a window of training steps with traceview's collector: the
trace and the manifest with unprofiled vs profiled step times, as `traceview collect` writes them, in
`out/name/`."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from ._session import Window


class TraceviewCallback(Window, TrainerCallback):
    """Profile training steps `wait + warmup` .. `wait + warmup + active - 1` (0-based), `repeat` times.

    >>> trainer = Trainer(..., callbacks=[TraceviewCallback("tv_traces", wait=2, warmup=1, active=3)])
    then `traceview analyze tv_traces/<name>`."""

    LAUNCHER = "hf-trainer"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.boundary()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.end()
