"""Rule thresholds: defaults from each rule's OPTIONS, overridden by `[tool.traceview]` in the
pyproject.toml of the working directory (or `--config FILE`), then by `--set rule.option=value`.

```toml
[tool.traceview]
select = ["TV1", "TV2"]      # optional, as --select
ignore = ["TV301"]           # optional, as --ignore
fail-on = "warning"          # optional, as --fail-on

[tool.traceview.launch-bound]  # a rule's slug (or code)
moderate_pct = 5.0

[tool.traceview.baseline]      # regression gate of `traceview batch --baseline` (see baseline.py)
max-regression = 5.0
```
A `--config` file may hold the same keys at the top level or under `[tool.traceview]`. Unknown rules,
unknown options and values of the wrong type are errors (exit 2).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .errors import TraceError

TOP_KEYS = {"select", "ignore", "fail-on", "fail_on"}
SECTIONS = {"baseline"}  # tables that are not rules: [tool.traceview.baseline] (read by baseline.thresholds)


def defaults() -> dict[str, dict[str, Any]]:
    from traceview.rules import RULES

    return {m.NAME: {k: o.default for k, o in m.OPTIONS.items()} for m in RULES.values()}


def _rule_name(key: str) -> str:
    from traceview.rules import BY_NAME, RULES

    if key in BY_NAME:
        return key
    if key.upper() in RULES:
        return RULES[key.upper()].NAME
    raise TraceError(f"config: unknown rule {key!r} (rules: {', '.join(sorted(BY_NAME))})")


def _coerce(rule: str, opt: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if isinstance(value, bool):
            return value
    elif isinstance(default, int | float) and not isinstance(value, bool):
        # a number: finite and >= 0 (every option is a count, a time, a ratio or a percentage): `inf` would switch
        # a rule off and `nan` make every comparison false, silently
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            x = math.nan
        if not math.isfinite(x) or x < 0 or (isinstance(default, int) and not x.is_integer()):
            raise TraceError(f"config: {rule}.{opt} must be a {type(default).__name__} (finite, >= 0), got {value!r}")
        return int(x) if isinstance(default, int) else x
    elif isinstance(default, str):
        return str(value)
    raise TraceError(f"config: {rule}.{opt} must be a {type(default).__name__}, got {value!r}")


def read_file(path: str | Path) -> dict[str, Any]:
    """The traceview settings of a config file (its `[tool.traceview]` table, or the whole file)."""
    p = Path(path)
    return _parse(p, _read(p))


def _read(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"config: {p}: no such file") from None
    except OSError as e:
        raise TraceError(f"config: {p}: cannot read it ({e.strerror})") from None


def _parse(p: Path, raw: bytes) -> dict[str, Any]:
    import tomllib  # only when there is a file to parse (~7 ms of start-up otherwise)

    try:  # (newlines as `open` in text mode gives them)
        data = tomllib.loads(raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"))
    except UnicodeDecodeError:
        raise TraceError(f"config: {p}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise TraceError(f"config: {p}: {e}") from None
    if "tool" in data:
        return data.get("tool", {}).get("traceview", {})
    return data


def _may_configure(raw: bytes) -> bool:
    """False when a pyproject.toml's bytes cannot hold a `traceview` table, so another project's file is not
    parsed (nor tomllib imported: ~7 ms).

    A TOML key spells `traceview` literally (bare, "quoted" or 'literal') unless a basic string writes a
    letter as a \\u or \\U escape; a file with neither cannot configure traceview.
    """
    if b"\\u" in raw or b"\\U" in raw or b'"""' in raw or b"'''" in raw:
        return True  # (escapes and multi-line strings: parsed, not guessed at)
    if b"traceview" not in raw:
        return False
    # A project that only names traceview (a dependency, its own name, a script) does not configure it: every
    # `traceview` then sits under a table header that is not `[tool]` or `[tool.traceview...]`. The headers
    # are the lines that start with `[` outside a multi-line array.
    table: tuple[str, ...] | None = ()  # the current table's key path; None: not known
    depth = 0  # open brackets of a multi-line array value
    for line in raw.split(b"\n"):
        if b"[" in line or b"]" in line:
            rest = _STRING_OR_COMMENT.sub(b"", line)
            if b"'" in rest or b'"' in rest:
                return True  # a string the line does not close: not guessed at
            code = _STRING_OR_COMMENT.sub(_keep_keys, line)
            if depth == 0 and code.lstrip().startswith(b"["):
                table = _header(code)
            depth += code.count(b"[") - code.count(b"]")
            if depth < 0:
                return True
        if b"traceview" in line and (
            table is None or (table[:1] in ((), ("tool",)) and table[1:2] in ((), ("traceview",)))
        ):
            return True
    return False


