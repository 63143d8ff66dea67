from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


@functools.cache
def load(rel: str):
    """Each sample trace is loaded once per test session."""
    import traceview

    return traceview.load(SAMPLES / rel)


@functools.cache
def raw_events(rel: str) -> list[dict]:
    """The trace decoded independently (stdlib json), for cross-checks."""
    with gzip.open(SAMPLES / rel, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.fixture(scope="session")
def samples() -> Path:
    return SAMPLES
