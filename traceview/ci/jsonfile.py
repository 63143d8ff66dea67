"""The one reader of the JSON documents the CI commands take back in (baselines, batch rows): one error line each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import TraceError


def read_json(path: str | Path, what: str) -> Any:
    """The JSON document at `path`; a missing, unreadable or non-JSON file is a TraceError of one line naming
    `what` it should have been (`baseline`, `batch rows`) and the path."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError(f"{what} {p}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{what} {p}: a directory, not a JSON file") from None
    except (OSError, ValueError, RecursionError) as e:  # (UnicodeDecodeError is a ValueError)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise TraceError(f"{what} {p}: not a JSON file ({first})") from None
