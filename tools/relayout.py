"""The package layout of issue 24 (old module -> new module) and the tool that rewrites imports to it.

    python tools/relayout.py map                 # the old -> new module table
    python tools/relayout.py rewrite FILE...     # rewrite imports and module references in place
    python tools/relayout.py move                # (done once) git mv every module, then rewrite the tree

`rewrite` changes, in any text file: dotted references (`from traceview.loader import x`,
`import traceview.cli as c`, `"traceview.decode.prefetch"` in a monkeypatch, `traceview.cli:main`) and file
paths (`traceview/loader.py`); in Python files also `from traceview import loader` and relative imports
(`from .loader import x`, `from ..units import num`), re-resolved from the file's own (new) place. A module
whose name changed keeps its old name in the importing file (`from .ingest import lenient as lax`), so no
line but the import changes. Porting a branch written against the old layout: `rewrite` its files where they
are; to move one of its new files as well, `git mv` it, then `rewrite NEW --was OLD` (its relative imports
read from OLD). Rewriting again changes nothing, except that a bare `traceview.cli` (now a package) is read
as the old module and becomes `traceview.cli.main`.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: old module -> new module (traceview/_scan is the C extension: its .c source moves with it)
MOVES: dict[str, str] = {
    # bytes -> columns
    "traceview.inputs": "traceview.ingest.inputs",
    "traceview.instream": "traceview.ingest.stream",
    "traceview.fastscan": "traceview.ingest.fastscan",
    "traceview._scan": "traceview.ingest._scan",
    "traceview.decode": "traceview.ingest.decode",
    "traceview.lax": "traceview.ingest.lenient",
    "traceview.structs": "traceview.ingest.structs",
    "traceview.argstructs": "traceview.ingest.argstructs",
    "traceview.argtables": "traceview.ingest.argtables",
    "traceview.categories": "traceview.ingest.categories",
    "traceview.heap": "traceview.ingest.heap_trim",
    "traceview.manifest": "traceview.ingest.manifest",
    "traceview.loader": "traceview.ingest.loader",
    # analyses
    "traceview.classify": "traceview.analyses.classify",
    # report sections
    "traceview.profiling": "traceview.sections.profiling",
    "traceview.verdict": "traceview.sections.verdict",
    "traceview.projection": "traceview.sections.projection",
    "traceview.memory_section": "traceview.sections.memory",
    "traceview.cpu_view": "traceview.sections.cpu",
    "traceview.layer_section": "traceview.sections.layers",
    "traceview.timeline_view": "traceview.sections.timeline",
    "traceview.straggler": "traceview.sections.straggler",
    "traceview.job": "traceview.sections.job",
    "traceview.rulerunner": "traceview.sections.findings",  # (after the move commit: the findings section)
    # the agent interface (issue 29), landed after the move
    "traceview.mcp_server": "traceview.agent.server",
    "traceview.mcp_bounds": "traceview.agent.bounds",
    "traceview.mcp_roots": "traceview.agent.roots",
    "traceview.mcp_cli": "traceview.cli.mcp",
    # framework layouts, Perfetto, object storage (issue 28), landed after the move
    "traceview.layouts": "traceview.ingest.layouts",
    "traceview.series": "traceview.ci.series",
    "traceview.job_inputs": "traceview.ci.job_inputs",
    "traceview.annotate": "traceview.cli.annotate",
    "traceview.perfetto": "traceview.formatters.perfetto",
    "traceview.remote": "traceview.ingest.remote",
    # the replayed fixes (issue 25), landed after the move
    "traceview.fixrunner": "traceview.sections.fixrunner",
    # views: the command line
    "traceview.cli": "traceview.cli.main",
    "traceview.ci_cli": "traceview.cli.ci",
    "traceview.rules_cli": "traceview.cli.rules",
    "traceview.progress": "traceview.cli.progress",
    "traceview.deferred": "traceview.cli.lazy_stdlib",
    # views: CI (diff, baselines, batch, job discovery)
    "traceview.diff": "traceview.ci.diff",
    "traceview.diff_render": "traceview.ci.diff_render",
    "traceview.baseline": "traceview.ci.baseline",
    "traceview.batch": "traceview.ci.batch",
    "traceview.batch_out": "traceview.ci.batch_out",
    "traceview.discover": "traceview.ci.discover",
    "traceview.jobrun": "traceview.ci.jobrun",
    "traceview.digest": "traceview.ci.digest",
}
BACK: dict[str, str] = {v: k for k, v in MOVES.items()}
#: the new packages (each gets an __init__.py with a one-line docstring)
PACKAGES: dict[str, str] = {
    "traceview.ingest": "Reading a trace: bytes -> event columns -> the `Trace` model (inputs, streaming, the C "
    "scanner, decoding, lenient repairs, the args tables).",
    "traceview.sections": "The report's sections: each module computes one part of the analyze document.",
    "traceview.cli": "The `traceview` command line: analyze, rules, layers and the CI commands.",
    "traceview.ci": "CI over analyze documents: diff, baselines, batch runs and the discovery of jobs.",
}


def _children(new_pkg: str) -> set[str]:
    return {v[len(new_pkg) + 1 :].split(".")[0] for v in MOVES.values() if v.startswith(new_pkg + ".")}


def _dotted_re() -> re.Pattern[str]:
    # longest first; an old module that became a package (`traceview.cli`) is not matched again as the
    # prefix of its own new children (`traceview.cli.main`), which keeps rewriting idempotent
    # (`from traceview.cli import main` is the old module's function `main`: still rewritten)
    alts = []
    for old in sorted(MOVES, key=len, reverse=True):
        kids = sorted(_children(old))
        imported = "|".join(k for k in kids if k != "main")
        guard = rf"(?!\.(?:{'|'.join(kids)})\b| import (?:{imported})\b)" if kids else ""
        alts.append(re.escape(old) + guard)
    return re.compile(rf"(?<![\w.])({'|'.join(alts)})(?![\w])")


def _path_re() -> re.Pattern[str]:
    alts = [
        re.escape(old.replace(".", "/")) + (r"\.c" if old.endswith("_scan") else r"\.py")
        for old in sorted(MOVES, key=len, reverse=True)
    ]
    return re.compile(rf"(?<![\w/])({'|'.join(alts)})(?![\w])")


DOTTED, PATHS = _dotted_re(), _path_re()
#: imports by a name in a string, relative to the caller's package (`import_module(f".formatters.{fmt}",
#: __package__)`): a moved caller needs one more dot, which only a reader can tell
DYNAMIC = re.compile(r"import_module\(\s*f?[\"']\.")


def _new_path(old_path: str) -> str:
    stem, ext = old_path.rsplit(".", 1)
    return MOVES[stem.replace("/", ".")].replace(".", "/") + "." + ext


def module_of(path: Path) -> tuple[str, bool] | None:
    """(module name, is a package __init__) of a file in traceview/ or rules/ (= traceview.rules)."""
    rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    parts = list(rel.with_suffix("").parts)
    if not parts or parts[0] not in ("traceview", "rules"):
        return None
    if parts[0] == "rules":
        parts = ["traceview", *parts]
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    return ".".join(parts), is_pkg


def _relative(from_pkg: str, target: str) -> str:
    """`target` written relative to package `from_pkg` (both inside traceview)."""
    a, b = from_pkg.split("."), target.split(".")
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return "." * (len(a) - n + 1) + ".".join(b[n:])


def _alias(name: str, asname: str | None) -> str:
    return f"{name} as {asname}" if asname and asname != name else name


def _rewrite_import(node: ast.ImportFrom, old_pkg: str, new_pkg: str | None) -> list[str] | None:
    """The `from X import ...` statements that replace `node`, or None when it needs no change."""
    if node.level:
        up = old_pkg.split(".")[: len(old_pkg.split(".")) - (node.level - 1)]
        base = ".".join([*up, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    if not base.startswith("traceview"):
        return None
    groups: dict[str, list[str]] = {}
    out = []
    for a in node.names:
        full = f"{base}.{a.name}"
        if full in BACK and full != MOVES.get(base):  # already the new layout (`from traceview.cli import rules`;
            # `from .cli import main` is the old module's function)
            groups.setdefault(base, []).append(_alias(a.name, a.asname))
        elif full in MOVES:  # a module imported from its package
            target = MOVES[full]
            frm, leaf = target.rsplit(".", 1)
            alias = a.asname or (a.name if leaf != a.name else None)
            if frm in MOVES and not node.level:  # `from traceview.cli import main` would read as the old function
                out.append(f"import {target} as {alias or leaf}")
                continue
            groups.setdefault(frm, []).append(_alias(leaf, alias))
        else:
            groups.setdefault(base if base in BACK else MOVES.get(base, base), []).append(_alias(a.name, a.asname))
    for frm, names in groups.items():
        spec = _relative(new_pkg, frm) if node.level and new_pkg else frm
        out.append(f"from {spec} import {', '.join(names)}")
    orig_spec = "." * node.level + (node.module or "")
    if (
        len(out) == 1
        and out[0] == f"from {orig_spec} import {', '.join(_alias(a.name, a.asname) for a in node.names)}"
    ):
        return None
    return out


def _package(path: Path) -> str | None:
    mod = module_of(path)
    if not mod:
        return None
    name, is_pkg = mod
    return name if is_pkg else name.rsplit(".", 1)[0]


def rewrite_python(text: str, path: Path, was: Path | None = None) -> str:
    """Relative imports and `from traceview import <module>` of one Python file, re-resolved: its relative
    imports read from `was` (the place it was written for; default: where it is), written from `path`."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    new_pkg = _package(path)
    old_pkg = _package(was) if was else new_pkg
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or (node.level and not old_pkg):
            continue
        new = _rewrite_import(node, old_pkg or "", new_pkg)
        if new is not None:
            edits.append((node, new))
    for node, new in sorted(edits, key=lambda e: e[0].lineno, reverse=True):
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        head, tail = lines[first][: node.col_offset], lines[last][node.end_col_offset :]
        orig_spec = "." * node.level + (node.module or "")
        old_names = ", ".join(_alias(a.name, a.asname) for a in node.names)
        if len(new) == 1 and new[0].startswith("from ") and new[0].split(" import ", 1)[1] == old_names:
            # only the module changed: keep the statement's layout (parentheses, comments)
            seg = "".join(lines[first : last + 1])
            start = len(head)
            seg = seg[:start] + seg[start:].replace(
                f"from {orig_spec} import", new[0].split(" import ")[0] + " import", 1
            )
            lines[first : last + 1] = [seg]
            continue
        indent = head if not head.strip() else ""
        body = ("\n" + indent).join(new)
        lines[first : last + 1] = [head + body + tail if tail.endswith("\n") else head + body + tail + "\n"]
    return "".join(lines)


