"""Trace-derived strings made inert for each output: terminal (rich markup, escape sequences), GitHub
Markdown (HTML, links, images, mentions), XML. Kernel, op and layer names, paths and finding titles
come from the trace file, which anyone can write: none of them may style, link or inject anything.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape as _rich_escape

# C0 controls (but tab and newline), DEL, C1 controls, and the bidirectional overrides that reorder
# what a terminal or a browser shows ("Trojan source")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _show(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(s: str, one_line: bool = False) -> str:
    """Control characters (ESC sequences included) shown as \\xNN instead of acted on by a terminal; with
    `one_line`, newlines and tabs too."""
    return (_CONTROL_NL if one_line else _CONTROL).sub(_show, s)


def terminal_line(s: str) -> str:
    """One line for stderr: no control characters, no line breaks."""
    return printable(str(s), one_line=True)


#: what makes a spreadsheet read a CSV cell as a formula (OWASP's CSV injection list, and full-width forms)
CSV_FORMULA = "^[=+\\-@\t\r\n\uff1d\uff0b\uff0d\uff20]"


def rich_safe(obj: Any) -> Any:
    """A copy of a report document (dicts, lists, strings) with every string escaped for rich markup and
    stripped of control characters, so a renderer may put any field into markup or a table cell."""
    if isinstance(obj, str):
        return _rich_escape(printable(obj))
    if isinstance(obj, dict):
        return {k: rich_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [rich_safe(v) for v in obj]
    return obj


def text_safe(obj: Any) -> Any:
    """A copy of a report document with every string stripped of control characters (shown as escapes), for
    renderers that print trace strings as rich `Text` (never parsed as markup)."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {k: text_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [text_safe(v) for v in obj]
    return obj


# ---- GitHub Markdown ----------------------------------------------------------------------------

# (the patterns below are compiled on first use, and `re` caches them: the text and JSON reports read none of
# them, and compiling them at import cost ~1 ms of every text report's start-up; issue 32)
_MD_PUNCT = r"([\\`*_\[\]()!|#~{}])"
_AUTOLINK = r"(?i)(://|www\.)"  # GitHub autolinks these even without <>
_MENTION = r"@(?=[A-Za-z0-9])"


def _defuse(s: str) -> str:
    """Break what GitHub turns into links or notifications even in plain text or raw HTML: `scheme://` and
    `www.` autolinks, @mentions. A zero-width space goes in: the text reads the same, nothing matches."""
    s = re.sub(_AUTOLINK, lambda m: ":\u200b//" if m.group(1) == "://" else m.group(1)[:3] + "\u200b.", s)
    return re.sub(_MENTION, "@\u200b", s)


def md_text(s: Any) -> str:
    """Inline Markdown text that renders as the literal string: HTML as entities, Markdown punctuation
    backslash-escaped (no links, images, emphasis, table breaks), autolinks and mentions defused, one line."""
    s = printable(re.sub(r"[\r\n\t]", " ", str(s)), one_line=True)
    s = re.sub(_MD_PUNCT, r"\\\1", s)
    import html  # (html.entities' tables: ~2 ms of a text report's start-up, which needs no entity)

    s = html.escape(s, quote=False)
    return _defuse(s)


def md_code(s: Any) -> str:
    """A code span holding `s` literally (inside one, GitHub renders no HTML, link or mention)."""
    s = printable(str(s), one_line=True)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_cell_code(s: Any) -> str:
    """A code span holding `s` literally, safe in a table cell (GFM needs the pipe escaped even there)."""
    return md_code(s).replace("|", "\\|")


def html_text(s: Any) -> str:
    """Text inside a raw HTML block (e.g. <summary>), where Markdown escapes do not apply: entities only,
    mentions defused."""
    import html

    return _defuse(html.escape(printable(str(s), one_line=True), quote=True))


# ---- Streamlit ----------------------------------------------------------------------------------

_ASCII_PUNCT = r"([!-/:-@\[-`{-~])"


def md_literal(s: Any) -> str:
    """Text for a Streamlit markdown element (st.markdown, captions, labels, st.error...) that renders as
    the literal string: every ASCII punctuation character backslash-escaped, which CommonMark allows,
    so no link, image, emphasis, HTML, `:color[...]` directive, emoji code or `$math$` forms."""
    return re.sub(_ASCII_PUNCT, r"\\\1", printable(re.sub(r"[\r\n\t]", " ", str(s)), one_line=True))


_ABS_PATH = r"(?<![\w.~])/(?:[^\s/:'\"]+/)+([^\s/:'\"]*)"


def hide_paths(msg: str, prefixes: tuple[str, ...] = ()) -> str:
    """`msg` without server paths: each prefix in `prefixes` removed, any other absolute path cut to its
    last component (a web user must not learn where files live on the server)."""
    for p in sorted(filter(None, prefixes), key=len, reverse=True):
        msg = msg.replace(p.rstrip("/") + "/", "").replace(p, "")
    return re.sub(_ABS_PATH, lambda m: m.group(1) or "/", msg)


# ---- XML ----------------------------------------------------------------------------------------

_XML_BAD = "[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]"


def xml_chars(s: Any) -> str:
    """Characters XML 1.0 cannot hold at all (not even as references) shown as \\xNN text."""
    return re.sub(_XML_BAD, _show, str(s))
