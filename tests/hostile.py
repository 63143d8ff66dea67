"""Small generated traces and an in-process CLI runner for the hostile-input tests (issue 13).

`mini_trace` writes a tiny but complete Kineto trace: per step a ProfilerStep annotation, one op, its
launch and the kernel it launched (linked by correlation and External id), kernel 60 µs of a 100 µs
step. Its numbers are known by construction, so a broken variant can be checked against the clean one.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import traceview.cli.main as cli
from traceview.ingest import fastscan

STEP_US, KERNEL_US = 100, 60


def ev(**kw: Any) -> dict:
    return {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 1, **kw}


def mini_trace(steps: int = 3, kernel_args: dict | None = None, t0: float = 1_000.0) -> dict:
    evs = []
    for s in range(steps):
        t = t0 + s * STEP_US
        evs.append(ev(name=f"ProfilerStep#{s}", cat="user_annotation", ts=t, dur=STEP_US))
        evs.append(ev(name="aten::mm", ts=t + 5, dur=20, args={"External id": 10 + s}))
        evs.append(ev(name="cudaLaunchKernel", cat="cuda_runtime", ts=t + 10, dur=5,
                      args={"correlation": 100 + s, "External id": 10 + s}))
        ka = {"correlation": 100 + s, "External id": 10 + s, "device": 0, "stream": 7, "grid": [1, 1, 1],
              "block": [128, 1, 1], "registers per thread": 32}
        ka.update(kernel_args or {})
        evs.append(ev(name="gemm_kernel", cat="kernel", pid=0, tid=7, ts=t + 20, dur=KERNEL_US, args=ka))
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": evs}


def dump(obj: Any) -> bytes:
    return obj if isinstance(obj, bytes) else json.dumps(obj).encode()


def write(path: Path, obj: Any, gz: bool = False) -> Path:
    data = dump(obj)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


PATHS = ["c", "py"]


def use_path(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Select the C scanner ("c") or the pure-Python msgspec path ("py") for the loads that follow."""
    if kind == "c" and fastscan._scan is None:
        pytest.skip("C extension traceview.ingest._scan not built")
    monkeypatch.setenv("TRACEVIEW_NO_C", "0" if kind == "c" else "1")


def run_cli(capsys: pytest.CaptureFixture, *args: Any) -> tuple[int, str, str]:
    """`traceview ARGS` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def analyze_json(capsys: pytest.CaptureFixture, *args: Any) -> tuple[int, dict | None, str]:
    rc, out, err = run_cli(capsys, "analyze", *args, "--format", "json")
    return rc, (json.loads(out) if out.strip() else None), err


def error_lines(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.strip()]


def nested_modules(levels: int, name: str = "nn.Module: B_{i}", cat: str = "python_function") -> dict:
    """`mini_trace` with `levels` events nested inside each other in the first step (issue 33), by default
    `nn.Module: B_i` Python frames: event i opens at 1001 + i·0.001 µs and lasts 290 − 280·i/levels µs, so
    each one closes before its parent."""
    t = mini_trace()
    t["traceEvents"] += [ev(name=name.format(i=i), cat=cat, ts=1001 + i * 0.001, dur=290 - 280 * i / levels)
                         for i in range(levels)]
    return t


def flat_modules(levels: int) -> dict:
    """`nested_modules`' frames side by side instead of nested (each closes before the next opens): the same events,
    no nesting (the baseline of the nesting's memory)."""
    t = mini_trace()
    t["traceEvents"] += [ev(name=f"nn.Module: B_{i}", cat="python_function", ts=1001 + i * 0.001, dur=0.0005)
                         for i in range(levels)]
    return t
