"""`Section`: what a report section declares — its keys in the document, what it computes, its JSON part, the
text report part that renders it and the app page that shows it (docs/json-schema.md's TRACE table is
generated from these declarations: `python -m traceview.docs`)."""

from __future__ import annotations

from ..records import record


@record(frozen=True)
class Section:
    """One part of each trace entry of the analyze document; `report.SECTIONS` lists them in document order."""

    keys: tuple[str, ...]  # its keys in the trace entry, in order (most sections have one)
    computes: str  # one line: what it computes (the module's docstring says how)
    json_type: str  # the JSON type of its value(s), as docs/json-schema.md writes it ("object\|null", "[STEP]")
    json_doc: str  # what the value holds (Markdown: docs/json-schema.md's meaning column)
    text: str | None = None  # the text report part that renders it: "header" or a `--show` section name
    app_page: str | None = None  # the app page that shows it (the module traceview/app/pages/<name>.py)
