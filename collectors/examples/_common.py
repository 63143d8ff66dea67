"""Shared bits of the example workloads: device choice and a step timer that needs no profiler."""

from __future__ import annotations

import json
import os
import statistics
import time

import torch


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class StepTimer:
    """Times step periods like the collector does: CUDA events on a GPU (no sync), wall clock on CPU."""

    def __init__(self, dev: torch.device) -> None:
        self.cuda = dev.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def report(self, name: str, skip: int = 1) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
            ms = [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:], strict=False)]
        else:
            ms = [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]
        ms = ms[skip:] or ms  # the first steps include cuDNN/cuBLAS autotuning and allocator growth
        out = {
            "name": name,
            "step_ms_median": round(statistics.median(ms), 4) if ms else None,
            "steps": len(ms),
        }
        # (the first 200 steps; STEP_TIME_MAX=N prints N: a warm-up curve over a long run)
        out["step_ms"] = [round(x, 3) for x in ms[: int(os.environ.get("STEP_TIME_MAX", "200"))]]
        print("STEP_TIME " + json.dumps(out), flush=True)
        return out
