"""One module per output format: render(report_dict, stream)."""

from __future__ import annotations

import sys
from typing import IO, Any

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


def write(doc: dict, fmt: str, out_path: str | None, **text_opts: Any) -> None:
    """Render to a file, or to stdout."""
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            render(doc, fmt, fh, **text_opts)
    else:
        render(doc, fmt, sys.stdout, **text_opts)
