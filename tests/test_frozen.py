"""sim.core.frozen: a `@frozen` class behaves as the same class under `@dataclass(frozen=True)`
(same stored fields, equality, hash, repr, refusal to assign, replace, pickle), only built faster."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import InitVar, dataclass, field
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.core.frozen import frozen


def _body(ns: dict) -> None:
    """One set of fields for both decorators: positional, defaults, a factory, keyword-only,
    one left out of __init__, and a __post_init__ that derives a field as frozen classes must."""
    ns["__annotations__"] = {"a": "int", "b": "str", "c": "float", "tags": "list", "k": "int", "hidden": "int",
                             "total": "float"}
    ns["b"] = "x"
    ns["c"] = 1.5
    ns["tags"] = field(default_factory=list)
    ns["k"] = field(default=7, kw_only=True)
    ns["hidden"] = field(default=3, init=False)
    ns["total"] = field(default=0.0, init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "total", self.a + self.c + self.k)
    ns["__post_init__"] = __post_init__


def _record(decorate, name):
    ns: dict = {"__module__": __name__, "__qualname__": name}
    _body(ns)
    return decorate(type(name, (), ns))


Fast, Slow = _record(frozen, "Fast"), _record(dataclass(frozen=True), "Slow")

args = st.tuples(st.integers(-5, 5), st.text(max_size=3), st.floats(-1e3, 1e3), st.lists(st.integers(), max_size=2),
                 st.integers(0, 9))


@given(args, st.sets(st.sampled_from(["b", "c", "tags", "k"])))
def test_same_fields_equality_hash_and_repr_as_a_frozen_dataclass(values, given_names):
    a, b, c, tags, k = values
    kw = {name: v for name, v in zip(("b", "c", "tags", "k"), (b, c, tags, k)) if name in given_names}
    fast, slow = Fast(a, **kw), Slow(a, **kw)
    assert fast.__dict__ == slow.__dict__
    assert repr(fast).replace("Fast(", "Slow(", 1) == repr(slow)
    assert fast == Fast(a, **kw) and (fast != Fast(a + 1, **kw))


def test_a_default_factory_gives_each_instance_its_own_value():
    assert Fast(1).tags == [] and Fast(1).tags is not Fast(1).tags


def test_defaults_positional_order_and_keyword_only():
    r = Fast(1, "y", 2.0, [4], k=5)
    assert (r.a, r.b, r.c, r.tags, r.k, r.hidden, r.total) == (1, "y", 2.0, [4], 5, 3, 8.0)
    with pytest.raises(TypeError):
        Fast(1, "y", 2.0, [4], 5)   # k is keyword-only, as under dataclass
    with pytest.raises(TypeError):
        Fast()                      # a is required


def test_frozen_replace_and_pickle():
    r = Fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.a = 2
    moved = dataclasses.replace(r, a=4)
    assert (moved.a, moved.total) == (4, 4 + 1.5 + 7)
    assert pickle.loads(pickle.dumps(r)) == r


@frozen
class Point:
    x: int
    y: int = 0


def test_hash_follows_the_fields():
    assert hash(Point(1, 2)) == hash(Point(1, 2)) and {Point(1, 2), Point(1, 2), Point(2, 1)} == {Point(1, 2),
                                                                                                  Point(2, 1)}


def test_initvar_and_slots_are_refused():
    with pytest.raises(TypeError, match="InitVar"):
        @frozen
        class WithInitVar:
            a: int
            scale: InitVar[int] = 1
    with pytest.raises(TypeError, match="slots"):
        @frozen(slots=True)
        class Slotted:
            a: int
    # the annotation as an object (no `from __future__ import annotations`), defaulted or not
    for ann in ({"a": "int", "scale": InitVar[int]}, {"scale": InitVar[int], "a": "int"}):
        with pytest.raises(TypeError, match="InitVar"):
            frozen(type("Built", (), {"__annotations__": ann, "__module__": __name__}))


def test_a_class_variable_is_no_initvar():
    """A ClassVar is left out of fields() and of __init__, as an InitVar is out of fields(): it is accepted."""
    @frozen
    class Counted:
        a: int
        limit: ClassVar[int] = 4
    assert (Counted(2).a, Counted.limit, [f.name for f in dataclasses.fields(Counted)]) == (2, 4, ["a"])


def test_the_init_stores_into_the_instance_dict_without_setattr_calls():
    """The point of the module, checked on the code rather than by a timing (a loaded machine makes
    timings flaky): dataclass(frozen=True) calls object.__setattr__ once per field, ~3x the cost of
    the plain dict stores @frozen's __init__ makes (measured 1.3 against 3.5 us for OpCost's 9 fields)."""
    names = Point.__init__.__code__.co_names
    assert names == ("__dict__",), names
    slow = dataclass(frozen=True)(type("SlowPoint", (), {"__annotations__": {"x": "int"}}))
    assert "__setattr__" in slow.__init__.__code__.co_names   # what it replaces
