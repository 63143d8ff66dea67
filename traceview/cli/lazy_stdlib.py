"""Standard-library modules that polars and numpy import but an analysis never uses, loaded on first use.

`import polars, numpy` imports `importlib.metadata` (with `email`, `zipfile`, `csv`: polars' Iceberg plugin looks
up a package version when it scans Iceberg), `pickle` (numpy's `ndarray.dumps`), `subprocess` (polars' cloud
credential helpers) and `hashlib` (Iceberg name mappings): ~25 ms of a 0.35 s start-up on the 2-core machine,
for functions an analysis never calls. Likewise `json` (polars' JSON readers; the report is written by msgspec),
`shutil` (with `bz2` and `lzma`: polars' file helpers, and argparse's help width, which a plain `analyze` run
does not build: `cli.main._fast_analyze`), `locale` and `traceback` (logging's exception formatting): ~4 ms more. `defer` puts a stand-in module in `sys.modules` that imports the real one
on the first attribute read and forwards to it from then on, so a later user sees no difference beyond that
delay. Only the CLI's own process uses it (`cli.main`), before anything imports these modules.

`numpy.ma` is deferred too (`defer_numpy_ma`, once numpy is imported): polars reads `np.ma.getmask`,
`np.ma.getdata` and `np.ma.nomask` in every numpy -> Series conversion (to honour a masked array's mask), and
numpy's own `np.unique` reads `np.ma.is_masked`; importing numpy.ma costs ~8 ms of every run (numpy builds its
docstrings). Its stand-in answers those four for a plain `ndarray` — which has no mask: `nomask`, the array
itself, False, as numpy.ma answers — and loads the real module for anything else (no masked array can exist
before it is loaded).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

#: imported by polars/numpy at import time, read only inside functions an analysis does not call
MODULES = ("importlib.metadata", "pickle", "subprocess", "hashlib", "json", "shutil", "locale", "traceback")

_lock = threading.RLock()


#: whether `defer` ran in this process (the CLI's own run): `defer_numpy_ma` only follows it
_active = False


class _Deferred(types.ModuleType):
    """Stands in for a module until one of its attributes is read (`__spec__` is set, so `import` statements
    do not trigger the load: they only check that the module is not being initialized)."""

    def __getattr__(self, attr: str) -> Any:  # only for names the stand-in lacks: everything but the spec
        return getattr(_load(self.__name__), attr)


def _load(name: str) -> types.ModuleType:
    with _lock:
        mod = sys.modules.get(name)
        if isinstance(mod, _Deferred):
            del sys.modules[name]
            try:
                mod = importlib.import_module(name)
            except BaseException:
                sys.modules.setdefault(name, mod)
                raise
            _bind(name, mod)
        assert mod is not None
        return mod


def _bind(name: str, mod: types.ModuleType) -> None:
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, mod)


def defer(names: tuple[str, ...] = MODULES) -> list[str]:
    """Stand-ins for the modules of `names` not imported yet (a parent package is imported); returns those."""
    global _active
    _active = True
    done = []
    with _lock:
        for name in names:
            if name in sys.modules:
                continue
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                continue
            if spec is None:
                continue
            stub = _Deferred(name)
            stub.__spec__ = spec
            sys.modules[name] = stub
            _bind(name, stub)
            done.append(name)
    return done


def loaded(name: str) -> bool:
    """Whether `name` is imported for real (not a stand-in still waiting)."""
    return name in sys.modules and not isinstance(sys.modules[name], _Deferred)


def defer_numpy_ma() -> bool:
    """After `defer` (the CLI's own run) and once numpy is imported: a stand-in for `numpy.ma` that answers
    polars' mask lookups on plain arrays without loading it (see the module docstring). Whether it was set."""
    np = sys.modules.get("numpy")
    if not _active or np is None or "numpy.ma" in sys.modules or not defer(("numpy.ma",)):
        return False
    stub = sys.modules["numpy.ma"]
    nomask = np.False_  # numpy.ma.nomask is np.bool(0): numpy's False scalar, a singleton
    ndarray = np.ndarray

    def getmask(a: Any) -> Any:
        return nomask if type(a) is ndarray else _load("numpy.ma").getmask(a)

    def getdata(a: Any, subok: bool = True) -> Any:
        return a if type(a) is ndarray and subok else _load("numpy.ma").getdata(a, subok)

    def is_masked(x: Any) -> bool:  # (numpy's own np.unique asks)
        return False if type(x) is ndarray else _load("numpy.ma").is_masked(x)

    stub.__dict__.update(nomask=nomask, getmask=getmask, getdata=getdata, is_masked=is_masked)
    return True
