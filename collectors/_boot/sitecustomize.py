"""Bootstrap that `traceview collect` puts on the child's PYTHONPATH.

Every Python process started under `traceview collect` imports this file at start-up (Python's
`site` imports `sitecustomize` automatically), so the user's script runs unmodified. Only one
process per rank attaches the profiler: the first eligible one claims the job by exporting
TRACEVIEW_COLLECT_PID, which its own subprocesses (DataLoader workers, inductor compile workers)
inherit and so stay untouched. Under torchrun the launcher itself has no RANK and is skipped.
Keep the skip path free of heavy imports: it runs in every Python subprocess of the job.
"""

import os
import sys


def _chain_next_sitecustomize() -> None:
    # We shadow any sitecustomize further down sys.path (Debian's, a venv's): run it too.
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _eligible() -> bool:
    if "TRACEVIEW_COLLECT" not in os.environ:
        return False
    if os.environ.get("TRACEVIEW_COLLECT_PID"):
        return False  # a parent process already profiles this rank
    if os.environ.get("TRACEVIEW_COLLECT_REQUIRE_RANK") == "1" and "RANK" not in os.environ:
        return False  # torchrun's own launcher process
    return True


def _attach() -> None:
    os.environ["TRACEVIEW_COLLECT_PID"] = str(os.getpid())
    # Make the `collectors` package importable without shadowing anything the script imports.
    root = os.environ.get("TRACEVIEW_COLLECT_ROOT")
    if root and root not in sys.path:
        sys.path.append(root)
    try:
        from collectors import runtime

        runtime.attach_from_env()
    except Exception as exc:  # never break the user's job because profiling failed
        print(f"traceview collect: profiler not attached: {exc!r}", file=sys.stderr)


try:
    _chain_next_sitecustomize()
except Exception as _exc:
    print(f"traceview collect: chained sitecustomize failed: {_exc!r}", file=sys.stderr)

if _eligible():
    _attach()
