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

#: `LazyFrame.collect` keywords for the streaming engine where the in-memory one is named (newer polars), else the
#: default engine: a query that reduces a whole-trace frame to a few rows (a count per group) runs over a part of
#: the rows at a time instead of materializing each step's columns for every row
STREAMING: dict[str, str] = {"engine": "streaming"} if IN_MEMORY else {}
#: below this many rows (events, GPU rows, host rows) the fixed cost of a polars query outweighs the per-row work a
#: columnar shortcut saves: the loader's dictionary codes and merged args tables, and the rules' cheap "nothing to
#: find" pre-checks (one more query, which on a larger trace would be one more pass over its rows for nothing)
SMALL_ROWS = 4096
#: rows from which `for_rows` picks the streaming engine (below it the in-memory engine's lower cost per query wins)
STREAM_ROWS = 1 << 20


def for_rows(n: int) -> dict[str, str]:
    """The `collect` keywords for a reducing query over a frame of `n` rows (`STREAMING` from STREAM_ROWS rows):
    only for results that do not depend on the engine's row order (counts, sums of integers, sets)."""
    return STREAMING if n >= STREAM_ROWS else IN_MEMORY

#: `LazyFrame.collect` keywords for a chain of eager steps run as one query (one query's fixed cost instead of one
#: per step: most of a small trace's run): the in-memory engine without the optimizer's passes, as the eager calls
#: run (no pass moves a filter or merges steps), so the chain computes what those calls did, step by step
CHAIN: dict = ({**IN_MEMORY, "optimizations": pl.QueryOptFlags.none(simplify_expression=True)}
               if "optimizations" in inspect.signature(pl.LazyFrame.collect).parameters else IN_MEMORY)
