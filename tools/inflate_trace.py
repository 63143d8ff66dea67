#!/usr/bin/env python3
"""Make a large, realistic Kineto trace by tiling a real one in time.

    python3 inflate_trace.py IN.json[.gz] OUT.json[.gz] --copies N

Every non-metadata event is repeated N times; copy k is shifted by k x (span of the input) and gets fresh
ids (correlation, External id, flow id, Python id/parent id, Record function id, Ev Idx), so links stay
one-to-one and ProfilerStep numbers keep increasing. Metadata (ph "M") and top-level keys are kept once.
Use it for parse and analysis benchmarks; it is not a source of ground truth.
"""
import argparse
import gzip
import json
import re

ID_ARGS = ("correlation", "External id", "Python id", "Python parent id", "Record function id", "Ev Idx",
           "Python module id")


def _open(path, mode):
    return gzip.open(path, mode) if path.endswith(".gz") else open(path, mode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--copies", type=int, default=8)
    a = ap.parse_args()
    with _open(a.src, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    timed = [e for e in body if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    span = (t1 - t0) * 1.001 + 1.0
    id_span = 1
    for e in body:
        for k in ID_ARGS:
            v = (e.get("args") or {}).get(k)
            if isinstance(v, int):
                id_span = max(id_span, abs(v) + 1)
        if isinstance(e.get("id"), int):
            id_span = max(id_span, e["id"] + 1)
    steps = [int(m.group(1)) for e in body if (m := re.match(r"ProfilerStep#(\d+)$", str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    out = list(meta)
    for k in range(a.copies):
        for e in body:
            c = dict(e)
            if isinstance(c.get("ts"), (int, float)):
                c["ts"] = c["ts"] + k * span
            if isinstance(c.get("id"), int):
                c["id"] = c["id"] + k * id_span
            if c.get("args"):
                args = dict(c["args"])
                for key in ID_ARGS:
                    v = args.get(key)
                    if isinstance(v, int) and v > 0:
                        args[key] = v + k * id_span
                c["args"] = args
            if step_span and isinstance(c.get("name"), str) and c["name"].startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(c['name'].split('#')[1]) + k * step_span}"
            out.append(c)
    doc["traceEvents"] = out
    with _open(a.dst, "wt") as f:
        json.dump(doc, f)
    print(f"{len(events)} events -> {len(out)} events")


if __name__ == "__main__":
    main()
