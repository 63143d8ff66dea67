#!/usr/bin/env python3
"""Write a synthetic Kineto trace of N tiny events (for the "10 M tiny events: linear, bounded memory" benchmark).

    python tools/tiny_events.py OUT.json[.gz] --events 10000000 [--ops-per-step 1000]

Each op is three events in the real layout: an `aten::add` cpu_op, its `cudaLaunchKernel` runtime call and the
kernel it launches (linked by `correlation`, the op by `External id`), on one thread and one stream; ops are
grouped into `ProfilerStep#N` annotations. Times are exact integers of µs, 1 µs ops 2 µs apart. Short names and
small args: the point is many events per byte, the opposite of the tiled real traces. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
from typing import IO, Any

HEAD = ('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "synthetic", "totalGlobalMem": 1, '
        '"computeMajor": 9, "computeMinor": 0, "numSms": 132}], "traceEvents": [\n'
        '{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},\n'
        '{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}')
OP = (',\n{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": {t}, "dur": 3, '
      '"args": {{"External id": {k}}}}}'
      ',\n{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {t1}, "dur": 1, '
      '"args": {{"External id": {k}, "correlation": {k}}}}}'
      ',\n{{"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": {t2}, "dur": 1, '
      '"args": {{"External id": {k}, "correlation": {k}, "device": 0, "stream": 7}}}}')
STEP = (',\n{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": {t}, '
        '"dur": {d}, "args": {{"External id": {k}}}}}')


def _open(path: str) -> IO[Any]:
    return gzip.open(path, "wt", compresslevel=1) if path.endswith(".gz") else open(path, "w")


def write(path: str, events: int, ops_per_step: int) -> int:
    """Write the trace; returns the number of events written (steps included)."""
    n_ops = max(1, events // 3)
    n = 0
    with _open(path) as fh:
        fh.write(HEAD)
        k, t = 1, 1000
        for s in range(0, n_ops, ops_per_step):
            m = min(ops_per_step, n_ops - s)
            fh.write(STEP.format(s=s // ops_per_step, t=t, d=4 * m, k=k))
            k += 1
            fh.write("".join(OP.format(t=t + 4 * i, t1=t + 4 * i + 1, t2=t + 4 * i + 2, k=k + i) for i in range(m)))
            k += m
            t += 4 * m
            n += 1 + 3 * m
        fh.write("\n]}\n")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--ops-per-step", type=int, default=1000)
    a = ap.parse_args()
    print(write(a.out, a.events, a.ops_per_step), "events ->", a.out)


if __name__ == "__main__":
    main()
