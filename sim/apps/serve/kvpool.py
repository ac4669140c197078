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
    null_blocks = 0   # blocks never allocated (vLLM V1's null block, LruBlockPool)

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
        return self.total - self.null_blocks - self.available

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> bool:
        avail = self.free + len(self.idle) * self.unit_blocks   # `available`, read once: an eviction keeps it
        if n > avail:
            return False
        while self.free < n:   # evict least recently used idle prefix units
            h, _ = self.idle.popitem(last=False)
            del self.refs[h]
            self.free += self.unit_blocks
            self.evictions += 1
        self.free -= n
        used = self.total - (avail - n)
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


class LruBlockPool(BlockPool):
    """vLLM V1's block pool (vllm/v1/core/block_pool.py, v0.19): ONE free queue, least recently
    freed first, holding both plain free blocks and cached blocks no request holds. An allocation
    takes blocks from its head (`popleft_n`) and evicts a cached unit it takes (`_maybe_evict_cached_block`),
    even while plain free blocks freed later wait behind it; a freed block joins the tail. (V0's
    prefix-caching allocator and BlockPool above use plain free blocks first, then evict.) Block 0 is
    V1's null block, never allocated: `used` and the usage fraction count the other total - 1.

    The queue is an ordered map: a cached unit's key -> its blocks, or a run key (an object) -> that
    many plain free blocks, merged with the run before it when both are at the tail."""

    null_blocks = 1

    def __init__(self, total_blocks: int, block_size: int, unit_blocks: int = 1, caching: bool = False):
        super().__init__(total_blocks, block_size, unit_blocks, caching)
        self.queue: OrderedDict[object, int] = OrderedDict()
        self.free = 0
        self.avail = 0
        self.release(total_blocks - self.null_blocks)

    @property
    def available(self) -> int:
        return self.avail

    def allocate(self, n: int) -> bool:
        if n > self.avail:
            return False
        self.avail -= n
        q, refs = self.queue, self.refs
        while n > 0:
            key, m = q.popitem(last=False)
            if key in refs:                       # a cached unit: evicted (its hash is gone)
                del refs[key]
                self.evictions += 1
                key = object()
            if m > n:                             # the rest of the run stays at the head
                q[key] = m - n
                q.move_to_end(key, last=False)
            n -= min(m, n)
        used = self.used
        if used > self.peak_used:
            self.peak_used = used
        return True

    def release(self, n: int) -> None:
        if n <= 0:
            return
        q = self.queue
        tail = next(reversed(q), None) if q else None
        if tail is not None and tail not in self.refs:
            q[tail] += n                           # consecutive plain blocks: one run
        else:
            q[object()] = n
        self.avail += n

    def idle_blocks(self, keys) -> int:
        """Blocks of `keys` that are cached but held by no request (in the free queue)."""
        refs = self.refs
        return sum(self.unit_blocks for h in keys if refs[h] == 0)

    def hold(self, hashes) -> None:
        for h in hashes:
            if self.refs[h] == 0:
                self.avail -= self.queue.pop(h)
            self.refs[h] += 1

    def drop(self, hashes) -> None:
        for h in hashes:
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.queue[h] = self.unit_blocks
                self.avail += self.unit_blocks
