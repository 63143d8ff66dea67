"""Record the traces a profiler used the common wrong ways writes (CPU only, any torch build), for the loader's tests.

    python -m collectors.examples.profiler_misuse OUT_DIR

Each trace is what a real `torch.profiler` run writes when the training loop and the profiler's schedule disagree
(sample_traces/profiler_misuse/MANIFEST.md says what each holds):
- `schedule_exit_midcycle.json.gz`: the loop leaves `with profile(schedule=...)` inside a recording cycle and the
  trace is exported after the block: the last `ProfilerStep#N` (opened by the last `step()`) encloses nothing.
- `schedule_exit_midcycle_stack.json.gz`: the same with `with_stack=True`: the last step holds the Python frames of
  the profiler's own `stop`, and no op.
- `handler_overwritten.json.gz`: `on_trace_ready` writes one fixed file name; the loop ends one step into a new
  cycle, so the handler runs again at the block's end and writes a trace of one empty step over the full one.
- `exported_after_schedule.json.gz`: `export_chrome_trace` after the block, with `with_stack=True`, once the
  schedule had already handed its active steps on: only the profiler's own `stop` in Python is left.
- `threads_not_recorded.json.gz`: the work runs in threads started inside `profile()`: nothing is recorded.
- `execution_trace.json.gz`: `ExecutionTraceObserver`'s graph of ops (Chakra schema, no timings), which users
  upload in place of the Kineto trace.

- `repeat_cycles/`: `schedule(wait=1, warmup=1, active=2, repeat=2)` with `tensorboard_trace_handler`: two files of
  one process (`<host>_<pid>.<time>.pt.trace.json.gz`), one per cycle, and no rank: not the ranks of a job.

And two a profiler used without a `schedule` writes (no `ProfilerStep#N` annotations):
- `no_schedule_train.json.gz`: `with profile():` around 6 training steps (AdamW): only `Optimizer.step#AdamW.step`
  marks where each step ends.
- `no_schedule_annotated.json.gz`: inference over 5 batches, each in `record_function(f"batch_{i}")`.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import threading

import torch
from torch import nn
from torch.profiler import (
    ExecutionTraceObserver,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)

CPU = [ProfilerActivity.CPU]


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.LayerNorm(512), nn.Linear(512, 10))


def _loop(prof, steps: int) -> None:
    m = _model()
    opt = torch.optim.AdamW(m.parameters())
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    for _ in range(steps):
        loss = nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if prof is not None:
            prof.step()


def _gz(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, "tmp.json")
    torch.manual_seed(0)
    with profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=3)) as p:  # cycles of 5 steps
        _loop(p, 9)  # the second cycle records steps 7 and 8 and opens #9, which the block's end closes at once
    p.export_chrome_trace(tmp)
    _gz(tmp, os.path.join(out, "schedule_exit_midcycle.json.gz"))
    with profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=3), with_stack=True) as p:
        _loop(p, 9)  # the same with Python stacks: #9 then holds the profiler's own `stop` frames, no op
    p.export_chrome_trace(tmp)
    _gz(tmp, os.path.join(out, "schedule_exit_midcycle_stack.json.gz"))

    with profile(activities=CPU, schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda q: q.export_chrome_trace(tmp)) as p:
        _loop(p, 5)  # steps 1-3 written at the 4th step(); step 4 starts a cycle the block's end writes over them
    _gz(tmp, os.path.join(out, "handler_overwritten.json.gz"))

    with profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=3), with_stack=True) as p:
        _loop(p, 6)  # the active steps 2-4 went to a (missing) on_trace_ready at the 5th step()
    p.export_chrome_trace(tmp)
    _gz(tmp, os.path.join(out, "exported_after_schedule.json.gz"))

    with profile(activities=CPU, schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(os.path.join(out, "repeat_cycles"), use_gzip=True)) as p:
        _loop(p, 8)

    m = _model().eval()
    x = torch.randn(32, 256)

    def infer() -> None:
        with torch.no_grad():
            for _ in range(20):
                m(x)

    with profile(activities=CPU) as p:
        ts = [threading.Thread(target=infer) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    p.export_chrome_trace(tmp)
    _gz(tmp, os.path.join(out, "threads_not_recorded.json.gz"))

    with profile(activities=CPU) as p:
        _loop(None, 6)
    p.export_chrome_trace(tmp)
    _gz(tmp, os.path.join(out, "no_schedule_train.json.gz"))

    with profile(activities=CPU, record_shapes=True) as p, torch.no_grad():
        for i in range(5):
            with record_function(f"batch_{i}"):
                m(x)
    p.export_chrome_trace(tmp)
    _gz(tmp, os.path.join(out, "no_schedule_annotated.json.gz"))

    et = ExecutionTraceObserver().register_callback(tmp)
    et.start()
    _loop(None, 1)
    et.stop()
    et.unregister_callback()
    _gz(tmp, os.path.join(out, "execution_trace.json.gz"))
    print(f"torch {torch.__version__}: wrote {sorted(os.listdir(out))}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sample_traces/profiler_misuse")
