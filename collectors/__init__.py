"""traceview collectors: run a script under torch.profiler without editing it (`traceview collect`).

Scripts normally need nothing from here: optimizer steps mark step boundaries automatically. Loops
without an optimizer (inference, evaluation) mark them with one of:

    import collectors
    for batch in loader:
        model(batch)
        collectors.step()                 # end of one step

    for batch in collectors.steps(loader):  # the same, as an iterator wrapper
        model(batch)

    with collectors.step_context():       # one step per `with` block
        model(batch)

All three are no-ops when the script does not run under `traceview collect`, and importing this
package never imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["step", "steps", "step_context", "is_active"]

T = TypeVar("T")


def _session() -> Any:
    # Only a process attached by the bootstrap has imported the runtime (and torch) already.
    runtime = sys.modules.get("collectors.runtime")
    return runtime.current() if runtime is not None else None


def is_active() -> bool:
    """True when this process is being profiled by `traceview collect`."""
    return _session() is not None


def step() -> None:
    """Mark the end of one step. Once called, optimizer steps no longer count as boundaries."""
    session = _session()
    if session is not None:
        session.boundary("explicit")


@contextmanager
def step_context() -> Iterator[None]:
    """One step per `with` block (the boundary is at the block's end, also on an exception)."""
    try:
        yield
    finally:
        step()


def steps(iterable: Iterable[T]) -> Iterator[T]:
    """Yield from `iterable`, marking a step boundary after each item's loop body."""
    for item in iterable:
        yield item
        step()
