"""Reading one input into memory, bounded: regular files or stdin (`-`) only, a cap on the bytes held
(`--max-bytes`), streamed gunzip that keeps what precedes damage, and text encodings other than UTF-8.

Everything here fails with a `TraceError` (one line, exit code 2) or returns (bytes, warnings): a FIFO,
a device or a symlink loop never blocks, and a gzip bomb stops at the cap instead of filling memory.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import sys
import zlib
from pathlib import Path

from ..errors import TraceError

try:  # ISA-L inflates ~1.7x faster than zlib on trace files
    from isal import isal_zlib as _inflate_mod
except ImportError:  # pragma: no cover - optional speed-up
    _inflate_mod = zlib

DEFAULT_MAX_BYTES = 8 * 2**30  # CLI default: the largest traces we have seen are a few GiB of JSON
STDIN = "-"
_IN_PIECE = 1 << 20  # compressed bytes fed per inflate call (keeps `unconsumed_tail` copies small)
_OUT_PIECE = 1 << 24  # most bytes one inflate call may produce: the cap is checked this often
_RECOVER_PIECE = 4096  # granularity of the recovery pass over a damaged member
_ERRORS = (zlib.error, getattr(_inflate_mod, "error", zlib.error), EOFError)

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


def parse_size(text: str) -> int:
    """'8G', '512MiB', '100k', '1000' -> bytes (binary units). ValueError on anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 8G, 512M, 100000)")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return n


def human(n: int) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n} bytes"


def _cap_error(where: str, what: str, cap: int) -> TraceError:
    return TraceError(f"{where}: {what} exceeds the input limit of {human(cap)} (--max-bytes; raise it for "
                      "bigger traces)")


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _not_regular(path: Path, mode: int) -> TraceError:
    kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
    return TraceError(f"{path}: is {kind}, not a regular file; to read a stream, pass '-' and redirect it to stdin")


def os_error(path: Path | str, e: OSError) -> TraceError:
    """One line for an OSError on `path`, with its own wording for a symlink loop."""
    if e.errno == errno.ELOOP:
        return TraceError(f"{path}: symbolic link loop (too many levels of symbolic links)")
    if e.errno == errno.ENOENT:
        return TraceError(f"{path}: no such file or directory")
    return TraceError(f"{path}: cannot read: {e.strerror or e}")


def check_path(path: Path) -> os.stat_result:
    """stat() a command-line path without opening it; a missing path, dangling link or link loop is a
    TraceError."""
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno == errno.ENOENT and os.path.islink(path):
            raise TraceError(f"{path}: broken symbolic link (its target does not exist)") from None
        raise os_error(path, e) from None


def _read_capped(f: io.RawIOBase | io.BufferedIOBase, first: int, cap: int, where: str,
                 sniff: bool = False, prefix: bytes = b"") -> bytes:
    """Read to EOF but never more than `cap` bytes (TraceError beyond); `first` sizes the first read. With
    `sniff` (a stream), stop at once when the first bytes are neither gzip nor JSON."""
    out = io.BytesIO()
    out.write(prefix)
    want = min(first, cap) + 1
    while True:
        b = f.read(want)
        if not b:
            break
        out.write(b)
        if sniff and out.tell() >= 64:
            sniff = False
            head = out.getbuffer()[:64].tobytes()
            if head[:2] != b"\x1f\x8b" and not _starts_like_json(head):
                raise TraceError(f"{where}: not a JSON trace (does not start with '{{' or '[')")
        if out.tell() > cap:
            raise _cap_error(where, "input", cap)
        want = _OUT_PIECE
    return out.getvalue()