#: a one-line basic string (escapes included), a literal string, or a comment
_STRING_OR_COMMENT = re.compile(rb"\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|#.*")
_BARE_KEY = re.compile(rb"[A-Za-z0-9_-]+")
_HEADER = re.compile(rb"\s*\[\[?(.*?)\]\]?\s*")


def _keep_keys(m: re.Match) -> bytes:
    """A string as a key may spell it (kept), any other string (b'""'), a comment (dropped)."""
    s = m[0]
    return b"" if s[:1] == b"#" else s if _BARE_KEY.fullmatch(s[1:-1]) else b'""'


def _header(code: bytes) -> tuple[str, ...] | None:
    """The key path of a `[table]` or `[[array]]` header (quotes stripped), None when the line is not one."""
    m = _HEADER.fullmatch(code)
    if m is None:
        return None
    parts = [p.strip().strip(b"\"'") for p in m.group(1).split(b".")]
    if not all(_BARE_KEY.fullmatch(p) for p in parts):
        return None
    return tuple(p.decode() for p in parts)


def load(config_file: str | None = None, sets: list[str] | None = None, cwd: str | Path | None = None) -> dict:
    """{"options": {rule: {opt: value}}, "select": [...]|None, "ignore": [...], "fail_on": str|None, "source": path}."""
    raw: dict[str, Any] = {}
    source = None
    if config_file:
        raw, source = read_file(config_file), str(config_file)
    else:
        pp = Path(cwd or Path.cwd()) / "pyproject.toml"
        text = _read(pp) if pp.is_file() else None  # read once: tested, then parsed
        if text is not None and _may_configure(text):
            raw, source = _parse(pp, text), str(pp)
    opts = defaults()
    for key, table in raw.items():
        if key in TOP_KEYS or key in SECTIONS:
            continue
        rule = _rule_name(key)
        if not isinstance(table, dict):
            raise TraceError(f"config: [{key}] must be a table of options")
        for opt, val in table.items():
            if opt not in opts[rule]:
                raise TraceError(f"config: unknown option {rule}.{opt} (options: {', '.join(sorted(opts[rule]))})")
            opts[rule][opt] = _coerce(rule, opt, val, opts[rule][opt])
    for s in sets or []:
        if "=" not in s or "." not in s.split("=", 1)[0]:
            raise TraceError(f"--set {s!r}: expected RULE.OPTION=VALUE")
        lhs, val = s.split("=", 1)
        key, opt = lhs.rsplit(".", 1)
        rule = _rule_name(key.strip())
        opt = opt.strip()
        if opt not in opts[rule]:
            raise TraceError(f"--set: unknown option {rule}.{opt} (options: {', '.join(sorted(opts[rule]))})")
        opts[rule][opt] = _coerce(rule, opt, val.strip(), opts[rule][opt])
    fail_on = raw.get("fail-on", raw.get("fail_on"))
    if fail_on is not None and fail_on not in ("info", "warning", "error"):
        raise TraceError(f"config: fail-on must be info, warning or error, got {fail_on!r}")
    baseline = raw.get("baseline") or {}
    if not isinstance(baseline, dict):
        raise TraceError("config: [baseline] must be a table")
    sel = {}
    for key in ("select", "ignore"):  # a list of codes or slugs (or one comma-separated string, as on the CLI)
        v = raw.get(key)
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",") if c.strip()]
        if v is not None and not (isinstance(v, list) and all(isinstance(c, str) for c in v)):
            raise TraceError(f"config: {key} must be a list of rule codes or slugs, got {v!r}")
        sel[key] = v
    return {"options": opts, "select": sel["select"], "ignore": sel["ignore"] or [], "fail_on": fail_on,
            "source": source, "baseline": baseline}
