"""The two halves of the load's read pipeline, each alone, in CPU seconds of its own thread: gunzip (ISA-L when
installed, else zlib, in pieces as `traceview/ingest/stream.py` reads) and the C scan fed the JSON from memory in the pieces
the reader hands over. With the CLI they run in two threads beside the main thread's imports, so on 2 cores
their sum against the run's wall time shows whether splitting the scan across cores could help.

    .venv/bin/python bench/bench_scan.py TRACE.json[.gz]      # prints one JSON line
"""

from __future__ import annotations

import json
import resource
import sys
import zlib
from pathlib import Path


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def main(path: Path) -> dict:
    from traceview.ingest import _scan, argtables, inputs
    from traceview.ingest.stream import _RAW_PIECE, PIECE

    raw = path.read_bytes()
    pieces: list[bytes] = []
    c = _cpu()
    if raw[:2] == b"\x1f\x8b":  # one gzip member, inflated as the reader thread does: PIECE bytes at a time
        d = inputs._inflate_mod.decompressobj(16 + zlib.MAX_WBITS)
        for i in range(0, len(raw), _RAW_PIECE):  # compressed blocks as read: the tail copied stays small
            pending = raw[i:i + _RAW_PIECE]
            while pending and not d.eof:
                pieces.append(d.decompress(pending, PIECE))
                pending = d.unconsumed_tail
    else:
        pieces = [raw[i:i + PIECE] for i in range(0, len(raw), PIECE)]
    gunzip = _cpu() - c
    del raw
    structs, tables, _ = argtables.spec()
    scanner = _scan.Scanner(argtables.tables_of, structs, tables)
    c = _cpu()
    for piece in pieces:
        scanner.feed(piece)
    scanner.finish()
    scan = _cpu() - c
    return {"mb": sum(map(len, pieces)) / 1e6, "inflate": inputs._inflate_mod.__name__, "gunzip_cpu_s": gunzip,
            "scan_cpu_s": scan}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
