"""`traceview` command line: analyze | rules | layers | collect | trigger."""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Callable
from pathlib import Path

from . import __version__
from .formatters import TEXT_SECTIONS


class ExitCode(enum.IntEnum):
    OK = 0
    FINDINGS = 1  # findings at or above --fail-on
    ERROR = 2  # usage, input or internal error


FORMATS = ("text", "json", "markdown", "sarif", "junit")


def _render(doc: dict, fmt: str, out_path: str | None, **opts) -> None:
    """`opts` (show, width) go to the text renderer only."""
    import importlib

    mod = importlib.import_module(f".formatters.{fmt}", __package__)
    opts = opts if fmt == "text" else {}
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            mod.render(doc, fh, **opts)
    else:
        mod.render(doc, sys.stdout, **opts)


def cmd_analyze(args: argparse.Namespace) -> int:
    from . import report

    extend_report()
    ctx = build_ctx(args)
    from .progress import for_analyze

    prog, on_trace, load = for_analyze(args.paths, args.format)
    try:
        rep = report.analyze(args.paths, step=args.step, ctx=ctx, on_trace=on_trace, load=load)
    finally:
        if prog is not None:
            prog.stop()
    doc = rep.to_dict()
    _render(doc, args.format, args.output, show=text_sections(args), width=args.width)
    for e in rep.errors:
        print(f"traceview: error: {e['error']}", file=sys.stderr)
    if rep.errors:
        return ExitCode.ERROR
    return exit_for_findings(doc, args)


def _sections(value: str) -> list[str]:
    got = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in got if v not in TEXT_SECTIONS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown section(s) {', '.join(bad)} (choose from {', '.join(TEXT_SECTIONS)})")
    return got


def text_sections(args: argparse.Namespace) -> set[str]:
    """The detail sections of the text report: all with --detail, else those named by --show."""
    if getattr(args, "detail", False):
        return set(TEXT_SECTIONS)
    return {v for vs in (getattr(args, "show", None) or []) for v in vs}


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

    a = sub.add_parser("analyze", help="analyze trace files or directories of rank files",
                       description="Analyze PyTorch profiler traces: verdict, step time, findings with savings. "
                                   "Exit 0 even with findings unless --fail-on is given; 2 on bad input.")
    a.add_argument("paths", nargs="+", help="trace files (.json/.json.gz) or directories")
    a.add_argument("--format", choices=FORMATS, default="text",
                   help="text: terminal report (default); json: the full document (docs/json-schema.md); markdown: "
                        "a CI summary; sarif: code-scanning results; junit: one test case per rule")
    a.add_argument("--step", type=int, default=None, help="analyze only ProfilerStep#N")
    a.add_argument("-o", "--output", default=None, help="write the report to a file instead of stdout")
    a.add_argument("--detail", action="store_true",
                   help="text: print every detail section (steps, devices, kernels, ops, layers, repeats, all "
                        "findings, all ranks) after the first screen")
    a.add_argument("--show", action="append", metavar="SECTIONS", type=_sections,
                   help=f"text: print these detail sections, comma separated: {','.join(TEXT_SECTIONS)}")
    a.add_argument("--width", type=int, default=None, metavar="COLS",
                   help="text: line width in columns (default: the terminal's; 100 when piped, or $COLUMNS)")
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


def _prefetch_first_input(argv: list[str]) -> None:
    """`analyze`/`layers`: begin reading the first trace before the heavy imports (see decode.prefetch)."""
    if not argv or argv[0] not in ("analyze", "layers"):
        return
    from .decode import prefetch, trace_files

    try:
        for a in argv[1:]:
            if a.startswith("-"):
                continue
            p = Path(a)
            if p.is_dir():
                files = trace_files(p)
                p = files[0] if files else None
            if p is not None and p.is_file():
                prefetch(p)
                return
    except OSError:  # unreadable paths are reported by the loader, with the usual one line
        return


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of a closed pipe raises nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _prefetch_first_input(argv)
    parser = make_parser()
    args = parser.parse_args(argv)
    from .errors import TraceError

    try:
        return int(args.func(args))
    except TraceError as e:
        print(f"traceview: error: {e}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("traceview: interrupted", file=sys.stderr)
        return ExitCode.ERROR
    except BrokenPipeError:  # `traceview analyze T | head`: the reader left; stop quietly
        _silence_stdout()
        return ExitCode.OK
    except Exception as e:  # noqa: BLE001 - last line of defence: one line, never a traceback
        where = Path(getattr(args, "paths", ["?"])[0]).name if getattr(args, "paths", None) else ""
        print(f"traceview: internal error ({type(e).__name__}: {e}) {where}".rstrip(), file=sys.stderr)
        return ExitCode.ERROR


if __name__ == "__main__":
    sys.exit(main())
