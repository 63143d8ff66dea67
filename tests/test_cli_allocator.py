"""cli.allocator_settings: polars' allocator gets one arena on the CLI path, unless the user set it or it is too late."""

from __future__ import annotations

import os
import subprocess
import sys

from traceview.cli.main import ALLOCATOR_CONF

KEY, VALUE = ALLOCATOR_CONF


def _probe(code: str, **env: str) -> str:
    e = {k: v for k, v in os.environ.items() if k != KEY} | env
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, check=True)
    return out.stdout.strip()


SET = f"import os, traceview.cli.main as c; print(c.allocator_settings(), os.environ.get({KEY!r}))"


def test_set_before_polars_loads():
    assert _probe(SET) == f"True {VALUE}"


def test_user_setting_is_kept():
    assert _probe(SET, **{KEY: "narenas:8"}) == "False narenas:8"


def test_not_set_once_polars_is_loaded():
    # polars writes its own defaults into the variable as it loads (and adds a value found there): ours is not in it
    set_, conf = _probe("import polars; " + SET).split()
    assert set_ == "False" and VALUE not in conf


def test_cli_run_sets_it_before_polars():
    # the CLI's own run: the value is in the environment when polars is imported (no polars before main())
    code = ("import sys, os, traceview.cli.main as cli; assert 'polars' not in sys.modules; "
            "sys.argv = ['traceview', 'analyze', '--format', 'json', '-o', os.devnull, "
            "'sample_traces/gpu_h200/seed_single_gemm_eager.json.gz']; "
            f"cli._exit = lambda code: print(code, os.environ.get({KEY!r}))\ncli.main()")
    code_, conf = _probe(code).split()
    assert code_ == "0" and conf.split(",")[-1] == VALUE  # polars put its defaults first and kept ours



_ARENA = ("import sys, os, traceview.cli.main as cli\n"
          "from traceview.ingest import heap_trim\n"
          "calls = []\n"
          "heap_trim.one_arena = lambda: calls.append(1) or True\n"
          "small = sys.argv[1] == 'small'\n"
          "cli.small_input_settings = lambda argv: small\n"
          "cli._main = lambda argv: 0\n"
          "cli._exit = lambda code: print(len(calls))\n"
          "sys.argv = ['traceview', sys.argv[2], 'trace.json']\n"
          "cli.main()\n"
          "print(len(calls))  # (a command other than analyze returns)\n")


def _arena_calls(size: str, command: str, threads: str, **env: str) -> int:
    e = ({k: v for k, v in os.environ.items() if k not in ("TRACEVIEW_THREADS", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
         | {"TRACEVIEW_THREADS": threads} | env)
    out = subprocess.run([sys.executable, "-c", _ARENA, size, command], capture_output=True, text=True, env=e,
                         check=True)
    return int(out.stdout.split()[0])


def test_one_glibc_arena_where_the_scanner_runs_threads():
    # heap_settings: the C scanner's workers would each leave freed buffers in an arena of their own
    assert _arena_calls("large", "analyze", "4") == 1
    assert _arena_calls("large", "batch", "4") == 1  # every command that loads traces
    assert _arena_calls("large", "analyze", "1") == 0  # one scan thread: nothing to share
    assert _arena_calls("small", "analyze", "4") == 0  # small inputs: no ctypes import on the start-up path
    # the user's own setting of glibc's arenas is kept
    assert _arena_calls("large", "analyze", "4", MALLOC_ARENA_MAX="4") == 0
    assert _arena_calls("large", "analyze", "4", GLIBC_TUNABLES="glibc.malloc.arena_max=2") == 0
    assert _arena_calls("large", "analyze", "4", GLIBC_TUNABLES="glibc.malloc.trim_threshold=0") == 1
