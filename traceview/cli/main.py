"""`traceview` command line: analyze | rules | layers | diff | batch | mcp | collect | trigger."""

from __future__ import annotations

import enum
import gc
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, NoReturn

from .. import __version__
from ..errors import TraceError
from ..ingest.inputs import DEFAULT_MAX_BYTES
from ..options import Options

if TYPE_CHECKING:
    import argparse

    from ..report import Report


class ExitCode(enum.IntEnum):
    OK = 0
    FINDINGS = 1  # findings at or above --fail-on
    ERROR = 2  # usage, input or internal error


def _analyze_paths(args: argparse.Namespace, options: Options, renderer: str | None = None) -> Report:
    """The report of the command's inputs; `renderer`: the module that will render it, imported beside the
    analysis (`_import_beside`)."""
    from ..report import analyze
    from .lazy_stdlib import defer_numpy_ma
    from .progress import for_analyze

    defer_numpy_ma()  # (the CLI's own run; numpy is imported by now: the options imported the rules)
    if renderer:
        _import_beside(renderer)

    if args.paths.count("-") > 1:
        raise TraceError("'-' (standard input) can be given only once")
    # a progress bar on stderr when it is a terminal and the run lasts (never in JSON mode)
    prog, on_progress, load = for_analyze(args.paths, getattr(args, "format", "text"), options.max_bytes)

    def seen(path: str) -> None:  # the input being read, for an error line that names the right file
        args.current_input = path
        if on_progress:
            on_progress(path)

    from ..ci.job_inputs import expand_inputs
    from ..ingest.remote import restore, stage

    paths, back = stage(args.paths, options.max_bytes)  # s3://, gs://… read into a temporary folder
    try:  # a folder of framework job folders (TorchTitan's iteration_<N>/): one job each
        rep = analyze(expand_inputs(paths), options, on_trace=seen, load=load)
    finally:
        if prog is not None:
            prog.stop()
    rep.traces, rep.jobs, rep.errors = restore(rep.traces, back), restore(rep.jobs, back), restore(rep.errors, back)
    return rep


def _import_beside(module: str) -> None:
    """Import `module` in a thread of its own, beside the analysis. The text renderers import rich (~25 ms of a
    small trace's start-up on the 2-core machine) and the analysis spends most of a small trace's run in polars,
    which releases the GIL: on a second core the import is done before the renderer is needed (issue 32,
    start-up). Nothing else changes: a failed import is left to the renderer's own import, which reports it."""
    import importlib
    import threading

    def run() -> None:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - imported again where it is used, which raises the same error
            pass

    threading.Thread(target=run, name="traceview-import", daemon=True).start()


def _sections(value: str) -> list[str]:
    import argparse

    from ..formatters.sections import TEXT_SECTIONS

    got = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in got if v not in TEXT_SECTIONS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown section(s) {', '.join(bad)} (choose from {', '.join(TEXT_SECTIONS)})")
    return got


def text_sections(args: argparse.Namespace) -> set[str]:
    """The detail sections of the text report: all with --detail, else those named by --show."""
    if getattr(args, "detail", False):
        from ..formatters.sections import TEXT_SECTIONS  # (only here: a JSON run need not import it)

        return set(TEXT_SECTIONS)
    return {v for vs in (getattr(args, "show", None) or []) for v in vs}


def _report_errors(rep: Report) -> None:
    if not rep.errors:
        return
    from ..safe_text import terminal_line

    for e in rep.errors:
        print(f"traceview: error: {terminal_line(e['error'])}", file=sys.stderr)


def cmd_analyze(args: argparse.Namespace) -> int:
    from ..formatters import write
    from .rules import build_options, exit_code

    text = args.format == "text"
    rep = _analyze_paths(args, build_options(args), renderer="traceview.formatters.text" if text else None)
    doc = rep.to_dict()
    write(doc, args.format, args.output, show=text_sections(args), width=args.width)
    _report_errors(rep)
    if rep.errors:
        return ExitCode.ERROR
    return ExitCode(exit_code(doc, args))


