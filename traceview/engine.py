"""The polars engine that runs traceview's lazy chains: `LazyFrame.collect(**IN_MEMORY)`.

The in-memory engine runs a lazy chain as the eager API runs each step. Newer polars default `collect()` to
"auto" (the streaming engine in 2.x), which costs about twice as much per query on the small frames most chains
see (a small trace's run is mostly the fixed cost of each polars query) and hands back columns in chunks (which
later numpy conversions then copy). Older polars (engine default "cpu") run in memory by default: no keyword.
"""

from __future__ import annotations

import inspect

import polars as pl

#: `LazyFrame.collect` keywords that pick the in-memory engine: newer polars default to "auto" and name it
#: "in-memory"; older ones (default "cpu") run it by default
IN_MEMORY: dict[str, str] = ({} if getattr(inspect.signature(pl.LazyFrame.collect).parameters.get("engine"),
                                           "default", "cpu") == "cpu" else {"engine": "in-memory"})
