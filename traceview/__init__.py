"""traceview: PyTorch profiler trace analyzer and bottleneck classifier."""

from __future__ import annotations

from .errors import TraceError
from .loader import load, load_file
from .model import Job, Trace, TraceMeta

__version__ = "0.1.0"
__all__ = ["Job", "Trace", "TraceError", "TraceMeta", "load", "load_file", "__version__"]
