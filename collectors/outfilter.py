"""The job's stderr passed through to the launcher's, minus torch's profiler probe lines (kept in a log file)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

#: torch's USDT probe lines, one per profiler start and stop:
#: `USDT:2026-12-02 01:09:34 23907:23907 SyncActivityProfilerHandler.cpp:52] profiler_start`
NOISE_RE = re.compile(rb"^USDT:[^\n]*\] profiler_\w+\r?\n?$")
LOG_NAME = "profiler.log"
_PREFIX = b"USDT:"
_HOLD_MAX = 1 << 16  # a line start held back longer than this without its newline is not a probe line


class LineFilter:
    """Splits a byte stream into what passes and what goes to the log. Text passes as soon as it arrives, even
    without its newline (progress bars redraw with \\r); only the start of a line that could be a probe line is
    held until its newline says what it is."""

    def __init__(self) -> None:
        self.held = b""
        self.mid_line = False  # a partial line already passed: the rest of it is never a probe line

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(bytes to pass on, bytes for the log) for the next chunk of the stream."""
        buf, out, log = self.held + data, [], []
        self.held = b""
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[: nl + 1], buf[nl + 1 :]
            (log if not self.mid_line and NOISE_RE.match(line) else out).append(line)
            self.mid_line = False
        if buf:
            could_be_noise = not self.mid_line and (buf.startswith(_PREFIX) or _PREFIX.startswith(buf))
            if could_be_noise and len(buf) < _HOLD_MAX:
                self.held = buf
            else:
                out.append(buf)
                self.mid_line = True
        return b"".join(out), b"".join(log)

    def close(self) -> tuple[bytes, bytes]:
        """What is left at the end of the stream (a last line without its newline)."""
        rest, self.held = self.held, b""
        if rest and not self.mid_line and NOISE_RE.match(rest):
            return b"", rest
        return rest, b""


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            n = os.write(fd, data)
        except OSError:  # our stderr is gone (closed pipe): the log still gets its lines
            return
        data = data[n:]


def forward(fd_in: int, fd_out: int, log_path: Path) -> None:
    """Copy `fd_in` to `fd_out` until its end, the probe lines to `log_path` (created when the first arrives)."""
    filt = LineFilter()

    def log(data: bytes) -> None:
        if data:
            with open(log_path, "ab") as f:
                f.write(data)

    while True:
        try:
            chunk = os.read(fd_in, 65536)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        out, lg = filt.feed(chunk)
        _write_all(fd_out, out)
        log(lg)
    out, lg = filt.close()
    _write_all(fd_out, out)
    log(lg)


def start(run_dir: Path) -> subprocess.Popen:
    """The filter as its own small process (stdlib only), reading the pipe the job writes its stderr to: it
    outlives a launcher that is killed, so the job's stderr never breaks while the job saves its capture."""
    return subprocess.Popen(
        [sys.executable, "-S", str(Path(__file__).resolve()), str(run_dir)],
        stdin=subprocess.PIPE,
        close_fds=True,
    )


def main(argv: list[str]) -> int:
    # the end of the job's stderr ends this process, not a signal: Ctrl-C, a SIGTERM to the process group or the
    # launcher's death reach the job, which may still write while it saves its capture
    for sig in ("SIGINT", "SIGTERM", "SIGQUIT", "SIGHUP"):
        if hasattr(signal, sig):
            signal.signal(getattr(signal, sig), signal.SIG_IGN)
    forward(0, 2, Path(argv[1]) / LOG_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
