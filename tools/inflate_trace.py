#!/usr/bin/env python3
"""Make a big, realistic Kineto trace by tiling a real one in time (for benchmarks; not ground truth).

    python tools/inflate_trace.py sample_traces/gpu_h200_real/hf_gpt2_train_bf16.json.gz big.json.gz --target-mb 130
    python tools/inflate_trace.py IN.json[.gz] OUT.json[.gz] --copies 8

Every event except metadata (`ph` "M") is written `copies` times; copy k is shifted by k x the input's span and
gets fresh ids (correlation, External id, flow id, Python id / parent id / module id, Record function id,
Ev Idx), so every link stays one-to-one, and ProfilerStep numbers keep increasing. Metadata events and the
top-level keys (deviceProperties, distributedInfo, ...) are kept once. `--target-mb` picks the number of copies
that makes at least that many MB of uncompressed JSON. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from typing import IO, Any

ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id", "Python module id",
           "Record function id", "Ev Idx")
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _open(path: str, mode: str) -> IO[Any]:
    if path.endswith(".gz"):
        return gzip.open(path, mode, compresslevel=1) if "w" in mode else gzip.open(path, mode)
    return open(path, mode)


def _span(events: list[dict]) -> tuple[float, float]:
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    if not timed:
        sys.exit("inflate_trace: no timed events in the input")
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur") or 0) for e in timed)
    return t0, t1


def _id_span(events: list[dict]) -> int:
    top = 1
    for e in events:
        args = e.get("args") or {}
        for k in ID_ARGS:
            v = args.get(k)
            if isinstance(v, int):
                top = max(top, abs(v) + 1)
        if isinstance(e.get("id"), int):
            top = max(top, e["id"] + 1)
    return top


def copy_event(e: dict, k: int, shift: float, id_span: int, step_span: int) -> dict:
    """Event `e` as it appears in copy k."""
    if k == 0:
        return e
    c = dict(e)
    if isinstance(c.get("ts"), (int, float)):
        c["ts"] = c["ts"] + k * shift
    if isinstance(c.get("id"), int):
        c["id"] = c["id"] + k * id_span
    args = c.get("args")
    if isinstance(args, dict):
        a = dict(args)
        for key in ID_ARGS:
            v = a.get(key)
            if isinstance(v, int) and v > 0:  # 0 / -1 mean "none"
                a[key] = v + k * id_span
        c["args"] = a
    m = STEP.match(str(c.get("name", "")))
    if m and step_span:
        c["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_span}"
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="a Kineto trace (.json or .json.gz)")
    ap.add_argument("dst", help="output path (.json.gz writes gzip)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--copies", type=int, default=None, help="number of copies of the input's events (default 8)")
    how.add_argument("--target-mb", type=float, default=None,
                     help="make at least this many MB of uncompressed JSON (picks --copies)")
    a = ap.parse_args(argv)
    with _open(a.src, "rb") as fh:
        raw = fh.read()
    doc = json.loads(raw)
    events = doc.get("traceEvents") or []
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    if a.target_mb:  # the size of one copy as written (compact separators), not as read
        one = sum(len(json.dumps(e)) + 2 for e in body)
        copies = max(1, math.ceil(a.target_mb * 1e6 / one))
    else:
        copies = a.copies or 8
    t0, t1 = _span(body)
    shift = (t1 - t0) * 1.001 + 1.0
    id_span = _id_span(body)
    steps = [int(m.group(1)) for e in body if (m := STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    rest = {k: v for k, v in doc.items() if k != "traceEvents"}
    with _open(a.dst, "wt") as out:
        out.write("{")
        for key, val in rest.items():
            out.write(f"{json.dumps(key)}: {json.dumps(val)}, ")
        out.write('"traceEvents": [\n')
        first = True
        for e in meta:
            out.write(("" if first else ",\n") + json.dumps(e))
            first = False
        for k in range(copies):  # one copy at a time: memory stays at the input's size
            for e in body:
                out.write(("" if first else ",\n") + json.dumps(copy_event(e, k, shift, id_span, step_span)))
                first = False
        out.write("\n]}\n")
    print(f"inflate_trace: {a.dst}: {copies} copies of {len(body)} events, {step_span * copies} ProfilerSteps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
