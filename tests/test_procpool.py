"""Worker processes never re-run the parent's main script (Streamlit's app script, under `streamlit run` and
its AppTest, is `__main__`): a pool started from such a process still works."""

from __future__ import annotations

import sys
import types
from pathlib import Path

from traceview import procpool


def test_workers_do_not_import_the_parents_main_script(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "app_like.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit('a worker ran the main script')\n")
    fake = types.ModuleType("__main__")
    fake.__file__ = str(script)  # what AppTest leaves behind
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = fake
    try:
        pool, futures = procpool.start(abs, [(-1,), (-2,), (-3,)], 2, env={"TV_PROCPOOL_TEST": "1"})
        with pool:
            assert [f.result(timeout=600) for f in futures] == [1, 2, 3]
        assert sys.modules["__main__"] is fake  # restored
    finally:
        sys.modules["__main__"] = saved
    assert not marker.exists()
    import os

    assert "TV_PROCPOOL_TEST" not in os.environ  # the workers' environment only
