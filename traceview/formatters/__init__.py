"""One module per output format: render(report_dict, stream)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ..errors import TraceError

FORMATS = ("text", "json", "markdown", "sarif", "junit")


def render(doc: dict, fmt: str, out: IO[str], **text_opts: Any) -> None:
    """Write the document in one of FORMATS (each formatter is imported only when used). `text_opts` (`show`,
    `width`) go to the text report only."""
    if fmt == "text":
        from .text import render as text

        text(doc, out, **text_opts)
        return
    if fmt == "json":
        from .json import render as fn
    elif fmt == "markdown":
        from .markdown import render as fn
    elif fmt == "sarif":
        from .sarif import render as fn
    elif fmt == "junit":
        from .junit import render as fn
    else:
        raise ValueError(f"unknown format {fmt!r} (formats: {', '.join(FORMATS)})")
    fn(doc, out)


@contextmanager
def output(path: str | None, option: str = "-o") -> Iterator[IO[str]]:
    """The file `path` opened for writing (stdout without one); a path that cannot be written (a folder, /proc,
    no permission, a full disk) is one line naming it, exit 2."""
    if not path:
        yield sys.stdout
        return
    try:
        with open(path, "w", encoding="utf-8") as fh:
            yield fh
    except OSError as e:
        raise TraceError(f"{option} {path}: cannot write it ({e.strerror or e})") from None


def write(doc: dict, fmt: str, out_path: str | None, **text_opts: Any) -> None:
    """Render to a file, or to stdout."""
    with output(out_path) as fh:
        render(doc, fmt, fh, **text_opts)
