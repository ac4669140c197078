"""The lazy tables' point books (sim.apps.serve.lazytable) with a stand-in store, by hand (issue 32: the
survivors of the mutation run): one book per store key and path, a stand-in without a key by identity,
and a flush that merges what another process wrote since the table was read."""

from __future__ import annotations

from types import SimpleNamespace

from sim.apps.serve.lazytable import PointBook, book
from tests.test_mutation_kills_surrogate import Store as DictStore   # its dict of tables stands for the disk


def test_one_book_per_key_and_path_and_per_stand_in():
    a, b = SimpleNamespace(key="k", path="/cache/a"), SimpleNamespace(key="k", path="/cache/b")
    assert book(a) is book(SimpleNamespace(key="k", path="/cache/a")) and book(a) is not book(b)
    plain, other = DictStore(), DictStore()      # no key, no path: told apart by identity
    assert book(plain) is book(plain) and book(plain) is not book(other)


def test_flush_merges_points_written_since_the_read():
    """This process read table D (empty), computed point 'x' = 1; meanwhile another process saved 'y' = 2.
    The flush writes both, and only a table with new points (E, only read, is not written)."""
    store = DictStore()
    pb = PointBook(store)
    pb.open("D")
    pb.open("E")
    assert pb.get("D", "x", lambda: 1) == 1 and pb.get("D", "x", lambda: 99) == 1   # computed once
    store.saved["D"] = {"y": 2}
    pb.flush()
    assert store.saved == {"D": {"x": 1, "y": 2}} and not pb.dirty
