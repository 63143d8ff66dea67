"""One module per output format, `render(doc, out)` over the analyze document; FORMATS is their table."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ..errors import TraceError

#: format name -> its module in this package (each imported only when used); adding a format is one module
#: with `render(doc: dict, out: IO[str]) -> None` plus one line here
FORMATS: dict[str, str] = {
    "text": "text",
    "json": "json",
    "markdown": "markdown",
    "sarif": "sarif",
    "junit": "junit",
}


def render(doc: dict, fmt: str, out: IO[str], **text_opts: Any) -> None:
    """Write the document in one of FORMATS. `text_opts` (`show`, `width`) go to the text report only."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (formats: {', '.join(FORMATS)})")
    fn = importlib.import_module(f"{__name__}.{FORMATS[fmt]}").render
    if fmt == "text":
        fn(doc, out, **text_opts)
    else:
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
