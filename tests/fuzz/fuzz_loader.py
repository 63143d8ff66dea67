"""atheris (libFuzzer) target: any bytes as a trace file, through the loader and the whole analysis.

Only a TraceError (the one-line "bad input" error, exit code 2) may come out; anything else is a crash
that libFuzzer reports with the input that caused it. The first input byte picks the C scanner or the
pure-Python path. Run it bounded by iterations, not time, e.g.

    python tests/fuzz/fuzz_loader.py -runs=2000 -seed=1 SEED_DIR

(tests/test_fuzz.py writes SEED_DIR from generated traces and runs it so in the test suite).
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["traceview"]):
    from traceview import report
    from traceview.errors import TraceError
    from traceview.ingest.loader import load_file

_DIR = tempfile.mkdtemp(prefix="traceview-fuzz-")
_PATH = os.path.join(_DIR, "input.json")
_CAP = 16 * 2**20  # a fuzz input never needs more; a bomb must fail fast


def TestOneInput(data: bytes) -> None:  # noqa: N802 - the name atheris expects
    if not data:
        return
    os.environ["TRACEVIEW_NO_C"] = "1" if data[0] & 1 else "0"
    with open(_PATH, "wb") as f:
        f.write(data[1:])
    try:
        trace = load_file(_PATH, max_bytes=_CAP)
        report.analyze_trace(trace)
    except TraceError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
