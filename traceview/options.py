"""What one analysis run is asked to do: the step, the rules and their thresholds, the layer depth.

`Options()` is what `traceview analyze PATH` does with no flags and no config file. `Options.build()` applies
`[tool.traceview]` (pyproject.toml or `--config FILE`), `--set rule.option=value`, `--select` and `--ignore`
the way the CLI does, so the Python API, the CLI, the app and batch runs agree.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from .records import record


@record(frozen=True)
class Options:
    """What one analysis run is asked to do (module docstring); `Options()` is a run without flags."""

    step: int | None = None  # only ProfilerStep#N
    codes: tuple[str, ...] | None = None  # rules to run (None: all)
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # slug -> {option: value}
    layers_depth: int | None = None  # layers section: down to this tree depth
    top: int = 10  # rows of the top-kernel / top-op tables
    fail_on: str | None = None  # exit 1 at or above this severity (CLI, batch)
    max_bytes: int | None = None  # largest (decompressed) JSON held per input (None: the loader's default, 8 GiB)
    what_if: tuple[str, ...] | None = None  # projection: the step with only these fixes (codes, `CODE:variant`)
    jobs: int | None = None  # worker processes for a directory's files (None: one per core from 8 files on 4+ cores; 1: serial)
    #: the step time the user measured without the profiler (ms: CUDA events or the training log's steps/s): the
    #: profiler's cost is solved to it, as to a `traceview collect` measurement, and every saving priced against it
    unprofiled_ms: float | None = None

    def __post_init__(self) -> None:
        # refused however the options are made (CLI, app, MCP server, the Python API), not only by `build`
        object.__setattr__(self, "unprofiled_ms", _unprofiled(self.unprofiled_ms))

    def selected(self) -> list[str]:
        from .registry import selected

        return sorted(self.codes) if self.codes is not None else selected()

    def options_for(self, module: Any) -> dict[str, Any]:
        """The rule's thresholds: configured values over the defaults of its OPTIONS."""
        return {**{k: o.default for k, o in module.OPTIONS.items()}, **self.rule_options.get(module.NAME, {})}

    @classmethod
    def build(cls, *, step: int | None = None, select: list[str] | None = None, ignore: list[str] | None = None,
              config: str | None = None, sets: list[str] | None = None, layers_depth: int | None = None,
              fail_on: str | None = None, top: int = 10, jobs: int | None = None,
              max_bytes: int | None = None, what_if: list[str] | None = None,
              unprofiled_ms: float | None = None) -> Options:
        """Options from CLI-style inputs; a bad selector, option or config file raises TraceError."""
        from . import config as cfgmod
        from . import registry

        cfg = cfgmod.load(config, sets)
        codes = registry.selected(select or cfg["select"], (ignore or []) + list(cfg["ignore"]))
        return cls(step=step, codes=tuple(codes), rule_options=cfg["options"], layers_depth=layers_depth,
                   fail_on=fail_on or cfg["fail_on"], top=top, jobs=jobs,
                   max_bytes=max_bytes, what_if=_what_if(what_if) if what_if else None,
                   unprofiled_ms=unprofiled_ms)


def _unprofiled(ms: float | None) -> float | None:
    """A measured unprofiled step (ms): a positive, finite number, else TraceError."""
    import math

    from .errors import TraceError

    if ms is None:
        return None
    if not math.isfinite(ms) or ms <= 0:
        raise TraceError(f"--unprofiled-ms: {ms!r} is not a step time (a positive number of milliseconds)")
    return float(ms)


def _what_if(items: list[str]) -> tuple[str, ...]:
    """The what-if's fixes as rule codes in code order, each with the fix variant it names (`fp32-gemm:autocast` ->
    `TV202:autocast`: a rule that prices several ways to fix, `fix_variants`); a bad selector raises TraceError."""
    from . import registry
    from .errors import TraceError

    out: dict[str, None] = {}
    for item in items:
        sel, _, variant = item.partition(":")
        if not sel.strip():  # (an empty selector is a prefix of every code: it would select all the rules)
            raise TraceError(f"--what-if: {item!r} names no rule (a rule name or code, e.g. fp32-gemm:autocast)")
        for code in registry.selected([sel]):
            out[f"{code}:{variant.strip()}" if variant.strip() else code] = None
    return tuple(sorted(out))