def _layers_entry(t: dict, depth: int | None) -> dict:
    """A trace's entry of `traceview layers`: its `layers` section and, for a trace without GPU activity, the CPU
    time per layer of its `cpu` section (what the text shows instead of a GPU table of zeros)."""
    e = {"path": t["path"], "rank": t["rank"], "layers": t["layers"]}
    cpu = t.get("cpu") or {}
    if cpu.get("layers"):
        rows = [r for r in cpu["layers"] if depth is None or (r.get("depth") or 0) <= depth]
        e["cpu"] = {"steps": cpu["steps"], "layers": rows}
    return e


def cmd_layers(args: argparse.Namespace) -> int:
    """The `layers` sections of `analyze` alone (same pipeline, same numbers)."""
    from ..formatters import write
    from ..report import SCHEMA_VERSION

    rep = _analyze_paths(args, Options(step=args.step, layers_depth=args.depth, max_bytes=args.max_bytes),
                         renderer="traceview.formatters.layers" if args.format == "text" else None)
    doc = {"schema_version": SCHEMA_VERSION, "traces": [_layers_entry(t, args.depth) for t in rep.traces],
           "errors": rep.errors}
    if args.format == "json":
        write(doc, "json", args.output)
    else:
        from ..formatters import output
        from ..formatters.layers import render_document

        with output(args.output) as out:
            render_document(doc, out, width=args.width)
    _report_errors(rep)
    return ExitCode.ERROR if rep.errors else ExitCode.OK


