"""traceview's rules: `RULES` is the one table code -> rule module (like ruff's codes.rs).

Each module is named by its slug in snake_case and exposes `CODE`, `NAME` (the slug), `SEVERITY` (the
default severity of a finding at or above the moderate threshold), `TITLE`, `OPTIONS` (name -> `Option`
with the default and its peer source) and `check(trace, steps, ctx) -> list[Finding]`; `CPU = True` when it
also runs on traces without GPU activity (`cpu_view.run_rules`); its docstring
(sections What it detects / Why it is slow / How to fix / Evidence / Options / References) is the user
documentation (`traceview rule CODE`, docs/rules.md). Codes are never reused: TV1 host and launch,
TV2 kernels, TV3 data movement, TV4 input pipeline, TV5 distributed.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Option:
    default: Any
    doc: str


from . import (  # noqa: E402 - Option must exist before the rule modules import it
    cpu_op_overhead,
    elementwise_chain,
    host_sync,
    input_bound,
    launch_bound,
    nccl_wait,
    pageable_memcpy,
)

RULES: dict[str, ModuleType] = {
    "TV101": launch_bound,
    "TV102": host_sync,
    "TV110": cpu_op_overhead,
    "TV201": elementwise_chain,
    "TV301": pageable_memcpy,
    "TV401": input_bound,
    "TV501": nccl_wait,
}
BY_NAME: dict[str, ModuleType] = {m.NAME: m for m in RULES.values()}
