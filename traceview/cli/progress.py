"""A progress bar on stderr for `traceview analyze`: reading, decoding and analyzing each file.

Shown only when stderr is a terminal, the report is not JSON, and the run lasts longer than `DELAY_S`
(`TRACEVIEW_PROGRESS_DELAY` overrides it, in seconds): a quick run prints nothing, and stdout only ever
carries the report. The bar is transient: it disappears when the run ends.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

DELAY_S = 1.0


def _delay() -> float:
    try:
        return max(float(os.environ.get("TRACEVIEW_PROGRESS_DELAY", DELAY_S)), 0.0)
    except ValueError:
        return DELAY_S


class FileProgress:
    """Counts files; `stage(path, what)` names what runs now. The rich display starts after the delay, from a
    timer thread, so a fast run never draws it."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self._task = self._prog.add_task("starting", total=max(total, 1))
        self._lock = threading.Lock()
        self._started = self._stopped = False
        self._timer = threading.Timer(_delay(), self._start)
        self._timer.daemon = True
        if _delay() == 0:  # at once, on this thread (tests, or a user who always wants it)
            self._start()
        else:
            self._timer.start()

    def _start(self) -> None:
        with self._lock:
            if not self._stopped:
                self._prog.start()
                self._started = True

    def stage(self, path: str | Path, what: str) -> None:
        p = Path(path)
        try:
            size = f" ({p.stat().st_size / 1e6:,.1f} MB)" if what == "reading" else ""
        except OSError:
            size = ""
        self._prog.update(self._task, description=f"{what} {p.name}{size}")
        self._refresh()

    def advance(self) -> None:
        self._prog.advance(self._task)
        self._refresh()

    def _refresh(self) -> None:
        # draw each stage when it begins, not only at the display's next tick: a stage can be shorter than that
        with self._lock:
            if self._started and not self._stopped:
                self._prog.refresh()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._timer.cancel()
            if self._started:
                self._prog.stop()


def for_analyze(paths: list[str], fmt: str, max_bytes: int | None = None) -> tuple[FileProgress | None, Callable[[str], None] | None,
                                                       Callable[[Path], object] | None]:
    """(progress, on_trace, load) for report.analyze, or Nones when no bar should be shown."""
    if fmt == "json" or not sys.stderr.isatty():
        return None, None, None
    from ..errors import TraceError
    from ..ingest.loader import input_files, load_file

    total = 0
    for p in paths:
        try:
            total += len(input_files(p))
        except TraceError:
            pass
    prog = FileProgress(total)
    seen: list[str] = []

    def on_trace(path: str) -> None:
        if seen:
            prog.advance()
        seen.append(path)
        prog.stage(path, "reading")

    def load(path: Path):  # noqa: ANN202 - a Trace
        t = (load_file(path, on_stage=lambda what: prog.stage(path, what)) if max_bytes is None
             else load_file(path, max_bytes, on_stage=lambda what: prog.stage(path, what)))
        prog.stage(path, "analyzing")
        return t

    return prog, on_trace, load