#: the analyzer's own commands: their runs need no other command's parser (`collect`'s imports cost ~10 ms)
ANALYZER_COMMANDS = ("analyze", "layers")


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with `command` one of ANALYZER_COMMANDS, only the analyzer's own subcommands (a run of
    that command never reaches the others; `--help` and a mistyped command still see them all)."""
    import argparse

    from ..formatters import FORMATS
    from ..formatters.sections import TEXT_SECTIONS
    from .rules import add_parsers as add_rules_parsers
    from .rules import add_rule_options

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
    a.add_argument("--max-bytes", type=_size, default=DEFAULT_MAX_BYTES, metavar="SIZE",
                   help="largest input held in memory, after decompression (e.g. 512M, 16G; default 8G); "
                        "a bigger or gzip-bomb input is an error")
    a.add_argument("--detail", action="store_true",
                   help="text: print every detail section (steps, devices, kernels, ops, layers, repeats, all "
                        "findings, all ranks) after the first screen")
    a.add_argument("--show", action="append", metavar="SECTIONS", type=_sections,
                   help=f"text: print these detail sections, comma separated: {','.join(TEXT_SECTIONS)}")
    a.add_argument("--width", type=int, default=None, metavar="COLS",
                   help="text: line width in columns (default: the terminal's; 100 when piped, or $COLUMNS)")
    a.add_argument("-j", "--jobs", type=int, default=None,
                   help="worker processes for the rank files of a directory (default: one per core from 8 files on 4+ cores; 1: serial)")
    a.add_argument("--what-if", default=None, metavar="RULES",
                   help="print the step replayed with only these fixes applied together, comma separated rule "
                        "names or codes (e.g. host-sync,fp32-gemm); NAME:VARIANT prices one way to fix where a "
                        "rule has several (fp32-gemm:autocast, fp32-gemm:tf32, unfused-optimizer:foreach, "
                        "unfused-optimizer:fused, gemm-epilogue:compile); JSON projection.what_if")
    a.add_argument("--unprofiled-ms", type=float, default=None, metavar="MS",
                   help="the step time you measured without the profiler (ms per step: CUDA events around the "
                        "loop's steps, or 1000 / your training log's steps per second): the profiler's cost is "
                        "solved to it and every saving and the projection are priced against it (a traceview "
                        "collect run measures it itself)")
    add_rule_options(a)
    a.set_defaults(func=cmd_analyze)

    la = sub.add_parser("layers", help="GPU time, roofline and findings per nn.Module layer")
    la.add_argument("paths", nargs="+", help="trace files (.json/.json.gz) or directories")
    la.add_argument("--depth", type=int, default=None, help="show layers down to this tree depth (0 = roots)")
    la.add_argument("--format", choices=("text", "json"), default="text",
                    help="text: the layer tree and repeated layers (default); json: the `layers` sections (docs/layers.md)")
    la.add_argument("--step", type=int, default=None, help="only ProfilerStep#N")
    la.add_argument("--width", type=int, default=None, metavar="COLS",
                    help="text: line width in columns (default: the terminal's; 100 when piped, or $COLUMNS)")
    la.add_argument("-o", "--output", default=None, help="write the report to a file instead of stdout")
    la.add_argument("--max-bytes", type=_size, default=DEFAULT_MAX_BYTES, metavar="SIZE",
                    help="largest input held in memory, after decompression (default 8G)")
    la.set_defaults(func=cmd_layers)

    if command in ANALYZER_COMMANDS:  # the other commands' parsers cost ~5 ms of a small trace's run
        return p
    add_rules_parsers(sub)
    from .ci import add_parsers as add_ci_parsers

    add_ci_parsers(sub)
    from .history import add_parsers as add_history_parsers

    add_history_parsers(sub)
    from .mcp import add_parser as add_mcp_parser

    add_mcp_parser(sub, _size)
    from .annotate import add_parser as add_annotate_parser

    add_annotate_parser(sub)
    try:  # `collect` / `trigger` live with the collectors (torch is imported only when they run)
        from collectors.cli import add_parsers
    except ImportError:
        pass
    else:
        add_parsers(sub)
    return p


def _size(text: str) -> int:
    from ..ingest.inputs import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        import argparse

        raise argparse.ArgumentTypeError(str(e)) from None


#: what `analyze` sets when given no option: make_parser's defaults, in its order (tests/test_cli.py compares
#: `_fast_analyze` with argparse on a set of command lines)
ANALYZE_DEFAULTS = {"format": "text", "step": None, "output": None, "max_bytes": DEFAULT_MAX_BYTES, "detail": False,
                    "show": None, "width": None, "jobs": None, "what_if": None, "unprofiled_ms": None,
                    "select": None, "ignore": None, "config": None, "set_options": None, "fail_on": None,
                    "exit_zero": False}
#: the options `_fast_analyze` reads, each with one value: the attribute it sets
_FAST_OPTIONS = {"--format": "format", "-o": "output", "--output": "output"}


def _fast_analyze(argv: list[str]) -> SimpleNamespace | None:
    """The arguments of `analyze PATH... [--format FMT] [-o FILE]`, the plain run (CI's, the benchmark's), read
    without argparse: its import, gettext's and the parser's build are ~3 ms of a small trace's start-up (issue
    32). The same attributes and values as argparse's namespace; anything else (another option, a value that
    starts with '-', paths on both sides of an option, an option given twice, an unknown format) returns None:
    argparse parses it and reports the errors."""
    from ..formatters import FORMATS

    if len(argv) < 2 or argv[0] != "analyze":
        return None
    paths: list[str] = []
    opts: dict[str, str] = {}
    k, gap = 1, False  # gap: an option came after some paths (argparse takes the first run of paths only)
    while k < len(argv):
        a = argv[k]
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        if not a.startswith("-"):
            if gap:
                return None
            paths.append(a)
            k += 1
            continue
        dest = _FAST_OPTIONS.get(name)
        if dest is None or dest in opts:
            return None
        if not eq:
            if k + 1 >= len(argv):
                return None
            value = argv[k + 1]
            k += 1
        if value.startswith("-") or (dest == "format" and value not in FORMATS):
            return None
        opts[dest] = value
        gap = bool(paths)
        k += 1
    if not paths:
        return None
    return SimpleNamespace(command="analyze", paths=paths, **{**ANALYZE_DEFAULTS, **opts}, func=cmd_analyze)


def _prefetch_first_input(argv: list[str]) -> None:
    """`analyze`/`layers`: begin reading the first trace before the heavy imports (see decode.prefetch)."""
    if not argv or argv[0] not in ("analyze", "layers"):
        return
    from ..ingest.decode import prefetch, trace_files
    from ..ingest.inputs import parse_size

    cap = DEFAULT_MAX_BYTES
    try:
        for k, a in enumerate(argv):  # the cap the loader will use, or no prefetch
            if a == "--max-bytes" or a.startswith("--max-bytes="):
                cap = parse_size(a.split("=", 1)[1] if "=" in a else argv[k + 1])
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
    except (OSError, IndexError, ValueError, TraceError):  # the loader reports these, or argparse
        return


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of a closed pipe raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


#: polars' allocator (jemalloc) reads this when polars loads (polars adds it after its own defaults). jemalloc's
#: default is 4 arenas per CPU, each keeping its freed pages a while; with one, a thread reuses what another freed:
#: peak RSS 325 -> 298 MB on the 132 MB benchmark trace on 2 cores, 517 -> 458 MB on a 16-core host, not slower
#: (bench/README.md)
ALLOCATOR_CONF = ("_RJEM_MALLOC_CONF", "narenas:1")


def allocator_settings() -> bool:
    """Set polars' allocator to one arena unless the user configured it or polars is loaded already (then it is
    too late). Whether it was set."""
    key, value = ALLOCATOR_CONF
    if key in os.environ or "polars" in sys.modules:
        return False
    os.environ[key] = value
    return True


def heap_settings() -> bool:
    """One glibc arena for the run's threads (`heap_trim.one_arena`) where the C scanner parses in several
    (`cores.scan_threads()`: four cores and more, or TRACEVIEW_THREADS); on fewer, for small inputs (no ctypes
    import), and where the user set glibc's arenas (`MALLOC_ARENA_MAX`, or `arena_max` in `GLIBC_TUNABLES`),
    nothing. Whether it was set."""
    from ..ingest import cores, heap_trim

    if cores.scan_threads() < 2 or heap_trim.user_arenas():
        return False
    return heap_trim.one_arena()


#: polars' thread pool (`POLARS_MAX_THREADS`, read when polars is imported: fixed for the process). A small
#: trace's run is ~640 polars queries of a few hundred rows each, ~0.1 ms apiece: on many cores every one of them
#: wakes the pool's idle threads (each then spins before it sleeps again: on the 16-core host a tiny trace's run
#: took 0.97 CPU s against 0.52 on 2 cores), and none has the rows to share out. An analyzer run whose inputs are
#: all files with at most SMALL_INPUT_BYTES of JSON together runs polars with SMALL_INPUT_THREADS (issue 32,
#: start-up; bench/README.md, fourth pass).
POLARS_THREADS = "POLARS_MAX_THREADS"
SMALL_INPUT_BYTES = 4 << 20
SMALL_INPUT_THREADS = "1"


def _json_bytes(path: str, size: int) -> int | None:
    """The JSON text's size of a trace file of `size` bytes on disk (a gzip file's from its trailer), or None when
    it cannot be told cheaply."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return size
            # ISIZE: the last member's length mod 2**32; with at most SMALL_INPUT_BYTES compressed the text is
            # under 4 GiB (deflate packs at most ~1032:1), so it is the length (a file of several members is
            # counted by its last, which may be less than the whole: such traces are not written by the profiler)
            f.seek(-4, os.SEEK_END)
            tail = f.read(4)
    except OSError:
        return None
    return max(int.from_bytes(tail, "little"), size) if len(tail) == 4 else None


