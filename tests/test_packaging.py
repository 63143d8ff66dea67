"""A non-editable install ships every package: pyproject's explicit package list names each folder with an
__init__.py under traceview/ and collectors/ (a missing one installs without error and fails at import)."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_package_folder_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("traceview", "collectors")
        for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    found |= {"traceview.rules"}  # rules/ installs as traceview.rules (package-dir)
    assert found - listed == set()
    # listed without an __init__.py: a folder of its own (collectors/_boot: the sitecustomize the collector puts
    # on PYTHONPATH), which must still exist
    assert all((ROOT / p.replace(".", "/")).is_dir() for p in listed - found - {"traceview.rules"})
