"""`records.record` behaves as `dataclasses.dataclass` does on the classes it is used for (issue 32, start-up)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import FrozenInstanceError, dataclass, field

import pytest

from traceview.records import record


def _pair(frozen: bool, eq: bool) -> tuple[type, type]:
    """The same class body made by `dataclass` and by `record`."""

    def body() -> type:
        class C:
            """A class with every kind of field record supports."""

            a: int
            b: str = "b"
            c: list = field(default_factory=list)
            d: int = field(default=4, repr=False)
            e: float = field(default=0.5, compare=False)
            f: tuple = field(default_factory=tuple, init=False)
            g: int = field(default=7, init=False)

        return C

    return dataclass(frozen=frozen, eq=eq)(body()), record(frozen=frozen, eq=eq)(body())


@pytest.mark.parametrize("frozen", [True, False])
@pytest.mark.parametrize("eq", [True, False])
def test_same_as_dataclass(frozen: bool, eq: bool) -> None:
    D, R = _pair(frozen, eq)
    for args, kw in [((1,), {}), ((1, "x", [2]), {"d": 5}), ((), {"a": 3, "e": 1.5}), ((1, "y"), {"c": [1]})]:
        d, r = D(*args, **kw), R(*args, **kw)
        assert vars(d) == vars(r) and list(vars(d)) == list(vars(r))  # values and attribute order
        assert repr(d) == repr(r)
        assert dataclasses.asdict(d) == dataclasses.asdict(r)
        assert dataclasses.replace(r, b="z").b == "z" and isinstance(dataclasses.replace(r, b="z"), R)
        assert (r == R(*args, **kw)) is eq  # field-wise with eq, identity without
        assert (r == copy.copy(r)) is eq
        assert r != d  # another class: NotImplemented both ways, then identity
        if eq:
            assert R(*args, **{**kw, "e": 9.0}) == r  # compare=False
        if frozen and eq:  # a tuple of the fields' hashes: a list field raises as dataclass's does
            with pytest.raises(TypeError):
                hash(d)
            with pytest.raises(TypeError):
                hash(r)
            h = dataclasses.replace(r, c=())
            assert hash(h) == hash(dataclasses.replace(d, c=()))
        elif eq:
            with pytest.raises(TypeError):
                hash(r)
        else:
            assert hash(r) == object.__hash__(r)
    assert [f.name for f in dataclasses.fields(R)] == [f.name for f in dataclasses.fields(D)]
    assert R.__match_args__ == D.__match_args__
    assert dataclasses.is_dataclass(R)
    p = R.__dataclass_params__
    assert (p.init, p.repr, p.eq, p.frozen) == (True, True, eq, frozen)
    r = R(1)
    r2 = R(1)
    assert r.c is not r2.c  # one list per instance
    if frozen:
        with pytest.raises(FrozenInstanceError):
            r.a = 2
        with pytest.raises(FrozenInstanceError):
            del r.b
        with pytest.raises(FrozenInstanceError):
            r.new = 1
    else:
        r.a = 2
        assert r.a == 2


def test_wrong_arguments() -> None:
    _, R = _pair(True, True)
    for args, kw in [((), {}), ((1, "b", [], 4, 0.5, 9), {}), ((1,), {"a": 2}), ((1,), {"f": {}}), ((1,), {"zz": 1})]:
        with pytest.raises(TypeError):
            R(*args, **kw)


def test_post_init_and_subclass() -> None:
    @record()
    class P:
        """Doubles `x` after init."""

        x: int
        y: int = 0

        def __post_init__(self) -> None:
            self.y = self.x * 2

    assert P(3).y == 6 and P(3) == P(3, 1)

    @record(frozen=True, eq=False)
    class Base:
        """A frozen base."""

        x: int

    @dataclass(frozen=True)
    class Sub(Base):  # a frozen dataclass may extend a frozen record (model.Trace -> ingest.reduced)
        """A frozen dataclass subclass."""

        y: int = 1

    s = Sub(1, 2)
    assert (s.x, s.y) == (1, 2) and s == Sub(1, 2)
    with pytest.raises(FrozenInstanceError):
        s.x = 3


def test_refuses_what_it_does_not_write() -> None:
    class Own:
        """Defines its own repr."""

        a: int

        def __repr__(self) -> str:
            return "own"

    with pytest.raises(TypeError):
        record()(Own)

    class K:
        """Keyword-only fields."""

        a: int = field(kw_only=True)

    with pytest.raises(TypeError):
        record()(K)


def test_traceview_records_pickle() -> None:
    """The run's records cross process boundaries (worker pools) as dataclasses do."""
    from traceview.options import Options
    from traceview.sections.section import Section

    o = Options()
    assert pickle.loads(pickle.dumps(o)) == o
    s = Section(*[f"v{i}" for i in range(len(dataclasses.fields(Section)))])
    assert pickle.loads(pickle.dumps(s)) == s
