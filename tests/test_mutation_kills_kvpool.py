"""The KV pool's bookkeeping, worked by hand (issue 32: the survivors of the mutation job on
sim.apps.serve.kvpool). Each test drives a tiny pool through a few calls and checks the counts a
serving run reports or relies on: free/available blocks, the peak in use, evictions, the reference
count of a shared prefix unit, and which blocks the V1 queue hands out first."""

from __future__ import annotations

from sim.apps.serve.kvpool import BlockPool, LruBlockPool


def test_defaults_are_one_block_units_without_caching():
    """BlockPool(8, 4): no prefix caching unless asked (publish refuses, match finds nothing), and a
    unit is one block: a cached pool with the default unit that publishes hash 7 and drops it has
    8 - 3 = 5 free + 1 idle unit x 1 block = 6 available after allocating 3."""
    plain = BlockPool(8, 4)
    assert plain.publish(7) is False
    assert plain.match((7,)) == 0
    for cls in (BlockPool, LruBlockPool):
        pool = cls(8, 4, caching=True)
        assert pool.allocate(3)
        assert pool.publish(7) is True
        pool.drop((7,))
        assert pool.available == 8 - pool.null_blocks - 3 + 1
    lru = LruBlockPool(8, 4)
    assert lru.publish(7) is False


def test_peak_used_and_evictions_counted():
    """BlockPool(10, 4, caching): nothing allocated -> peak 0. allocate 4 -> used 4, peak 4;
    release 4, allocate 2 -> used 2, peak stays 4. Publish units 1 and 2 (held by the request whose
    2 blocks they are), drop both -> idle, available 10. allocate 10: free is 8, so the 2 idle units
    go, least recently dropped first: 2 evictions, used 10, peak 10."""
    pool = BlockPool(10, 4, caching=True)
    assert pool.peak_used == 0
    assert pool.allocate(4) and pool.used == 4 and pool.peak_used == 4
    pool.release(4)
    assert pool.allocate(2) and pool.peak_used == 4
    assert pool.publish(1) and pool.publish(2)
    pool.drop((1, 2))
    assert pool.available == 10 and pool.used == 0
    assert pool.allocate(10)
    assert pool.evictions == 2 and pool.peak_used == 10 and pool.match((1,)) == 0


def test_lru_peak_used_counts_blocks_in_use():
    """LruBlockPool(9, 4): 8 usable blocks (block 0 is the null block). allocate 5 -> peak 5;
    release 5, allocate 1 -> peak stays 5."""
    pool = LruBlockPool(9, 4)
    assert pool.peak_used == 0
    assert pool.allocate(5) and pool.peak_used == 5
    pool.release(5)
    assert pool.allocate(1) and pool.used == 1 and pool.peak_used == 5


def test_publish_refuses_a_unit_already_cached():
    """A second request computing the same unit keeps its private copy: publish(5) twice -> the
    second is False, and the unit's reference count stays 1 (one drop makes it idle)."""
    for cls in (BlockPool, LruBlockPool):
        pool = cls(8, 4, caching=True)
        pool.allocate(2)
        assert pool.publish(5) is True
        assert pool.publish(5) is False
        pool.drop((5,))
        assert pool.refs[5] == 0


def test_shared_unit_stays_held_until_its_last_holder_drops():
    """Unit 3 published (1 holder), then held by two more requests (refs 3). Two drops leave one
    holder: the unit is not idle and cannot be evicted (available unchanged); the third drop makes
    it idle: available + 1. A unit held from idle leaves the free queue (available - 1)."""
    for cls in (BlockPool, LruBlockPool):
        pool = cls(6, 4, caching=True)
        pool.allocate(1)
        pool.publish(3)
        pool.hold((3,))
        pool.hold((3,))
        assert pool.refs[3] == 3
        before = pool.available
        pool.drop((3,))
        pool.drop((3,))
        assert pool.available == before and pool.refs[3] == 1
        pool.drop((3,))
        assert pool.available == before + 1
        pool.hold((3,))
        assert pool.available == before and pool.refs[3] == 1


def test_lru_consecutive_releases_are_all_allocatable():
    """LruBlockPool(9, 4): 8 usable. allocate 8, release 3 then 5 (the second merges into the
    first run at the tail): all 8 come back: allocate 8 succeeds and leaves 0."""
    pool = LruBlockPool(9, 4)
    assert pool.allocate(8)
    pool.release(3)
    pool.release(5)
    assert pool.available == 8
    assert pool.allocate(8) and pool.available == 0 and pool.used == 8


def test_lru_rest_of_a_run_is_taken_before_later_cached_units():
    """LruBlockPool(7, 4, caching): 6 usable in one run R. allocate 2 (R keeps 4 at the head);
    publish units 1, 2 for those 2 blocks, drop them: queue = R(4), 1, 2. allocate 1 leaves R(3)
    at the head, allocate 3 takes it: nothing evicted, both units still cached (had the rest of R
    gone to the tail, these allocations would have evicted units 1 and 2). One more block: unit 1."""
    pool = LruBlockPool(7, 4, caching=True)
    assert pool.allocate(2)
    pool.publish(1)
    pool.publish(2)
    pool.drop((1, 2))
    assert pool.allocate(1)     # R: 4 -> 3, the rest of the run still at the head
    assert pool.allocate(3)
    assert pool.evictions == 0 and pool.match((1, 2)) == 2
    assert pool.allocate(1)     # now the head is unit 1: evicted
    assert pool.evictions == 1 and pool.match((1, 2)) == 0