def small_input_settings(argv: list[str]) -> bool:
    """An analyzer run (`argv`: its command and arguments) whose inputs are small files: polars gets
    SMALL_INPUT_THREADS threads, unless the user set POLARS_MAX_THREADS or polars is loaded already. Every
    argument that names an existing file counts (an option's value, e.g. an old `-o` report, only makes the
    total larger); standard input, a URL or a directory (a job: its ranks, its worker processes) leave polars'
    default, as does a total over SMALL_INPUT_BYTES — the pool serves the whole run. Whether it was set."""
    import stat

    if POLARS_THREADS in os.environ or "polars" in sys.modules:
        return False
    total, files = 0, 0
    for a in argv[1:]:
        if a == "-" or "://" in a:  # standard input, object storage: the size is not known here
            return False
        if a.startswith("-"):
            continue
        try:
            st = os.stat(a)
        except (OSError, ValueError):  # an option's value, or a missing input (reported by the loader)
            continue
        if stat.S_ISCHR(st.st_mode):  # an output such as /dev/null
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > SMALL_INPUT_BYTES:
            return False
        n = _json_bytes(a, st.st_size)
        if n is None:
            return False
        total += n
        files += 1
        if total > SMALL_INPUT_BYTES:
            return False
    if not files:
        return False
    os.environ[POLARS_THREADS] = SMALL_INPUT_THREADS
    return True


