"""traceview: PyTorch profiler trace analyzer and bottleneck classifier."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import TraceError

__version__ = "0.1.0"
__all__ = ["Job", "Trace", "TraceError", "TraceMeta", "load", "load_file", "__version__"]

if TYPE_CHECKING:
    from .ingest.loader import load, load_file
    from .model import Job, Trace, TraceMeta


def __getattr__(name: str) -> Any:
    # imported on first use: `traceview.cli.main` starts reading the trace while polars imports
    if name in ("load", "load_file"):
        from .ingest import loader

        return getattr(loader, name)
    if name in ("Job", "Trace", "TraceMeta"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'traceview' has no attribute {name!r}")
