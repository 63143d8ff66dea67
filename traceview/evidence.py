"""Evidence as typed structs: the field groups rules share (spans, op counts, the profiler's note), the keys the
report adds to any finding's evidence, and how a struct becomes the JSON document's dict and its docs' keys.

A rule declares `class Evidence(msgspec.Struct, kw_only=True)` in its module, one `Annotated[type,
Meta(description=...)]` per field, in the order the JSON document lists them; a key the rule sets only
sometimes defaults to `UNSET` and is left out while unset (`to_builtins`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import msgspec.inspect as mi
from msgspec import UNSET, Meta, UnsetType

__all__ = [
    "UNSET",
    "AfterLargerFixes",
    "FieldDoc",
    "Meta",
    "OpCount",
    "OpTime",
    "OpTimePerStep",
    "ProfilerNote",
    "ReportAdded",
    "Span",
    "StepSpan",
    "UnsetType",
    "field_docs",
    "field_problems",
    "to_builtins",
    "type_name",
]


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

    source: Annotated[str | None, Meta(description="`manifest` (measured by the collector), `user` (`--unprofiled-ms`) or `estimate`")]
    overhead_per_step_us: Annotated[float, Meta(description="the profiler's cost per step (µs)")]
    unprofiled_step_us: Annotated[float, Meta(description="the step without the profiler (µs)")]
    traced_savings_pct: Annotated[
        float | UnsetType, Meta(description="the fix's saving, % of the traced step")
    ] = UNSET
    unprofiled_savings_pct: Annotated[float, Meta(description="the fix's saving, % of the unprofiled step")]
    note: Annotated[str | UnsetType, Meta(description="the same in words")] = UNSET


class AfterLargerFixes(msgspec.Struct, kw_only=True):
    """What a fix still saves once the fixes that save more are made (its severity follows it)."""

    fixes: Annotated[list[str], Meta(description="the rules whose larger fixes come first")]
    savings_us: Annotated[float, Meta(description="what this fix saves per step after them (µs)")]
    savings_pct: Annotated[float, Meta(description="that as % of the step")]
    alone_savings_us: Annotated[float, Meta(description="what this fix saves per step made alone (µs)")]
    note: Annotated[str, Meta(description="the same in words")]


class ReportAdded(msgspec.Struct, kw_only=True):
    """Keys the replay (sections/fixrunner.py) adds to any rule's evidence, after the rule's own."""

    after_larger_fixes: Annotated[
        AfterLargerFixes | UnsetType,
        Meta(description="set when the finding is info only because larger fixes save the same time"),
    ] = UNSET
    profiler: Annotated[
        ProfilerNote | UnsetType,
        Meta(
            description="set when the profiler's cost explains the saving, or replaces a rule's own estimate"
        ),
    ] = UNSET


def to_builtins(obj: Any) -> Any:
    """`obj` with every struct turned into a dict of its fields in declaration order, `UNSET` ones left out;
    other values stay as they are (the JSON formatter formats them as it formats any dict's)."""
    if isinstance(obj, msgspec.Struct):
        return {
            k: to_builtins(v)
            for f, k in zip(obj.__struct_fields__, obj.__struct_encode_fields__, strict=True)
            if (v := getattr(obj, f)) is not UNSET
        }
    if isinstance(obj, dict):
        return {k: to_builtins(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_builtins(v) for v in obj)
    return obj


_SCALARS = {
    mi.IntType: "int",
    mi.FloatType: "float",
    mi.StrType: "str",
    mi.BoolType: "bool",
    mi.NoneType: "null",
    mi.AnyType: "any",
}


def type_name(t: mi.Type, sep: str = " | ") -> str:
    """A field's type in short: `float`, `int | null`, `[OpCount]`, `{str: float}`; a struct by its name."""
    if isinstance(t, mi.Metadata):
        return type_name(t.type, sep)
    if type(t) in _SCALARS:
        return _SCALARS[type(t)]
    if isinstance(t, mi.UnionType):
        return sep.join(type_name(x, sep) for x in t.types)
    if isinstance(t, (mi.ListType, mi.VarTupleType)):
        return f"[{type_name(t.item_type, sep)}]"
    if isinstance(t, mi.DictType):
        return "{" + f"{type_name(t.key_type, sep)}: {type_name(t.value_type, sep)}" + "}"
    if isinstance(t, mi.StructType):
        return t.cls.__name__
    return type(t).__name__


def held_struct(t: mi.Type) -> type[msgspec.Struct] | None:
    """The struct a field holds, itself, in a list or as one side of a union (`X | null`), else None."""
    if isinstance(t, mi.Metadata):
        return held_struct(t.type)
    if isinstance(t, mi.StructType):
        return t.cls
    if isinstance(t, (mi.ListType, mi.VarTupleType)):
        return held_struct(t.item_type)
    if isinstance(t, mi.UnionType):
        return next((c for x in t.types if (c := held_struct(x)) is not None), None)
    return None


class FieldDoc(msgspec.Struct, frozen=True):
    """One key of an evidence struct, for the docs."""

    key: str
    type: mi.Type
    description: str
    optional: bool  # present only sometimes (UNSET while the rule does not set it)
    holds: type[msgspec.Struct] | None  # the struct the key holds, if any


def field_docs(cls: type[msgspec.Struct]) -> list[FieldDoc]:
    """Each field of an evidence struct, in the JSON document's order."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return [
        FieldDoc(
            f.encode_name,
            f.type,
            (f.type.extra_json_schema or {}).get("description", "")
            if isinstance(f.type, mi.Metadata)
            else "",
            not f.required,
            held_struct(f.type),
        )
        for f in info.fields
    ]


def field_problems(cls: Any, where: str) -> list[str]:
    """What an evidence struct lacks: it is a msgspec.Struct with keyword-only fields, and every field of it and
    of the structs it holds has a description."""
    if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
        return [f"{where} is not a msgspec.Struct"]
    out, seen, todo = [], set(), [cls]
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        if getattr(c, "__match_args__", ()):  # positional fields: a reordering would swap values silently
            out.append(f"{where}: {c.__name__} is not kw_only (fields are passed by name)")
        for f in field_docs(c):
            if not f.description:
                out.append(f"{where}: field {c.__name__}.{f.key} has no description")
            if f.holds is not None:
                todo.append(f.holds)
    return out
