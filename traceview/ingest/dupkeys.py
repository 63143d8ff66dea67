"""A document with more than one top-level `traceEvents` key, made one with a single array holding them all.

JSON leaves duplicate keys to the reader and every reader here keeps one of them (msgspec the last; the C scanner
refuses the document), so a second `traceEvents` key used to discard the first array's events silently (issue 33).
A profiler writes one array; two come from a tool that appended or concatenated traces. Their events are kept,
all of them, in file order, with a warning; an array that repeats an earlier one byte for byte is read once.
"""

from __future__ import annotations

import re

import msgspec

_KEY = b'"traceEvents"'
_NUMBERED = re.compile(rb'"traceEvents#\d+"')
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])


def one_event_array(data: bytes) -> tuple[bytes, str | None]:
    """(`data` with its top-level `traceEvents` arrays joined into one, a warning saying so), or (`data`, None) when
    it has at most one (a string search decides that for every other document: no parse)."""
    if data.count(_KEY) < 2:
        return data, None
    # number every occurrence of the key: the top-level ones become distinct members a typed decode can list
    parts = data.split(_KEY)
    renamed = b"".join(p + b'"traceEvents#%d"' % k for k, p in enumerate(parts[:-1])) + parts[-1]
    del parts
    try:
        top = _TOP.decode(renamed)
    except (msgspec.DecodeError, msgspec.ValidationError):  # not an object: the readers say what it is
        return data, None
    arrays = [bytes(v) for k, v in top.items() if _NUMBERED.fullmatch(f'"{k}"'.encode())]
    arrays = [a for a in arrays if a.lstrip().startswith(b"[")]
    if len(arrays) < 2:
        return data, None
    kept: list[bytes] = []
    counts = []
    for a in arrays:
        a = _NUMBERED.sub(_KEY, a)  # (the key inside an event, restored)
        try:
            n = len(_ITEMS.decode(a))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return data, None
        counts.append(n)
        if a not in kept:
            kept.append(a)
    others = b",".join(msgspec.json.encode(k) + b":" + _NUMBERED.sub(_KEY, bytes(v))
                       for k, v in top.items() if not _NUMBERED.fullmatch(f'"{k}"'.encode()))
    bodies = [a.strip()[1:-1].strip() for a in kept]
    doc = b"{" + others + (b"," if others else b"") + b'"traceEvents":[' + b",".join(x for x in bodies if x) + b"]}"
    sizes = " and ".join(f"{n:,}" for n in counts) if len(counts) <= 4 else f"{sum(counts):,} in all"
    what = ("both read once (identical copies)" if len(kept) == 1 and len(arrays) == 2
            else f"{'all' if len(arrays) > 2 else 'both'} analyzed as one, in file order"
            + (f" ({len(arrays) - len(kept)} identical copies read once)" if len(kept) < len(arrays) else ""))
    return doc, (f"the document has {len(arrays)} top-level 'traceEvents' keys (JSON readers keep only one), with "
                 f"{sizes} events: {what}")
