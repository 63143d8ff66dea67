"""A Lightning `Callback` that profiles a window of training steps with traceview's collector: the trace
(`rank<R>.<ts>.pt.trace.json.gz`) and the manifest with unprofiled vs profiled step times, as `traceview collect`
writes them, in `out/name/`. Works with `lightning` (2.x) or the older `pytorch_lightning` package."""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef]

from ._session import Window


class TraceviewCallback(Window, Callback):
    """Profile training steps `wait + warmup` .. `wait + warmup + active - 1` (0-based), `repeat` times.

    >>> trainer = Trainer(callbacks=[TraceviewCallback("tv_traces", wait=2, warmup=1, active=3)])
    then `traceview analyze tv_traces/<name>`."""

    LAUNCHER = "lightning"

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.begin()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.boundary()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.end()