def _open_raw(path: Path, cap: int) -> tuple[io.RawIOBase | io.BufferedIOBase, int | None]:
    """(binary stream, size or None for stdin) of a regular file or of stdin ('-'): the checks of `read_raw`
    (a terminal, a FIFO or device, a file over the cap) before a byte is read."""
    if str(path) == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise TraceError("-: no standard input to read")
        if sys.stdin.isatty():  # nothing piped in: reading would wait for typing
            raise TraceError("-: standard input is a terminal; pipe or redirect a trace into it")
        return stream, None
    st = check_path(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    try:  # O_NONBLOCK: should the path be swapped for a FIFO after stat(), open() still returns at once
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise os_error(path, e) from None
    f = open(fd, "rb", buffering=0, closefd=True)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        f.close()
        raise _not_regular(path, st.st_mode)
    if st.st_size > cap:
        f.close()
        raise _cap_error(str(path), f"file size ({human(st.st_size)})", cap)
    return f, st.st_size


def read_raw(path: Path, cap: int, prefix: bytes = b"") -> bytes:
    """The bytes of a regular file (or of stdin for '-'), at most `cap` of them. `prefix`: bytes of stdin
    already read (by a `Stream` that gave up), taken as its first bytes."""
    f, size = _open_raw(path, cap)
    if size is None:
        return _read_capped(f, 1 << 16, cap, "<stdin>", sniff=True, prefix=prefix)
    with f:
        try:
            return _read_capped(f, size, cap, str(path))
        except OSError as e:
            raise os_error(path, e) from None


def _starts_like_json(head: bytes) -> bool:
    """First non-blank character is '{' or '[' (UTF-8 with or without BOM, UTF-16/32: NULs ignored)."""
    for bom in (b"\xef\xbb\xbf", b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff", b"\xff\xfe", b"\xfe\xff"):
        if head.startswith(bom):
            head = head[len(bom):]
            break
    text = head.replace(b"\x00", b"").lstrip()
    if not text:  # blank so far: fine, unless it is NULs (/dev/zero, a zero-filled bomb)
        return b"\x00" not in head
    return text[:1] in (b"{", b"[")


class _Sink:
    """Decompressed output with the cap and the does-it-look-like-JSON check on the first bytes."""

    def __init__(self, cap: int, where: str) -> None:
        self.buf = io.BytesIO()
        self.cap, self.where, self.checked = cap, where, False

    def write(self, b: bytes) -> None:
        if not b:
            return
        self.buf.write(b)
        n = self.buf.tell()
        if not self.checked and n >= 64:
            self.check()
        if n > self.cap:
            raise _cap_error(self.where, "decompressed size", self.cap)

    def check(self) -> None:
        self.checked = True
        if not _starts_like_json(self.buf.getbuffer()[:64].tobytes()):
            raise TraceError(f"{self.where}: not a JSON trace (the decompressed data does not start with '{{' or '[')")


def gunzip(raw: bytes, cap: int, where: str) -> tuple[bytes, list[str]]:
    """Inflate every gzip member of `raw`, at most `cap` bytes in all. A cut stream keeps what it has, damage
    keeps what precedes it, trailing non-gzip bytes are ignored; each with a warning."""
    sink = _Sink(cap, where)
    warnings: list[str] = []
    view = memoryview(raw)
    pos = 0
    while pos < len(raw):
        start_len = sink.buf.tell()
        d = _inflate_mod.decompressobj(16 + zlib.MAX_WBITS)
        try:
            k = pos
            while k < len(raw) and not d.eof:
                piece = view[k:k + _IN_PIECE]
                k += len(piece)
                _feed(d, piece, sink)
            if not d.eof:
                sink.write(d.flush())
        except _ERRORS as e:
            got = _recover(view[pos:], sink, start_len)
            if got == 0 and sink.buf.tell() == 0:
                raise TraceError(f"{where}: corrupt gzip stream, nothing could be decompressed ({e})") from None
            what = "fails its checksum: some bytes are wrong" if "check" in str(e).lower() else f"is damaged ({e})"
            warnings.append(f"gzip data {what}; kept the {sink.buf.tell():,} bytes decompressed before the error")
            break
        if not d.eof:
            if sink.buf.tell() == 0:
                raise TraceError(f"{where}: truncated gzip file: no complete event could be recovered")
            warnings.append(f"gzip stream is truncated; decompressed the first {sink.buf.tell():,} bytes")
            break
        rest = d.unused_data
        pos = len(raw) - len(rest)
        if rest[:2] == b"\x1f\x8b":
            continue  # another member (concatenated .gz files)
        if rest.strip(b"\x00"):  # zero padding (tape/block writers) is normal; anything else is not
            warnings.append(f"ignored {len(rest):,} bytes of trailing data after the end of the gzip stream")
        break
    if not sink.checked:
        sink.check()
    return sink.buf.getvalue(), warnings


def _recover(member: memoryview, sink: _Sink, start_len: int) -> int:
    """Re-inflate a damaged member with zlib, keeping all output before the first error (the piece that
    fails is fed again byte by byte from a copy of the state). Returns the bytes recovered from it."""
    sink.buf.seek(start_len)
    sink.buf.truncate()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    for k in range(0, len(member), _RECOVER_PIECE):
        saved = d.copy()
        try:
            _feed(d, member[k:k + _RECOVER_PIECE], sink)
        except zlib.error:
            for j in range(k, min(k + _RECOVER_PIECE, len(member))):
                try:
                    _feed(saved, member[j:j + 1], sink)
                except zlib.error:
                    break
            break
        if d.eof:
            break
    return sink.buf.tell() - start_len


def _feed(d: zlib._Decompress, piece: memoryview, sink: _Sink) -> None:
    while True:
        sink.write(d.decompress(piece, _OUT_PIECE))
        piece = d.unconsumed_tail
        if not piece or d.eof:
            return


_BOMS = ((b"\xef\xbb\xbf", None), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def to_utf8(data: bytes, where: str) -> tuple[bytes, str | None]:
    """UTF-8 as is (a BOM dropped); UTF-16/32 (BOM, or the NUL pattern of '{' / '[') re-encoded, with a
    warning."""
    enc = None
    for bom, name in _BOMS:
        if data.startswith(bom):
            if name is None:
                return data[len(bom):], None
            enc, data = name, data[len(bom):]
            break
    if enc is None and len(data) >= 4:
        h = data[:4]
        if h[0] == 0 and h[1] == 0 and h[2] == 0 and h[3]:
            enc = "utf-32-be"
        elif h[0] and h[1] == 0 and h[2] == 0 and h[3] == 0:
            enc = "utf-32-le"
        elif h[0] == 0 and h[1]:
            enc = "utf-16-be"
        elif h[0] and h[1] == 0:
            enc = "utf-16-le"
    if enc is None:
        return data, None
    try:
        text = data.decode(enc)
    except UnicodeDecodeError as e:
        raise TraceError(f"{where}: looks like {enc.upper()} text but is not valid {enc.upper()} ({e.reason} at "
                         f"byte {e.start})") from None
    return text.encode("utf-8", "surrogatepass"), f"the file is {enc.upper()} text: re-encoded as UTF-8"


def safe_file_name(name: str, fallback: str, limit: int = 120) -> str:
    """A local file name for a user-supplied one (an upload): its last path component without control
    characters or a leading dot, the trace suffix kept, at most `limit` bytes (file systems refuse names
    over 255 bytes with an error that would reveal the server's paths)."""
    base = re.split(r"[/\\]", name)[-1]
    base = re.sub(r"[\x00-\x1f\x7f]", "_", base).strip().lstrip(".")
    suffix = next((s for s in (".json.gz", ".json", ".gz") if base.lower().endswith(s)), "")
    stem = base[: len(base) - len(suffix)]
    budget = limit - len(suffix.encode())
    stem = stem.encode("utf-8", "replace")[:budget].decode("utf-8", "ignore")
    return stem + suffix if stem else fallback


def read_input(path: Path, cap: int = DEFAULT_MAX_BYTES, prefix: bytes = b"") -> tuple[bytes, list[str]]:
    """(UTF-8 bytes of the document, warnings) for one input file or '-' (`prefix`: see `read_raw`)."""
    where = "<stdin>" if str(path) == STDIN else str(path)
    raw = read_raw(path, cap, prefix)
    warnings: list[str] = []
    if raw[:2] == b"\x1f\x8b":
        raw, warnings = gunzip(raw, cap, where)
    data, note = to_utf8(raw, where)
    if note:
        warnings.append(note)
    return data, warnings
