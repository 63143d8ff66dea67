"""ingest.heap_trim: a large trace's analysis has glibc map its large arrays (`map_large`); a small one's leaves
the allocator as it is."""

from __future__ import annotations

from traceview.ingest import heap_trim


class _FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


def test_map_large_only_from_map_events(monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(heap_trim, "_libc", lambda: fake)
    heap_trim.map_large(heap_trim.MAP_EVENTS - 1)
    assert fake.calls == []
    heap_trim.map_large(heap_trim.MAP_EVENTS)
    assert fake.calls == [("mallopt", -3, heap_trim.MAP_BYTES), ("malloc_trim", 0)]


def test_map_large_without_glibc(monkeypatch):
    monkeypatch.setattr(heap_trim, "_libc", lambda: None)
    heap_trim.map_large(heap_trim.MAP_EVENTS)  # (musl, macOS, Windows: nothing to set)


_HEAPS = """
import ctypes, os, sys, tempfile, threading
from traceview.ingest import heap_trim
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "one":
    assert heap_trim.one_arena()
go, held = threading.Barrier(5), []
def work():  # each thread allocates while the others hold theirs: glibc gives it an arena of its own, or not
    held.append(libc.malloc(1 << 16))
    go.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
go.wait()
path = os.path.join(tempfile.mkdtemp(), "info.xml")
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print(open(path).read().count("<heap nr="))
"""


def _heaps(mode: str, **env: str) -> int:
    import os
    import subprocess
    import sys

    e = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")} | env
    out = subprocess.run([sys.executable, "-c", _HEAPS, mode], capture_output=True, text=True, check=True, env=e)
    return int(out.stdout)


def test_one_arena_keeps_new_threads_on_the_existing_heaps():
    import platform

    import pytest

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's arenas")
    # four threads allocating at once get heaps of their own by default (up to 8 per core), and none after
    # one_arena: the process's one heap serves them (the main thread's, the only one made before)
    assert _heaps("default") > _heaps("one") == 1
    # a spawned worker gets it from its environment (heap_trim.worker_env), read by glibc as the process starts
    assert _heaps("default", **heap_trim.worker_env(4)) == 1


def test_worker_env(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert heap_trim.worker_env(1) == {}  # one scan thread: nothing to share
    assert heap_trim.worker_env(4) == {"MALLOC_ARENA_MAX": "1"}
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    assert heap_trim.worker_env(4) == {}  # the user's setting stands
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")
    assert heap_trim.worker_env(4) == {"MALLOC_ARENA_MAX": "1"}
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert heap_trim.worker_env(4) == {}


def test_rank_workers_get_their_share_of_the_cores_and_one_arena(monkeypatch, tmp_path):
    from traceview import procpool, report
    from traceview.options import Options

    got = {}

    def start(fn, calls, workers, env=None):
        got.update(env or {})
        raise RuntimeError("no pool here")  # (the env is what is checked)

    monkeypatch.setattr(procpool, "start", start)
    monkeypatch.setattr(report.os, "cpu_count", lambda: 16)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    try:
        report._analyze_files([tmp_path / "a.json"], Options(), 4, None)
    except RuntimeError:
        pass
    assert got == {"POLARS_MAX_THREADS": "4", "TRACEVIEW_THREADS": "4", "MALLOC_ARENA_MAX": "1"}
    got.clear()
    try:
        report._analyze_files([tmp_path / "a.json"], Options(), 16, None)
    except RuntimeError:
        pass
    assert got == {"POLARS_MAX_THREADS": "1", "TRACEVIEW_THREADS": "1"}  # one scan thread a worker: glibc's default
