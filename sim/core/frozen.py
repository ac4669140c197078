"""`@frozen`: a frozen dataclass that costs what a plain one costs to build.

A `@dataclass(frozen=True)` __init__ stores each field through `object.__setattr__` (its own
__setattr__ refuses), about 3x the cost of a plain dataclass's stores. The simulations build
millions of small frozen records (ops, tensor uses, op costs, engine tasks): their __init__
was 15-18 % of the CPU of the serving, PIM and spatial tests (sampled, issue 32). `frozen`
keeps everything `dataclass(frozen=True)` gives (equality, hash, repr, refusal to assign,
`dataclasses.replace`, pickling) and replaces only __init__ with one that writes the fields
straight into the instance's __dict__, the way object.__setattr__ would have stored them.

Only what these records use is supported: positional and keyword-only fields, defaults,
default factories, fields left out of __init__, and __post_init__. InitVar
fields and slots (no __dict__) are refused at class creation, never silently mis-built. Public
dataclasses API only (fields(), Field attributes, the generated __init__'s signature): no private name.
"""

from __future__ import annotations

import dataclasses
import inspect   # dataclasses imports it already: no cost
from dataclasses import MISSING, dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def frozen(cls: type[T] | None = None, /, **options: Any) -> Any:
    """`@frozen` or `@frozen(eq=False, ...)`: `dataclass(frozen=True, **options)` with a fast __init__."""
    if options.get("slots"):
        raise TypeError("@frozen writes the instance __dict__; a slots class has none")

    def wrap(c: type[T]) -> type[T]:
        c = dataclass(frozen=True, **options)(c)
        c.__init__ = _fast_init(c)   # type: ignore[misc]
        return c

    return wrap if cls is None else wrap(cls)


def _fast_init(cls: type) -> Callable[..., None]:
    """An __init__ with dataclass's signature whose body stores into self.__dict__."""
    # InitVar pseudo-fields are left out of fields() but are parameters of dataclass's own __init__:
    # found through public API only (no dataclasses._FIELD_INITVAR, which a Python release may rename).
    init_fields = {f.name for f in dataclasses.fields(cls) if f.init}
    if any(p not in init_fields for p in list(inspect.signature(cls.__init__).parameters)[1:]):   # [0]: self
        raise TypeError(f"{cls.__name__}: @frozen does not support InitVar fields")
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: @frozen writes the instance __dict__; a slots class has none")
    names: dict[str, Any] = {"_HAS_FACTORY": _HAS_FACTORY}
    params, kw_only, body = [], [], ["d = self.__dict__"]
    for f in dataclasses.fields(cls):
        has_factory = f.default_factory is not MISSING
        if has_factory:
            names[f"_factory_{f.name}"] = f.default_factory
        if not f.init:
            if has_factory:   # a plain default is read from the class attribute, as under dataclass
                body.append(f"d[{f.name!r}] = _factory_{f.name}()")
            continue
        if has_factory:
            param = f"{f.name}=_HAS_FACTORY"
            body.append(f"d[{f.name!r}] = _factory_{f.name}() if {f.name} is _HAS_FACTORY else {f.name}")
        else:
            if f.default is not MISSING:
                names[f"_default_{f.name}"] = f.default
            param = f.name if f.default is MISSING else f"{f.name}=_default_{f.name}"
            body.append(f"d[{f.name!r}] = {f.name}")
        (kw_only if f.kw_only else params).append(param)
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *kw_only] if kw_only else [])])
    source = f"def __init__({signature}):\n" + "".join(f"    {line}\n" for line in body)
    exec(source, names)   # from the class's own field names, as dataclasses builds its __init__
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


class _HasFactory:
    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _HasFactory()
