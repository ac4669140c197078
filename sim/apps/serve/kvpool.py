"""The paged KV cache: a pool of fixed-size blocks (vLLM's block manager), with
prefix caching (blocks of a hashed prompt prefix kept after their request ends and
reused by later requests with the same prefix; least recently used first out).

Only counts are kept: which physical block holds what does not change a cost.
A prefix unit is `unit_blocks` blocks (one hash id of the trace: Mooncake hashes
512-token blocks; a generated shared prefix is one unit).
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    def __init__(self, total_blocks: int, block_size: int, unit_blocks: int = 1, caching: bool = False):
        self.total = total_blocks
        self.block_size = block_size
        self.unit_blocks = unit_blocks
        self.caching = caching
        self.free = total_blocks
        # hash -> reference count; a unit at count 0 is cached but evictable, in LRU order.
        self.refs: dict[int, int] = {}
        self.idle: OrderedDict[int, None] = OrderedDict()
        self.peak_used = 0
        self.evictions = 0

    @property
    def available(self) -> int:
        """Blocks an allocation can have: free ones, and cached units no request holds."""
        return self.free + len(self.idle) * self.unit_blocks

    @property
    def used(self) -> int:
        return self.total - self.available

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> bool:
        if n > self.available:
            return False
        while self.free < n:   # evict least recently used idle prefix units
            h, _ = self.idle.popitem(last=False)
            del self.refs[h]
            self.free += self.unit_blocks
            self.evictions += 1
        self.free -= n
        used = self.total - self.available
        if used > self.peak_used:
            self.peak_used = used
        return True

    def release(self, n: int) -> None:
        self.free += n

    def match(self, hashes: tuple[int, ...]) -> int:
        """Leading prefix units of `hashes` already cached (not yet held)."""
        if not self.caching:
            return 0
        k = 0
        for h in hashes:
            if h not in self.refs:
                break
            k += 1
        return k

    def hold(self, hashes: tuple[int, ...]) -> None:
        for h in hashes:
            if self.refs[h] == 0:
                del self.idle[h]
            self.refs[h] += 1

    def publish(self, h: int) -> bool:
        """A request's own unit of blocks becomes a cached prefix (it keeps holding it).
        False when the unit is cached already (the request keeps its private copy)."""
        if not self.caching or h in self.refs:
            return False
        self.refs[h] = 1
        return True

    def drop(self, hashes: tuple[int, ...]) -> None:
        for h in hashes:
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.idle[h] = None
