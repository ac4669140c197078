"""Surviving mutants argued equivalent (issue 32): each changes nothing a caller can observe, so
scripts/mutation_check.py leaves it out of the kill rate and prints how many it left out. Keys are
the reasons, values mutmut's mutant names. A name is tied to mutmut's numbering of its function: an
edit to the function renumbers them, and the check then reports a listed name that was killed or
not found (re-argue it from `mutmut show NAME`)."""

from __future__ import annotations

KV = "sim.apps.serve.kvpool.x"

EQUIVALENT: dict[str, tuple[str, ...]] = {
    # --- core (issue 21's set)
    "decide: `pim_s <= host.duration_s` differs from `<` only when the PIM and host times are the "
    "same float, a tie no preset produces (either placement then costs the same)":
        ("hw_models.pim.mapper.xǁPimMapperǁdecide__mutmut_177",),
    # --- KV pool
    "peak_used: `used >= peak` assigns the value it already holds":
        (f"{KV}ǁBlockPoolǁallocate__mutmut_16", f"{KV}ǁLruBlockPoolǁallocate__mutmut_31"),
    "OrderedDict.popitem / move_to_end with last=None: None is falsy, the same as last=False":
        (f"{KV}ǁBlockPoolǁallocate__mutmut_5", f"{KV}ǁLruBlockPoolǁallocate__mutmut_9",
         f"{KV}ǁLruBlockPoolǁallocate__mutmut_20"),
    "BlockPool.drop: the idle map's values are never read (it is an ordered set)":
        (f"{KV}ǁBlockPoolǁdrop__mutmut_6",),
    "LruBlockPool.__init__ `free = 1`: LruBlockPool never reads `free` (available, allocate and "
    "release are its own, on the queue)":
        (f"{KV}ǁLruBlockPoolǁ__init____mutmut_13",),
    "LruBlockPool.allocate: an evicted unit's leftover keyed None instead of a fresh object(): only one "
    "such leftover can exist (it is re-inserted at the head and the next allocation pops it before "
    "any other unit can be evicted), and None is no cached hash either":
        (f"{KV}ǁLruBlockPoolǁallocate__mutmut_15",),
    "LruBlockPool: a run of 0 blocks left in the queue (`m >= n` keeps an emptied run at the head; "
    "release(0) with `n < 0` appends one): it hands out no block and is popped like any run":
        (f"{KV}ǁLruBlockPoolǁallocate__mutmut_16", f"{KV}ǁLruBlockPoolǁrelease__mutmut_1"),
    "LruBlockPool.release: merging a release into the plain run at the tail is bookkeeping only; "
    "never merging (tail None) or looking up the tail of an empty queue gives the same blocks in "
    "the same order":
        (f"{KV}ǁLruBlockPoolǁrelease__mutmut_4", f"{KV}ǁLruBlockPoolǁrelease__mutmut_5",
         f"{KV}ǁLruBlockPoolǁrelease__mutmut_6", f"{KV}ǁLruBlockPoolǁrelease__mutmut_9"),
}


def reasons() -> dict[str, str]:
    """mutant name -> why it is equivalent."""
    return {name: why for why, names in EQUIVALENT.items() for name in names}
