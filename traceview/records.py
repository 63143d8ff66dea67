"""`record`: `dataclasses.dataclass` for traceview's own classes, without its generated source (issue 32, start-up).

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and frozen `__setattr__`/`__delattr__`
as Python source and compiles it at import: ~0.4-1.6 ms a class, ~13 ms of a tiny trace's run for the 16 classes
an analysis imports (a third of traceview's own import time). `record` asks `dataclass` for the class's fields only
(`init=repr=eq=False`, which compiles nothing: ~0.02 ms) and adds methods that do what the generated ones do, from
closures over the fields: the same attribute order, defaults and factories, `__post_init__`, repr text, field-wise
`==`, hash and `FrozenInstanceError`s. `dataclasses.fields`, `replace`, `asdict` and `is_dataclass` see a dataclass
(`__dataclass_params__` says what was asked). What differs: `inspect.signature(cls)` reads `(*args, **kwargs)`, and a
call with wrong arguments raises the TypeError of the same kind with CPython's wording for a plain function.

Supported: positional-or-keyword fields (no `kw_only`, no `InitVar`), `field(default=..., default_factory=...,
init=, repr=, compare=, hash=)`, `frozen`, `eq`; a class that defines one of the methods itself is refused.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

#: the methods `record` writes (a class defining one of them itself is left to `dataclass`)
_OWN = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


def record(*, frozen: bool = False, eq: bool = True) -> Callable[[T], T]:
    """`@dataclass(frozen=..., eq=...)` without compiling generated methods (see the module's docstring)."""

    def wrap(cls: T) -> T:
        if any(m in cls.__dict__ for m in _OWN):
            raise TypeError(f"record: {cls.__qualname__} defines one of {_OWN} itself: use @dataclass")
        cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)  # the fields only: nothing compiled
        params = cls.__dataclass_params__  # (this class's own: what `dataclass(frozen=, eq=)` would record)
        params.init = params.repr = True
        params.eq, params.frozen = eq, frozen
        fields = dataclasses.fields(cls)
        if any(f.kw_only is True for f in fields):
            raise TypeError(f"record: {cls.__qualname__} has kw_only fields: use @dataclass")
        cls.__init__ = _init(cls, fields, frozen)
        cls.__repr__ = _repr(tuple(f.name for f in fields if f.repr))
        if eq:
            cls.__eq__ = _eq(tuple(f.name for f in fields if f.compare))
            # as dataclass: hashable by value when frozen, unhashable when mutable
            cls.__hash__ = _hash(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))) \
                if frozen else None
        if frozen:
            cls.__setattr__, cls.__delattr__ = _frozen(cls, frozenset(f.name for f in fields))
        return cls

    return wrap


def _init(cls: type, fields: tuple[dataclasses.Field, ...], frozen: bool) -> Callable[..., None]:
    names = tuple(f.name for f in fields if f.init)
    known = frozenset(names)
    # per field, in declaration order: (name, taken from the call, default value, default factory)
    plan = tuple((f.name, f.init, f.default, f.default_factory) for f in fields)
    post = hasattr(cls, "__post_init__")
    put = object.__setattr__ if frozen else setattr
    where = f"{cls.__qualname__}.__init__()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{where} takes {len(names) + 1} positional arguments but {len(args) + 1} were given")
        given = dict(zip(names, args, strict=False))  # (fewer args than fields: checked above)
        for k, v in kwargs.items():
            if k not in known:
                raise TypeError(f"{where} got an unexpected keyword argument {k!r}")
            if k in given:
                raise TypeError(f"{where} got multiple values for argument {k!r}")
            given[k] = v
        for name, init, default, factory in plan:
            if init and name in given:
                put(self, name, given[name])
            elif factory is not MISSING:
                put(self, name, factory())
            elif not init:  # (as dataclass: an init=False field's plain default stays the class attribute)
                continue
            elif default is not MISSING:
                put(self, name, default)
            else:
                missing = [n for n in names if n not in given and _required(cls, n)]
                raise TypeError(f"{where} missing {len(missing)} required positional argument"
                                f"{'s' if len(missing) > 1 else ''}: {', '.join(repr(m) for m in missing)}")
        if post:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _required(cls: type, name: str) -> bool:
    f = cls.__dataclass_fields__[name]
    return f.default is MISSING and f.default_factory is MISSING


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()  # (as dataclass: `...` for an object inside its own repr)
    def __repr__(self: Any) -> str:
        return f"{self.__class__.__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    return __repr__


def _eq(names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)
        return NotImplemented

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in names))

    return __hash__


def _frozen(cls: type, names: frozenset[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__
