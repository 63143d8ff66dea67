"""Record torch.compile on the CPU (Inductor's C++ backend): a stable compiled training step, and one whose batch
size changes every step under `dynamic=False`, so that every step recompiles.

    python -m collectors.examples.cpu_compile OUT_DIR

Writes `compiled_stable.json.gz` (compiled three steps before the profiler starts: no compile inside the recorded
steps, the recompile rule's negative control) and `recompile_every_step.json.gz` (batch 8 + i at step i: Dynamo's
shape guard fails each step). Schedule wait 1 / warmup 1 / active 3, exported by `on_trace_ready`.
sample_traces/cpu_compile/MANIFEST.md says what each holds.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))


def _record(path: str, step) -> None:
    tmp = path + ".tmp.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(tmp)) as p:
        for i in range(5):  # the 5th step() ends the active steps: the handler runs once
            step(i)
            p.step()
    with open(tmp, "rb") as f, gzip.open(path, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(tmp)


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(64, 256)
    m = torch.compile(_model())
    opt = torch.optim.Adam(m.parameters())

    def stable(_i: int) -> None:
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()

    for i in range(3):  # compiled (forward and backward) before the recording
        stable(i)
    _record(os.path.join(out, "compiled_stable.json.gz"), stable)
    m2 = torch.compile(_model(), dynamic=False)

    def new_shape(i: int) -> None:
        m2(torch.randn(8 + i, 256)).sum().backward()

    _record(os.path.join(out, "recompile_every_step.json.gz"), new_shape)
    print(f"torch {torch.__version__}: wrote {sorted(os.listdir(out))}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sample_traces/cpu_compile")
