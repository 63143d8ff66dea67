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


def capture_step(model: torch.nn.Module, loss_of, opt: torch.optim.Optimizer, amp: bool) -> tuple:
    """One training step (forward `loss_of(model)` under bf16 autocast when `amp`, backward, `opt.step()`) captured
    once in a CUDA graph: three warm-up steps on a side stream first, as the CUDA-graph docs ask, then the capture
    with the gradients unset (the captured backward allocates .grad from the graph's pool). (graph, the captured
    step's loss tensor, which each replay rewrites)."""

    def step() -> torch.Tensor:
        # autocast's weight cache would hold tensors made during capture: off, as the CUDA-graph docs ask
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp, cache_enabled=False):
            loss = loss_of(model)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = step()
    return graph, loss
