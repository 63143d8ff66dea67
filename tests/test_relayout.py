"""tools/relayout.py, the porting aid of issue 24: code written against the flat layout is rewritten to the
new one (absolute, relative and string forms), the result imports, and a second pass changes nothing."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import relayout  # noqa: E402

OLD = '''"""A module written for the flat layout (traceview/loader.py, traceview/cli.py)."""
from . import lax, heap
from .loader import load_file
from .rulerunner import run_rules
from .formatters.markdown import render
from traceview import batch, decode as dec, report
from traceview.cli import main
import traceview.cli as cli_mod

TARGET = "traceview.instream.Stream"
'''
NEW = '''"""A module written for the flat layout (traceview/ingest/loader.py, traceview/cli/main.py)."""
from .ingest import lenient as lax, heap_trim as heap
from .ingest.loader import load_file
from .sections.findings import run_rules
from .formatters.markdown import render
from traceview.ci import batch; from traceview.ingest import decode as dec; from traceview import report
from traceview.cli.main import main
import traceview.cli.main as cli_mod

TARGET = "traceview.ingest.stream.Stream"
'''


def test_a_flat_layout_module_is_rewritten() -> None:
    f = ROOT / "traceview" / "_relayout_probe.py"  # inside the package: its relative imports resolve
    try:
        f.write_text(OLD)
        assert relayout.rewrite_file(f)
        got = f.read_text()
        assert relayout.rewrite_file(f) is False  # idempotent
    finally:
        f.unlink(missing_ok=True)
    assert got == NEW  # (a line importing from several new places: statements joined by "; ", to tidy by hand)


def test_a_moved_file_reads_its_relative_imports_from_where_it_was() -> None:
    text = "from .errors import TraceError\nfrom .decode import trace_files\nfrom . import __version__\n"
    new = relayout.rewrite_python(text, ROOT / "traceview/ci/probe.py", was=ROOT / "traceview/probe.py")
    assert new == "from ..errors import TraceError\nfrom ..ingest.decode import trace_files\nfrom .. import __version__\n"


def test_every_new_module_of_the_map_exists() -> None:
    for new in relayout.MOVES.values():
        assert importlib.util.find_spec(new) is not None, new
    for old in relayout.MOVES:
        if old != "traceview.cli":  # (now the package holding cli.main)
            assert importlib.util.find_spec(old) is None, old


def test_rewrite_skips_the_tool_itself(capsys):
    before = (ROOT / "tools" / "relayout.py").read_text()
    assert relayout.main(["rewrite", str(ROOT / "tools" / "relayout.py")]) == 0
    assert (ROOT / "tools" / "relayout.py").read_text() == before
    assert "skipped" in capsys.readouterr().out
