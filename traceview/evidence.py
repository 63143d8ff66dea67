"""Evidence as typed structs: the field groups rules share (spans, op counts, the profiler's note), the keys the
report adds to any finding's evidence, and how a struct becomes the JSON document's dict and its docs' table.

A rule declares `class Evidence(msgspec.Struct, kw_only=True)` in its module, one `Annotated[type,
Meta(description=...)]` per field, in the order the JSON document lists them; a key the rule sets only
sometimes defaults to `UNSET` and is left out while unset (`to_builtins`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import msgspec.inspect as mi
from msgspec import UNSET, Meta, UnsetType

__all__ = ["UNSET", "AfterLargerFixes", "Meta", "OpCount", "OpTime", "OpTimePerStep", "ProfilerNote", "ReportAdded",
           "Span", "StepSpan", "UnsetType", "field_problems", "field_rows", "to_builtins", "type_name"]


class Span(msgspec.Struct, kw_only=True):
    """A time window on the trace's clock."""

    start_us: Annotated[float, Meta(description="start (µs, trace clock)")]
    end_us: Annotated[float, Meta(description="end (µs, trace clock)")]


class StepSpan(Span, kw_only=True):
    """A time window and the analysed step it lies in."""

    step: Annotated[int, Meta(description="the analysed step it lies in")]


class OpCount(msgspec.Struct, kw_only=True):
    """An op (the host op's name) and how often it occurs."""

    op: Annotated[str | None, Meta(description="the op's name (null: no launching op recorded)")]
    count: Annotated[int, Meta(description="occurrences over the analysed steps")]


class OpTime(OpCount, kw_only=True):
    """An op, how often it occurs and the device time of its kernels."""

    time_us: Annotated[float, Meta(description="its kernels' time over the analysed steps (µs)")]


class OpTimePerStep(OpCount, kw_only=True):
    """An op, how often it occurs and the device time of its kernels per step."""

    time_per_step_us: Annotated[float, Meta(description="its kernels' time per step (µs)")]


class ProfilerNote(msgspec.Struct, kw_only=True):
    """What the profiler's own cost does to a finding's saving (its replay with the profiler's cost taken off)."""

    source: Annotated[str | None, Meta(description="`manifest` (measured by the collector) or `estimate`")]
    overhead_per_step_us: Annotated[float, Meta(description="the profiler's cost per step (µs)")]
    unprofiled_step_us: Annotated[float, Meta(description="the step without the profiler (µs)")]
    traced_savings_pct: Annotated[float | UnsetType, Meta(description="the fix's saving, % of the traced step")] = UNSET
    unprofiled_savings_pct: Annotated[float, Meta(description="the fix's saving, % of the unprofiled step")]
    note: Annotated[str | UnsetType, Meta(description="the same in words")] = UNSET


class AfterLargerFixes(msgspec.Struct, kw_only=True):
    """What a fix still saves once the fixes that save more are made (its severity follows it)."""

    fixes: Annotated[list[str], Meta(description="the rules whose larger fixes come first")]
    savings_us: Annotated[float, Meta(description="what this fix saves per step after them (µs)")]
    savings_pct: Annotated[float, Meta(description="that as % of the step")]
    note: Annotated[str, Meta(description="the same in words")]


class ReportAdded(msgspec.Struct, kw_only=True):
    """Keys the replay (sections/fixrunner.py) adds to any rule's evidence, after the rule's own."""

    after_larger_fixes: Annotated[AfterLargerFixes | UnsetType, Meta(
        description="set when the finding is info only because larger fixes save the same time")] = UNSET
    profiler: Annotated[ProfilerNote | UnsetType, Meta(
        description="set when the profiler's cost explains the saving, or replaces a rule's own estimate")] = UNSET


