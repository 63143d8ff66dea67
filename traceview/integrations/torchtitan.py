"""A TorchTitan trace post-processor: TorchTitan calls `Profiler.Config.trace_post_processor`'s function with the
path of each trace it exports (`profiling/traces/iteration_<N>/rank<R>_trace.json[.gz]`); this one analyzes the
trace there and then, writing `<trace>.traceview.json` (the `analyze --format json` document) and
`<trace>.traceview.md` beside it and logging the verdict. It never raises into the training loop. Imports
neither TorchTitan nor torch."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("traceview")


def analyze_trace_file(trace_path: str) -> Path | None:
    """Analyze one exported trace; the JSON document's path, or None when the analysis failed (logged)."""
    from ..formatters import write
    from ..report import analyze

    path = Path(trace_path)
    stem = path.name.removesuffix(".gz").removesuffix(".json")
    out = path.with_name(stem + ".traceview.json")
    try:
        doc = analyze([path]).to_dict()
        write(doc, "json", str(out))
        write(doc, "markdown", str(path.with_name(stem + ".traceview.md")))
    except Exception as e:  # noqa: BLE001 - a failed analysis must not stop training
        log.warning("traceview: %s: analysis failed: %s", path, e)
        return None
    for t in doc["traces"]:
        log.info("traceview: %s: %s", path.name, t.get("verdict_text") or "no verdict")
    for e in doc["errors"]:
        log.warning("traceview: %s", e["error"])
    return out
