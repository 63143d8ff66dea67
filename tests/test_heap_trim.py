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
