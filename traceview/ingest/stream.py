"""One input read and gunzipped in a thread, handed over in pieces: the scanner consumes the document as it
arrives and never holds it whole (`inputs.read_input` holds it whole; it stays the path for everything odd).

A `Stream` takes only the clean case: a plain or gzip (one or more members) UTF-8 document that starts with
'{'. The first bytes are checked as `inputs` checks them (the same one-line errors, at once), and the caps of
`--max-bytes` apply as bytes arrive. Anything else — gzip damage or a cut stream, a UTF-16 file, a legacy
array, trailing bytes after the gzip data — ends the stream as not `complete`, and `fallback()` reads the
input again the old way (stdin: from the bytes kept, compressed, plus the rest of the pipe), with the
repairs, salvage and warnings of that path.
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import TraceError
from . import inputs

PIECE = 1 << 21  # bytes per piece handed over: the queue holds at most DEPTH of them
DEPTH = 4
_RAW_PIECE = 1 << 20  # compressed bytes read (and inflated) at a time
_GZ = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


class _GiveUp(Exception):
    """Not the clean case: the old path reads the input."""


class Stream:
    """Decompressed pieces of one input, produced by a reader thread (zlib / ISA-L inflate and reads
    release the GIL, so reading overlaps the scan on a second core)."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path, self.cap = Path(path), cap
        self.stdin = str(path) == inputs.STDIN
        self.where = "<stdin>" if self.stdin else str(path)
        self.warnings: list[str] = []
        self.complete = False  # set once every byte went through as the clean case
        self._kept: list[tuple[bool, bytes]] = []  # stdin only: what was read, for fallback(): (deflated, bytes)
        self._deflate = False  # plain stdin past its first bytes: kept deflated
        self._q: queue.Queue = queue.Queue(DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traceview-read", daemon=True)
        self._thread.start()

    # ---- consumer side
    def __iter__(self) -> Iterator[bytes]:
        while True:
            kind, val = self._q.get()
            if kind == "data":
                yield val
            elif kind == "end":
                self.complete = True
                return
            elif kind == "giveup":
                return
            else:
                raise val

    def close(self) -> None:
        """Stop the reader (the consumer gave up) and wait for it."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._q.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def fallback(self) -> tuple[bytes, list[str]]:
        """The whole document the old way (`inputs.read_input`): after the stream gave up or the scanner
        refused it."""
        self.close()
        if not self.stdin:
            return inputs.read_input(self.path, self.cap)
        prefix = b"".join(self._kept_raw())
        self._kept = []
        return inputs.read_input(self.path, self.cap, prefix)

    def _kept_raw(self) -> Iterator[bytes]:
        for deflated, b in self._kept:
            yield zlib.decompress(b) if deflated else b

    # ---- reader thread
    def _put(self, kind: str, val: object) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put((kind, val), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            f, _size = inputs._open_raw(self.path, self.cap)
        except BaseException as e:  # noqa: BLE001 - raised in the consumer's thread
            self._put("error", e)
            return
        try:
            try:
                self._read(f)
            finally:
                if not self.stdin:  # stdin stays open: fallback() reads the rest of it
                    f.close()
            self._put("end", None)
        except _GiveUp:
            self._put("giveup", None)
        except OSError as e:
            self._put("error", inputs.os_error(self.path, e))
        except BaseException as e:  # noqa: BLE001
            self._put("error", e)

    def _raw_blocks(self, f) -> Iterator[bytes]:  # noqa: ANN001 - a binary file
        """Raw bytes in blocks, within the cap (stdin: the cap of `inputs.read_raw`), kept for stdin."""
        total = 0
        while not self._stop.is_set():
            b = f.read(_RAW_PIECE)
            if not b:
                return
            total += len(b)
            if total > self.cap:
                raise inputs._cap_error(self.where, "input", self.cap)
            if self.stdin:
                self._kept.append((self._deflate, _deflate(b) if self._deflate else b))
            yield b
        raise _GiveUp

    def _read(self, f) -> None:  # noqa: ANN001
        blocks = self._raw_blocks(f)
        head = b""
        for b in blocks:  # the first bytes decide: gzip or plain, and the stdin sniff of inputs.read_raw
            head += b
            if len(head) >= 64:
                break
        if head[:2] == _GZ:  # (stdin: the compressed bytes are small, kept as they are)
            self._gunzip(head, blocks)
            return
        if self.stdin and len(head) >= 64 and not inputs._starts_like_json(head[:64]):
            raise TraceError(f"{self.where}: not a JSON trace (does not start with '{{' or '[')")
        self._deflate = self.stdin
        out = _Out(self)
        out.write(head)
        for b in blocks:
            out.write(b)
        out.flush()

    def _gunzip(self, head: bytes, blocks: Iterator[bytes]) -> None:
        out = _Out(self, gz=True)
        pending = head
        while True:
            d = inputs._inflate_mod.decompressobj(16 + zlib.MAX_WBITS)
            while True:
                try:
                    while pending:
                        out.write(d.decompress(pending, PIECE))
                        pending = d.unconsumed_tail
                        if d.eof:
                            break
                except inputs._ERRORS:
                    raise _GiveUp from None  # damage: the old path keeps what precedes it, with a warning
                if d.eof:
                    break
                pending = next(blocks, b"")
                if not pending:
                    raise _GiveUp  # cut stream
            rest = d.unused_data
            while len(rest) < 2:
                more = next(blocks, b"")
                if not more:
                    break
                rest += more
            if rest[:2] == _GZ:
                pending = rest
                continue  # another member (concatenated .gz files)
            if rest.strip(b"\x00") or any(b.strip(b"\x00") for b in blocks):
                raise _GiveUp  # trailing data: the old path warns about it
            break
        out.flush()


class Scan:
    """A `Stream` scanned in one more thread (`_scan.Scanner`, which releases the GIL while it parses): the
    CLI's prefetch runs the whole read, gunzip and scan while the main thread imports polars and the
    analyses. `wait()`: the scanner's result (None: refused; `stream.fallback()` then)."""

    def __init__(self, path: Path, cap: int) -> None:
        from . import _scan, argtables, cores

        if not hasattr(_scan, "Scanner") or hasattr(_scan, "args_columns"):  # a stale build of an older _scan.c
            raise ImportError("traceview.ingest._scan is a stale build")
        structs, tables, _ = argtables.spec()
        self.stream = Stream(path, cap)
        self._scanner = _scan.Scanner(argtables.tables_of, structs, tables, threads=cores.scan_threads())
        self._result: dict | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="traceview-scan", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            s = self._scanner
            for piece in self.stream:
                if not s.feed(piece):
                    return
            self._result = s.finish()
        except BaseException as e:  # noqa: BLE001 - raised in the consumer's thread
            self._error = e
        finally:
            self._scanner = None

    def wait(self) -> dict | None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        result, self._result = self._result, None
        return result if self.stream.complete else None

    def close(self) -> None:
        self.stream.close()
        self._thread.join()


class _Out:
    """Decompressed bytes out in pieces of about PIECE: the cap, the JSON check of the first bytes, a UTF-8
    BOM dropped; a document not starting with '{' gives up (legacy array, UTF-16: the old path)."""

    def __init__(self, s: Stream, gz: bool = False) -> None:
        self.s, self.gz, self.total, self.buf, self.first = s, gz, 0, [], True
        self.held = 0

    def write(self, b: bytes) -> None:
        if not b:
            return
        self.total += len(b)
        if self.total > self.s.cap:
            raise inputs._cap_error(self.s.where, "decompressed size" if self.gz else "input", self.s.cap)
        self.buf.append(b)
        self.held += len(b)
        if self.first and self.held >= 64:
            self._check()
        if self.held >= PIECE:
            self._hand_over()

    def _check(self) -> None:
        self.first = False
        head = b"".join(self.buf)
        if self.gz and not inputs._starts_like_json(head[:64]):
            raise TraceError(f"{self.s.where}: not a JSON trace (the decompressed data does not start with "
                             "'{' or '[')")
        if head.startswith(_BOM):
            head = head[len(_BOM):]
        if head.lstrip()[:1] != b"{":
            raise _GiveUp
        self.buf, self.held = [head], len(head)

    def _hand_over(self) -> None:
        piece = self.buf[0] if len(self.buf) == 1 else b"".join(self.buf)
        self.buf, self.held = [], 0
        if not self.s._put("data", piece):
            raise _GiveUp

    def flush(self) -> None:
        if self.first:
            if not self.held:
                raise _GiveUp  # empty: the old path says so
            self._check()
        if self.held:
            self._hand_over()


def _deflate(b: bytes) -> bytes:
    """Plain stdin kept for fallback() at a few % of its size: ISA-L's fastest level runs at GB/s."""
    if inputs._inflate_mod is zlib:
        return zlib.compress(b, 1)
    from isal import isal_zlib

    return isal_zlib.compress(b, 0)
