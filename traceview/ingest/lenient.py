"""Lenient decoding for traces whose values have unexpected JSON types.

The typed structs of `decode` reject a whole document (or a whole `args` object) for one odd value.
Here the same bytes are decoded without types and each value is checked against the field it fills:
kept as is, coerced when that is lossless (`254.0` -> 254, `"4,32,1"` -> [4, 32, 1], `"12.5"` -> 12.5),
or dropped. Every coercion and drop is counted; the loader turns the counts into one warning each.
Only files with odd values take this path, so a per-value Python loop is acceptable here.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from typing import Any, Union, get_args, get_origin

import msgspec

from . import structs as d

_DROP = object()
_INT64 = (-(2**63), 2**63 - 1)
_NON_EVENT = Union[None, bool, int, float, str, list[Any]]  # noqa: UP007 - msgspec needs a typing.Union


@functools.cache
def _lax_decoders() -> tuple[msgspec.json.Decoder, msgspec.json.Decoder]:
    """(the document with every member untyped: events as lax events or anything else, to check each one; a legacy
    trace's bare event list the same way). Built on the first file that needs them (~0.8 ms of every start-up
    otherwise: only files with odd values take this path)."""
    doc_lax = msgspec.defstruct(
        "_DocLax", [("traceEvents", list[d.EvLax | _NON_EVENT])]  # type: ignore[valid-type]
        + [(f.name, Any, None) for f in msgspec.structs.fields(d.Doc) if f.name != "traceEvents"], gc=False)
    return (msgspec.json.Decoder(doc_lax),
            msgspec.json.Decoder(list[d.EvLax | _NON_EVENT]))  # type: ignore[valid-type]


def _kind(v: Any) -> str:
    return "null" if v is None else {bool: "bool", int: "int", float: "float", str: "str", list: "array",
                                     dict: "object"}.get(type(v), type(v).__name__)


def _as_str(v: Any) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, bool | int | float):
        return str(v)
    return _DROP


def _as_int(v: Any) -> Any:
    """int within int64 from an int, an integral float or a decimal / 0x-hex string."""
    if isinstance(v, bool):
        return _DROP
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    elif isinstance(v, str):
        t = v.strip()
        if re.fullmatch(r"-?0[xX][0-9a-fA-F]+", t):
            v = int(t, 16)
        elif re.fullmatch(r"-?\d+(\.0*)?", t):
            v = int(t.split(".")[0])
        else:
            return _DROP
    if isinstance(v, int) and _INT64[0] <= v <= _INT64[1]:
        return v
    return _DROP


def int_in(v: Any, lo: int, hi: int) -> int | None:
    """`v` as an int in [lo, hi] (an int, an integral float or a decimal string), else None: the one reader of a
    whole number from untrusted JSON (a rank of `Infinity` or a world size of `1e400` is no number at all)."""
    v = _as_int(v)
    return v if v is not _DROP and lo <= v <= hi else None


def json_safe(v: Any) -> Any:
    """A JSON value with its non-finite floats (NaN, Infinity, 1e400) dropped: what a report may copy from a trace's
    metadata and write as strict JSON."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    return v


#: the `deviceProperties` fields an analysis reads, with the smallest usable value (ids from 0, counts from 1)
_DEVICE_INTS = {"id": 0, "numSms": 1, "totalGlobalMem": 1}


def device_properties(raw: Any, warnings: list[str]) -> list[dict]:
    """The `deviceProperties` entries (objects only) with every field an analysis reads usable: `id`, `numSms`,
    `totalGlobalMem` whole numbers in range, `name` a string; an unusable one is dropped from its entry, said once
    per field with its count (`numSms: 0` no longer passes for a part with no SMs)."""
    if not isinstance(raw, list):
        return []
    out, bad = [], Counter()
    for p in raw:
        if not isinstance(p, dict):
            continue
        p = json_safe(p)
        for key, lo in _DEVICE_INTS.items():
            if key in p and int_in(p[key], lo, 2**62) is None:
                bad[f"{key} (not a whole number >= {lo})"] += 1
                del p[key]
            elif key in p:
                p[key] = int_in(p[key], lo, 2**62)
        if "name" in p and not isinstance(p["name"], str):
            bad["name (not a string)"] += 1
            del p["name"]
        out.append(p)
    if bad:
        warnings.append("ignored unusable deviceProperties fields: "
                        + ", ".join(f"{k} x{n:,}" for k, n in sorted(bad.items())))
    return out


def _float(v: int | float) -> float:
    """A JSON number as a float; an integer beyond a double is infinite, as its digits read as a float are (the
    loader skips an event whose time or duration is out of range, and says so)."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _as_float(v: Any) -> Any:
    if isinstance(v, bool):
        return _DROP
    try:
        if isinstance(v, int | float):
            return _float(v)
        if isinstance(v, str):
            f = float(v.strip().replace(",", "."))
            return _DROP if math.isnan(f) else f
    except (ValueError, OverflowError):
        return _DROP
    return _DROP


def _as_id(v: Any) -> Any:
    """pid / tid / flow id: int or str; an integral float becomes an int, any other scalar a str."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int | str):
        return v
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and v.is_integer() else str(v)
    return _DROP


def _as_dim3(v: Any) -> Any:
    """grid / block: [x, y, z] from a list of numbers or a string like "4,32,1" / "(4, 32, 1)"."""
    if isinstance(v, str):
        parts = [p for p in re.split(r"[\s,x()\[\]]+", v) if p]
        v = parts
    if not isinstance(v, list) or len(v) > 3:
        return _DROP
    out = [None if x is None else _as_int(x) for x in v]
    return _DROP if any(x is _DROP for x in out) else d.Dim3(*out)