#: `from traceview import a, b as c` written inside a string (code a test runs in a subprocess)
FROM_PKG = re.compile(r"from traceview import (\w+(?: as \w+)?(?:, \w+(?: as \w+)?)*)")


def _from_pkg(m: re.Match[str]) -> str:
    node = ast.parse(m.group(0)).body[0]
    assert isinstance(node, ast.ImportFrom)
    new = _rewrite_import(node, "", None)
    return m.group(0) if new is None else "; ".join(new)


def rewrite_text(text: str) -> str:
    """Dotted module references, `from traceview import <module>` and file paths, in any text."""
    text = DOTTED.sub(lambda m: MOVES[m.group(1)], text)
    text = PATHS.sub(lambda m: _new_path(m.group(1)), text)
    return FROM_PKG.sub(_from_pkg, text)  # (last: it emits new names only)


def rewrite_file(path: Path, was: Path | None = None) -> bool:
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return False
    new = rewrite_text(text)  # (first: the import rewriting below emits new names only)
    if path.suffix == ".py":
        new = rewrite_python(new, path, was)
    if new != text:
        path.write_text(new)
        return True
    return False


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    skip = ("sample_traces/", "tools/relayout.py")
    return [ROOT / f for f in out.splitlines() if not f.startswith(skip) and (ROOT / f).is_file()]