def main(argv: list[str] | None = None) -> int:
    """The CLI. Called without `argv` it is the process's own run (`traceview ...`, `python -m traceview`):
    an `analyze` or `layers` run then ends the process itself once its output is flushed (see `_exit`)."""
    if argv is not None:
        return _analyzer_run(argv) if argv and argv[0] in ANALYZER_COMMANDS else _main(argv)
    argv = sys.argv[1:]
    allocator_settings()  # every command of the process's own run (batch, ci, diff... load traces too)
    if not argv or argv[0] not in ANALYZER_COMMANDS:
        heap_settings()
        return _main(argv)
    # numpy's BLAS threads are never used here (no linear algebra), and started with numpy they spin on the
    # cores polars needs: one thread, unless the user says otherwise
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not small_input_settings(argv):
        heap_settings()
    from .lazy_stdlib import defer

    defer()  # stdlib modules polars and numpy import but an analysis never uses: loaded on first use
    _exit(_analyzer_run(argv, exiting=True))


def _analyzer_run(argv: list[str], exiting: bool = False) -> int:
    """`_main` without cyclic garbage collection; `exiting`: the process ends (`_exit`) once it returns, so the
    collector stays off."""
    # No cyclic garbage collection while analysing: importing polars, numpy and the analyses creates ~100k
    # objects and no garbage, and collecting them costs ~5 % of a small trace's run; a trace and its frames are
    # freed by reference counting (nothing of a run forms cycles), so memory does not grow without it
    was = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        # (not before the process's own exit: every object allocated meanwhile is still in the youngest
        # generation, and the first allocation after `gc.enable()` collects it all: ~20 ms of a tiny trace's
        # run, for nothing, as `_exit` frees no object)
        if was and not exiting:
            gc.enable()


def _exit(code: int) -> NoReturn:
    """End the process once stdout and stderr are flushed, without the interpreter's teardown (freeing every
    object and module of polars, numpy and the trace: ~25 ms, a tenth of a small trace's run). Safe after
    `analyze`/`layers`: their output files are closed and their worker pools joined. Exit handlers registered
    by whoever runs us (a profiler writing its report, coverage saving its data, logging) still run first."""
    import atexit

    run_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython; elsewhere the normal exit keeps them
    if run_handlers is None or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)  # a profiler or tracer (pyinstrument, coverage) writes its report after we return
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader left (`| head`) or the stream is closed: nothing to add
            pass
    os._exit(code)


def _main(argv: list[str]) -> int:
    _prefetch_first_input(argv)
    try:
        return _run(argv)
    finally:  # a prefetched input the command never read (bad options, an early error) is dropped
        from ..ingest.decode import drop_prefetched

        drop_prefetched()


def _run(argv: list[str]) -> int:
    args = _fast_analyze(argv) or make_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return int(args.func(args))
    except TraceError as e:
        from ..safe_text import terminal_line

        print(f"traceview: error: {terminal_line(str(e))}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("traceview: interrupted", file=sys.stderr)
        return ExitCode.ERROR
    except BrokenPipeError:  # `traceview analyze T | head`: the reader left; stop quietly
        _silence_stdout()
        return ExitCode.OK
    except Exception as e:  # noqa: BLE001 - last line of defence: one line, never a traceback
        # name the input being read when it failed, not the first one given
        where = getattr(args, "current_input", None) or (args.paths[0] if getattr(args, "paths", None) else "")
        first = (str(e).strip().splitlines() or [""])[0]  # polars appends the failing expression on more lines
        msg = f"internal error ({type(e).__name__}: {first})"
        msg = f"{where}: {msg}" if where else msg
        from ..safe_text import terminal_line

        print(f"traceview: {terminal_line(msg)}", file=sys.stderr)
        return ExitCode.ERROR


if __name__ == "__main__":
    sys.exit(main())
