"""`traceview` command line: analyze | rules | layers | collect | trigger."""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Callable
from pathlib import Path

from . import __version__
from .errors import TraceError
from .inputs import DEFAULT_MAX_BYTES


class ExitCode(enum.IntEnum):
    OK = 0
    FINDINGS = 1  # findings at or above --fail-on
    ERROR = 2  # usage, input or internal error


FORMATS = ("text", "json", "markdown", "sarif", "junit")


def _render(doc: dict, fmt: str, out_path: str | None) -> None:
    import importlib

    mod = importlib.import_module(f".formatters.{fmt}", __package__)
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            mod.render(doc, fh)
    else:
        mod.render(doc, sys.stdout)


def _progress(paths: list[str]) -> tuple[Callable[[str], None] | None, Callable[[], None]]:
    """A progress line on stderr for multi-file runs (stdout carries only the report)."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console

    con = Console(stderr=True)
    status = con.status("loading…")
    status.start()
    return (lambda p: status.update(f"analyzing {p}")), status.stop


def cmd_analyze(args: argparse.Namespace) -> int:
    import functools

    from . import report
    from .loader import load_file
    from .safe_text import terminal_line

    if args.paths.count("-") > 1:
        print("traceview: error: '-' (standard input) can be given only once", file=sys.stderr)
        return ExitCode.ERROR
    extend_report()
    ctx = build_ctx(args)
    on_trace, done = _progress(args.paths)

    def seen(path: str) -> None:  # the input being read, for an error line that names the right file
        args.current_input = path
        if on_trace:
            on_trace(path)

    try:
        rep = report.analyze(args.paths, step=args.step, ctx=ctx, on_trace=seen,
                             load=functools.partial(load_file, max_bytes=args.max_bytes))
    finally:
        done()
    doc = rep.to_dict()
    _render(doc, args.format, args.output)
    for e in rep.errors:
        print(f"traceview: error: {terminal_line(e['error'])}", file=sys.stderr)
    if rep.errors:
        return ExitCode.ERROR
    return exit_for_findings(doc, args)


# Hooks filled in by later stages (rules engine): keep the CLI free of analysis logic.
def build_ctx(args: argparse.Namespace) -> dict:
    from .rules_cli import build_ctx as rules_ctx

    return {"step": args.step, **rules_ctx(args)}


def exit_for_findings(doc: dict, args: argparse.Namespace) -> int:
    from .rules_cli import exit_code

    return ExitCode(exit_code(doc, args))


def extend_report() -> None:
    """Register the optional report sections (rules, classifier, layers) once."""
    from .engine import register

    register()


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="traceview", description="PyTorch profiler trace analyzer and bottleneck classifier")
    p.add_argument("--version", action="version", version=f"traceview {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="analyze trace files or directories of rank files")
    a.add_argument("paths", nargs="+", help="trace files (.json/.json.gz), directories, or - for stdin")
    a.add_argument("--format", choices=FORMATS, default="text")
    a.add_argument("--step", type=int, default=None, help="analyze only ProfilerStep#N")
    a.add_argument("-o", "--output", default=None, help="write the report to a file instead of stdout")
    a.add_argument("--max-bytes", type=_size, default=DEFAULT_MAX_BYTES, metavar="SIZE",
                   help="largest input held in memory, after decompression (e.g. 512M, 16G; default 8G); "
                        "a bigger or gzip-bomb input is an error")
    a.set_defaults(func=cmd_analyze)
    for hook in PARSER_HOOKS:
        hook(sub, a)
    try:  # `collect` / `trigger` live with the collectors (torch is imported only when they run)
        from collectors.cli import add_parsers
    except ImportError:
        pass
    else:
        add_parsers(sub)
    return p


def _rules_hook(sub: argparse._SubParsersAction, analyze: argparse.ArgumentParser) -> None:
    from .rules_cli import add_parsers

    add_parsers(sub, analyze)


PARSER_HOOKS: list[Callable[[argparse._SubParsersAction, argparse.ArgumentParser], None]] = [_rules_hook]


def _layers_parser(sub: argparse._SubParsersAction, analyze: argparse.ArgumentParser) -> None:
    from .layers_view import add_parser

    add_parser(sub, analyze)


PARSER_HOOKS.append(_layers_parser)


def _size(text: str) -> int:
    from .inputs import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _prefetch_first_input(argv: list[str]) -> None:
    """`analyze`/`layers`: begin reading the first trace before the heavy imports (see decode.prefetch)."""
    if not argv or argv[0] not in ("analyze", "layers"):
        return
    from .decode import prefetch, trace_files

    cap = DEFAULT_MAX_BYTES
    try:
        for k, a in enumerate(argv):  # the cap the loader will use, or no prefetch
            if a == "--max-bytes" or a.startswith("--max-bytes="):
                cap = _size(a.split("=", 1)[1] if "=" in a else argv[k + 1])
        for a in argv[1:]:
            if a.startswith("-"):
                continue
            p = Path(a)
            if p.is_dir():
                files = trace_files(p)
                p = files[0] if files else None
            if p is not None and p.is_file():
                prefetch(p, cap)
                return
    except (OSError, IndexError, argparse.ArgumentTypeError, TraceError):  # the loader reports these, or argparse
        return


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _prefetch_first_input(argv)
    parser = make_parser()
    args = parser.parse_args(argv)
    from .safe_text import terminal_line

    try:
        return int(args.func(args))
    except TraceError as e:
        print(f"traceview: error: {terminal_line(str(e))}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("traceview: interrupted", file=sys.stderr)
        return ExitCode.ERROR
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as e:  # noqa: BLE001 - last line of defence: one line, never a traceback
        # name the input being read when it failed, not the first one given
        where = getattr(args, "current_input", None) or (args.paths[0] if getattr(args, "paths", None) else "")
        first = (str(e).strip().splitlines() or [""])[0]  # polars appends the failing expression on more lines
        msg = f"internal error ({type(e).__name__}: {first})"
        msg = f"{where}: {msg}" if where else msg
        print(f"traceview: {terminal_line(msg)}", file=sys.stderr)
        return ExitCode.ERROR


if __name__ == "__main__":
    sys.exit(main())
