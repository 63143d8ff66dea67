"""Stable JSON (schema_version in the document)."""

from __future__ import annotations

from typing import IO

import msgspec


def render(doc: dict, out: IO[str]) -> None:
    out.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode())
    out.write("\n")