def to_builtins(obj: Any) -> Any:
    """`obj` with every struct turned into a dict of its fields in declaration order, `UNSET` ones left out;
    other values stay as they are (the JSON formatter formats them as it formats any dict's)."""
    if isinstance(obj, msgspec.Struct):
        return {k: to_builtins(v) for f, k in zip(obj.__struct_fields__, obj.__struct_encode_fields__, strict=True)
                if (v := getattr(obj, f)) is not UNSET}
    if isinstance(obj, dict):
        return {k: to_builtins(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_builtins(v) for v in obj)
    return obj


_SCALARS = {mi.IntType: "int", mi.FloatType: "float", mi.StrType: "str", mi.BoolType: "bool", mi.NoneType: "null",
            mi.AnyType: "any"}


def type_name(t: mi.Type, link: bool = False) -> str:
    """A field's type in short: `float`, `int | null`, `[OpCount]`, `{str: float}`; a struct by its name (a
    Markdown link to its definition in docs/json-schema.md with `link`)."""
    if isinstance(t, mi.Metadata):
        return type_name(t.type, link)
    if type(t) in _SCALARS:
        return _SCALARS[type(t)]
    if isinstance(t, mi.UnionType):
        return " \\| ".join(type_name(x, link) for x in t.types)
    if isinstance(t, (mi.ListType, mi.TupleType, mi.VarTupleType)):
        items = t.item_types if isinstance(t, mi.TupleType) else (t.item_type,)
        return "[" + ", ".join(type_name(x, link) for x in items) + "]"
    if isinstance(t, mi.DictType):
        return "{" + f"{type_name(t.key_type, link)}: {type_name(t.value_type, link)}" + "}"
    if isinstance(t, mi.StructType):
        name = t.cls.__name__
        return f"[{name}](json-schema.md#{name.lower()})" if link and t.cls.__module__ == __name__ else name
    if isinstance(t, mi.LiteralType):
        return " \\| ".join(repr(v) for v in t.values)
    return type(t).__name__


def _description(t: mi.Type) -> str:
    return (t.extra_json_schema or {}).get("description", "") if isinstance(t, mi.Metadata) else ""


def field_rows(cls: type[msgspec.Struct], link: bool = False) -> list[tuple[str, str, str]]:
    """(key, type, description) of each field, in the JSON document's order; a key set only sometimes says so."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return [(f.encode_name, type_name(f.type, link), _description(f.type) + ("" if f.required else " (optional)"))
            for f in info.fields]


def nested_structs(cls: type[msgspec.Struct]) -> list[type[msgspec.Struct]]:
    """The structs a struct's fields hold (depth first, each once, the struct itself not included)."""
    out: list[type[msgspec.Struct]] = []

    def walk(t: mi.Type) -> None:
        if isinstance(t, mi.Metadata):
            walk(t.type)
        elif isinstance(t, mi.StructType):
            if t.cls not in out and t.cls is not cls:
                out.append(t.cls)
                for f in t.fields:
                    walk(f.type)
        elif isinstance(t, mi.UnionType):
            for x in t.types:
                walk(x)
        elif isinstance(t, (mi.ListType, mi.VarTupleType)):
            walk(t.item_type)
        elif isinstance(t, mi.TupleType):
            for x in t.item_types:
                walk(x)
        elif isinstance(t, mi.DictType):
            walk(t.value_type)

    for f in mi.type_info(cls).fields:
        walk(f.type)
    return out


def field_problems(cls: Any, where: str) -> list[str]:
    """What an evidence struct lacks: it is a msgspec.Struct, keyword-only, and every field of it and of the
    structs it holds has a description."""
    if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
        return [f"{where} is not a msgspec.Struct"]
    out = []
    if getattr(cls, "__match_args__", ()):  # positional fields: a reordering would swap values silently
        out.append(f"{where} is not kw_only (fields are passed by name)")
    for c in (cls, *nested_structs(cls)):
        out += [f"{where}: field {c.__name__}.{k} has no description" for k, _, d in field_rows(c)
                if not d.removesuffix(" (optional)")]
    return out