_EVENT_FIELDS = {"ph": (_as_str, ""), "cat": (_as_str, ""), "name": (_as_str, ""), "pid": (_as_id, 0),
                 "tid": (_as_id, 0), "ts": (_as_float, None), "dur": (_as_float, None), "id": (_as_id, None)}


def _event(e: d.EvLax, issues: Counter) -> d.Ev:
    kw: dict[str, Any] = {"args": e.args}
    for f, (conv, default) in _EVENT_FIELDS.items():
        v = getattr(e, f)
        if v is None:
            if f in ("pid", "tid"):
                issues[("dropped", f, "null")] += 1
            kw[f] = default
            continue
        if isinstance(v, str) and f in ("ph", "cat", "name"):
            kw[f] = v
            continue
        if f in ("ts", "dur") and isinstance(v, int | float) and not isinstance(v, bool):
            kw[f] = _float(v)
            continue
        if f in ("pid", "tid", "id") and isinstance(v, int | str) and not isinstance(v, bool):
            kw[f] = v
            continue
        got = conv(v)
        if got is _DROP:
            issues[("dropped", f, _kind(v))] += 1
            kw[f] = default
        else:
            issues[("coerced", f, _kind(v))] += 1
            kw[f] = got
    return d.Ev(**kw)


def decode_lax(data: bytes, warnings: list[str], legacy: bool = False) -> d.Doc:
    """Decode without types, then coerce event fields (and drop what is not an event object)."""
    doc_lax, legacy_lax = _lax_decoders()
    if legacy:
        lax_evs, top = legacy_lax.decode(data), None
    else:
        top = doc_lax.decode(data)
        lax_evs = top.traceEvents
    issues: Counter = Counter()
    evs = []
    for e in lax_evs:
        if isinstance(e, d.EvLax):
            evs.append(_event(e, issues))
        else:
            issues[("skipped", "(event)", _kind(e))] += 1
    if top is None:
        doc = d.Doc(traceEvents=evs)
    else:
        doc_kw: dict[str, Any] = {}
        for f in msgspec.structs.fields(d.Doc):
            if f.name == "traceEvents":
                continue
            v = getattr(top, f.name)
            try:
                doc_kw[f.name] = msgspec.convert(v, f.type)
            except msgspec.ValidationError:
                issues[("dropped", f.name, _kind(v))] += 1
        doc = d.Doc(traceEvents=evs, **doc_kw)
    warnings.extend(describe(issues, "event"))
    return doc


def describe(issues: Counter, what: str) -> list[str]:
    """One warning per action (coerced / dropped / skipped), listing the fields with counts."""
    out = []
    for action, verb in (("skipped", "skipped {n:,} entries of 'traceEvents' that are not objects"),
                         ("coerced", "coerced {n:,} {what} value(s) of an unexpected type to the expected one"),
                         ("dropped", "ignored {n:,} {what} value(s) of an unusable type or range")):
        rows = sorted(((f, k, n) for (a, f, k), n in issues.items() if a == action), key=lambda r: -r[2])
        if not rows:
            continue
        n = sum(r[2] for r in rows)
        if action == "skipped":
            out.append(verb.format(n=n) + " (" + ", ".join(f"{c:,} {k}" for _f, k, c in rows) + ")")
            continue
        detail = ", ".join(f"{f} ({k}) x{c:,}" for f, k, c in rows[:8]) + (" ..." if len(rows) > 8 else "")
        out.append(verb.format(n=n, what=what) + f": {detail}")
    return out


# ---- args ---------------------------------------------------------------------------------------

_ARG_FIELDS: dict[type, list[tuple[str, str, Any]]] = {}


def _arg_fields(typ: type) -> list[tuple[str, str, Any]]:
    got = _ARG_FIELDS.get(typ)
    if got is None:
        got = _ARG_FIELDS[typ] = [(f.name, f.encode_name, f.type) for f in msgspec.structs.fields(typ)]
    return got


def _coerce(v: Any, typ: Any) -> Any:
    """`v` as `typ` (the field's annotation) when that is lossless, else _DROP."""
    if typ is d.Dim3:
        return _as_dim3(v)
    opts = [t for t in get_args(typ) if t is not type(None)] if get_args(typ) and get_origin(typ) is not list \
        else [typ]
    for t in opts:
        if t is int:
            got = _as_int(v)
        elif t is float:
            got = _as_float(v)
        elif t is str:
            got = _as_str(v)
        elif get_origin(t) is list:
            got = [_as_int(x) for x in v] if isinstance(v, list) else _DROP
            got = _DROP if got is _DROP or any(x is _DROP for x in got) else got
        else:
            got = _DROP
        if got is not _DROP:
            return got
    return _DROP


def args_lenient(raw: msgspec.Raw | bytes, typ: type, issues: Counter | None) -> Any:
    """One args object as `typ`, keeping every field that validates, coercing or dropping the others."""
    issues = issues if issues is not None else Counter()
    try:
        obj = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        issues[("dropped", "args", "invalid")] += 1
        return typ()
    if not isinstance(obj, dict):
        issues[("dropped", "args", _kind(obj))] += 1
        return typ()
    kw: dict[str, Any] = {}
    for name, key, ftype in _arg_fields(typ):
        if key not in obj:
            continue
        v = obj[key]
        if ftype is msgspec.Raw:
            kw[name] = msgspec.Raw(msgspec.json.encode(v))
            continue
        try:
            kw[name] = msgspec.convert(v, ftype)
            continue
        except msgspec.ValidationError:
            pass
        got = _coerce(v, ftype)
        if got is _DROP:
            issues[("dropped", key, _kind(v))] += 1
        else:
            issues[("coerced", key, _kind(v))] += 1
            kw[name] = got
    return typ(**kw)