def move() -> None:
    """git mv every module of MOVES (and the C source), add the new packages, rewrite every tracked file."""
    for pkg in PACKAGES:
        (ROOT / pkg.replace(".", "/")).mkdir(exist_ok=True)
    was: dict[Path, Path] = {}
    for old, new in MOVES.items():
        ext = ".c" if old.endswith("_scan") else ".py"
        src, dst = old.replace(".", "/") + ext, new.replace(".", "/") + ext
        subprocess.run(["git", "mv", src, dst], cwd=ROOT, check=True)
        was[ROOT / dst] = ROOT / src
    for pkg, doc in PACKAGES.items():
        init = ROOT / pkg.replace(".", "/") / "__init__.py"
        init.write_text(f'"""{doc}"""\n')
        subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    changed = [p for p in _tracked() if rewrite_file(p, was.get(p))]
    print(f"moved {len(MOVES)} modules; rewrote {len(changed)} files")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("map", help="print the old -> new module table")
    rw = sub.add_parser("rewrite", help="rewrite imports and module references in the given files")
    rw.add_argument("files", nargs="+", type=Path)
    rw.add_argument("--was", type=Path, help="(one file) where it was written: its relative imports read from there")
    sub.add_parser("move", help="(once) git mv the modules and rewrite the tree")
    a = ap.parse_args(argv)
    if a.cmd == "map":
        for old, new in MOVES.items():
            print(f"{old:28} -> {new}")
    elif a.cmd == "rewrite":
        if a.was and len(a.files) != 1:
            ap.error("--was takes one file")
        for f in a.files:
            if f.resolve() == Path(__file__).resolve():  # its own map would be rewritten into new -> new
                print(f"skipped {f}: the tool's own map")
                continue
            if rewrite_file(f, a.was):
                print(f"rewrote {f}")
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if DYNAMIC.search(line):  # a relative name in a string: no import statement to rewrite
                    print(f"{f}:{n}: check by hand: {line.strip()}")
    else:
        move()
    return 0


if __name__ == "__main__":
    sys.exit(main())
