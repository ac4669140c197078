"""Surviving mutants argued equivalent (issue 32): each changes nothing a caller can observe, so
scripts/mutation_check.py leaves it out of the kill rate and prints how many it left out. Keys are
the reasons, values mutmut's mutant names. A name is tied to mutmut's numbering of its function: an
edit to the function renumbers them, and the check then reports a listed name that was killed or
not found (re-argue it from `mutmut show NAME`)."""

from __future__ import annotations

KV = "sim.apps.serve.kvpool.x"
SCHED = "sim.apps.serve.schedulers."
SUR = "sim.apps.serve.stepcost.x"
MET = "sim.apps.serve.metrics.x_"

EQUIVALENT: dict[str, tuple[str, ...]] = {
    # --- core (issue 21's set)
    "decide: `pim_s <= host.duration_s` differs from `<` only when the PIM and host times are the "
    "same float, a tie no preset produces (either placement then costs the same)":
        ("hw_models.pim.mapper.xǁPimMapperǁdecide__mutmut_215",),   # was _177 (renumbered by stop 65's edits)
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
    # --- schedulers
    "Static.__init__ `shape = (1, 0)` (or None, (0, 1)), `step = None` (or 1): _form sets the shape and the "
    "step before schedule first reads them (schedule forms a batch whenever none runs)":
        tuple(f"{SCHED}static.xǁStaticǁ__init____mutmut_{i}" for i in (10, 11, 12, 13, 14)),
    "Scheduler._decodes: which path runs (`not self.reference or ...`, `self.reference and ...`, `_grow is not "
    "Scheduler._grow`): the one-allocation path and _decodes_reference decide the same (issue 30; "
    "tests/test_serve_fastpath.py compares them on random streams), so taking either one changes no output":
        tuple(f"{SCHED}base.xǁSchedulerǁ_decodes__mutmut_{i}" for i in (1, 2, 4)),
    "Scheduler._swap_in `len(running) <= max_seqs`: a request is swapped out only from the running list, and "
    "none is admitted while any is swapped (V0 and Sarathi prefill only with the swapped queue empty), so "
    "running + swapped <= max_seqs, and running < max_seqs whenever one waits to swap in":
        (f"{SCHED}base.xǁSchedulerǁ_swap_in__mutmut_2",),
    "Scheduler._swap_in `r.swapped = 1` after the swap-in: r.swapped is read only while r waits in the "
    "swapped queue, and every swap-out sets it first":
        (f"{SCHED}base.xǁSchedulerǁ_swap_in__mutmut_27",),
    "vllm_cohort._decoding's caching test loosened (`published or ...`, `cached.get(idx, None / 1 / no default)`): "
    "under caching a running V1 request is always in `cached` (set at admission, dropped only by free) with "
    "cached == computed // unit_tokens (_waiting, _running and _cache_filled cache each unit as its tokens are "
    "scheduled), and one with its first token out is published (the engine publishes at the first token, and "
    "V1's preemption keeps the flag), so each form gives the same truth value":
        tuple(f"{SCHED}vllm_cohort.x__decoding__mutmut_{i}" for i in (10, 12, 14, 15)),
    "vllm_cohort._cache_filled `_cache(r, computed + 2)`: _cache caps the tokens at prompt + generated, which "
    "is computed + 1 for a member (one token pending)":
        (f"{SCHED}vllm_cohort.x__cache_filled__mutmut_18",),
    "Scheduler._admit with `usable` for any computed (`or True`, `else 1`), or matching with no usable unit: "
    "_admit is reached only for a request holding no blocks, whose computed is 0 (new, or reset by a "
    "recompute preemption; a swapped one comes back through _swap_in), and match of no hashes hits nothing":
        tuple(f"{SCHED}base.xǁSchedulerǁ_admit__mutmut_{i}" for i in (6, 12, 15)),
    "Scheduler._decodes `sum(n for n in needs if n >= 0)`: the zeros add nothing":
        (f"{SCHED}base.xǁSchedulerǁ_decodes__mutmut_16",),
    "VllmV0._prefills `return` (None) for `break`: every caller (V0, Sarathi, Orca) ignores what it returns":
        (f"{SCHED}vllm_v0.xǁVllmV0ǁ_prefills__mutmut_15", f"{SCHED}vllm_v0.xǁVllmV0ǁ_prefills__mutmut_26"),
    "VllmV1.__init__: the watermark (None or 1 for 0) is never read by V1 (its own fits_ever, no _admit, no "
    "swapping); passing no prompt limit is passing None":
        tuple(f"{SCHED}vllm.xǁVllmV1ǁ__init____mutmut_{i}" for i in (8, 9, 10)),
    "VllmV1._running `q >= budget` for `>`: at q == budget, q = budget changes nothing":
        (f"{SCHED}vllm.xǁVllmV1ǁ_running__mutmut_23",),
    "VllmV1.free: a freed request's `cached` entry left behind (`pop(None, None)`) is overwritten when it is "
    "admitted again (_waiting) and read only for running requests; `pop(idx)` without the default: free is "
    "reached only for running requests, all in `cached` since their admission":
        (f"{SCHED}vllm.xǁVllmV1ǁfree__mutmut_6", f"{SCHED}vllm.xǁVllmV1ǁfree__mutmut_8"),
    "Orca._grow `return 1`: never called (Orca.schedule does not reach Scheduler._decodes); it exists so "
    "that the one-allocation and cohort paths, which test `type(sched)._grow is Scheduler._grow`, leave Orca be":
        (f"{SCHED}orca.xǁOrcaǁ_grow__mutmut_1",),
    "Trtllm.__init__ passing None (or nothing) for prompt_limit: VllmV1.__init__ discards it (chunked "
    "prefill: no prompt limit)":
        (f"{SCHED}trtllm.xǁTrtllmǁ__init____mutmut_5", f"{SCHED}trtllm.xǁTrtllmǁ__init____mutmut_9"),
    "Trtllm.free `reserved.pop(idx)` without the default: free is reached only for a running request "
    "(finish, _preempt), and every running request came through _admits, which reserved it":
        (f"{SCHED}trtllm.xǁTrtllmǁfree__mutmut_4",),
    "Scheduler._decodes_reference `preempted = None`: returned as a truth value only (`if not ...`), None "
    "is falsy as False; `need >= 0`: allocate(0) always succeeds, so the loop is not entered at 0 either":
        (f"{SCHED}base.xǁSchedulerǁ_decodes_reference__mutmut_1", f"{SCHED}base.xǁSchedulerǁ_decodes_reference__mutmut_12"),
    "VllmV0._cohort_step's member test loosened (`caching = None`, `and` -> `or` in it): the test holds for "
    "every running V0 request anyway (V0 prefills whole prompts and schedule returns on any prefill step, "
    "so a running request has its token out, one token pending, and its prompt published under caching, "
    "which the engine does at the first token; a swapped-in one keeps what it computed); it guards the "
    "cohort against a future change":
        tuple(f"{SCHED}vllm_v0.xǁVllmV0ǁ_cohort_step__mutmut_{i}" for i in (10, 14, 15)),
    "Static._form `P = O = 1`: the batch's shape is the max over its requests, each with at least 1 prompt "
    "and 1 output token (traces refuse lengths below 1), so a start of 1 gives the same max":
        (f"{SCHED}static.xǁStaticǁ_form__mutmut_3",),
    "VllmV1._cache `cached.get(idx)` without the default 0: _waiting sets cached[idx] before its first _cache "
    "and _running calls it only for a request in `cached`, so the default is never used":
        (f"{SCHED}vllm.xǁVllmV1ǁ_cache__mutmut_13",),
    "Scheduler._decodes (issue 30's one-allocation path) `if n >= 0`: adds 0 blocks to a request that needs none":
        (f"{SCHED}base.xǁSchedulerǁ_decodes__mutmut_34",),
    "Scheduler.regrow (run-ahead's one allocation) `sum(... if n >= 0)`: the zeros add nothing to the blocks taken":
        (f"{SCHED}base.xǁSchedulerǁregrow__mutmut_3",),
    "VllmV1._running `_preempt(victim, None)`: V1's _preempt never reads the batch (no swapping in V1)":
        (f"{SCHED}vllm.xǁVllmV1ǁ_running__mutmut_41",),
    "VllmV1._running `>=` before _cache: with no new full unit _cache's loop is empty and it sets nothing":
        (f"{SCHED}vllm.xǁVllmV1ǁ_running__mutmut_51",),
    "VllmV1._waiting `(r.computed == 0) or True`: a waiting V1 request has computed 0 (new, or preempted, "
    "which resets it)":
        (f"{SCHED}vllm.xǁVllmV1ǁ_waiting__mutmut_13",),
    # --- decode cohort
    "DecodeCohort.features: `repeat(1)` without a count is cut by zip at the cohort's length; `pairs` 0 "
    "(an int) where 0.0, chunks left at the default 0: equal numbers, equal hashes, the same arithmetic":
        ("sim.apps.serve.cohort.xǁDecodeSeqsǁseqs__mutmut_12",
         "sim.apps.serve.cohort.xǁDecodeCohortǁfeatures__mutmut_15",
         "sim.apps.serve.cohort.xǁDecodeCohortǁfeatures__mutmut_16"),
    "DecodeCohort.dissolve dropping the lookahead (default 0): the engine makes a cohort only without "
    "speculative decoding (ServeSim.__init__), whose draft tokens are the only lookahead (instance.py: "
    "`spec.k if spec else 0`), so it is 0 already":
        ("sim.apps.serve.cohort.xǁDecodeCohortǁdissolve__mutmut_4",),
    "DecodeCohort._due `ordered or len > 1`: its callers (fills, ends) all take the default ordered=True, "
    "so both forms sort (grow pops its bookings inline and unordered since stop 40); `len(due) >= 1`: "
    "sorting a one-member list leaves it as it is":
        ("sim.apps.serve.cohort.xǁDecodeCohortǁ_due__mutmut_8", "sim.apps.serve.cohort.xǁDecodeCohortǁ_due__mutmut_9"),
    "cohort: `_fmax` `a > b`: at a == b it returns b, the same number (a NaN a loses to b either way); "
    "_Peaks.push `gaps[-1] < gap` keeps an equal earlier gap, so the stack falls non-strictly and its first "
    "entry at or after a step is still the largest gap since; sync `m.since <= 0`: since is -1 or a step "
    "+ 1 >= 2, never 0; hand_out `m.live = None`: live is only tested for truth; join `joined += 2`: join "
    "numbers are only compared (sort key, bisect), so their spacing changes no order":
        ("sim.apps.serve.cohort.x__fmax__mutmut_5", "sim.apps.serve.cohort.xǁ_Peaksǁpush__mutmut_5",
         "sim.apps.serve.cohort.xǁDecodeCohortǁsync__mutmut_7", "sim.apps.serve.cohort.xǁDecodeCohortǁhand_out__mutmut_52",
         "sim.apps.serve.cohort.xǁDecodeCohortǁjoin__mutmut_22"),
    # --- early stop, lazy tables
    "allowed_violations: `arange(1, n + 1)` of ints (no dtype) searched for a float finds the same index; "
    "`n + 2` adds an element past q/100 x n <= n, which searchsorted (left) never passes; `min(idx, n + 1)`: "
    "idx <= n - 1 for every percentile up to 100, so the min is idx either way":
        tuple(f"sim.apps.serve.early_stop.x_allowed_violations__mutmut_{i}" for i in (19, 22, 25, 37)),
    "settled_failure `key.rpartition('_')`: an SLO key is METRIC_STAT and no metric name has an underscore":
        ("sim.apps.serve.early_stop.x_settled_failure__mutmut_4",),
    "lazytable.book: a store without `path` keyed 'None' or 'XXXX' instead of '': one constant for another":
        ("sim.apps.serve.lazytable.x_book__mutmut_15", "sim.apps.serve.lazytable.x_book__mutmut_21"),
    # --- surrogate
    "_grid: `range(64, 513, 16)` / `range(512, 1025, 64)` add 512 / 1024, which the next range / the loop "
    "add anyway: the points are a set":
        (f"{SUR}__grid__mutmut_23", f"{SUR}__grid__mutmut_33"),
    "_interpolated `c = (0.0, 1.0)`: every branch overwrites c (an iteration has at least one token)":
        (f"{SUR}ǁSurrogateǁ_interpolated__mutmut_3",),
    "_interpolated `rest >= 1` for the chunk table: an iteration with rest == 1 never gets here "
    "(Surrogate.device costs it exactly)":
        (f"{SUR}ǁSurrogateǁ_interpolated__mutmut_123",),
    "costvec.rows_around weight 1.0 (not 0.0) where the grid has one point or does not rise: a one-point grid "
    "gives the same row twice (rows[min(j + 1, 0)]), so the weight multiplies a difference of exactly 0, and "
    "the grids are otherwise strictly increasing (_grid's sorted set, CHUNKS)":
        ("sim.apps.serve.costvec.x_rows_around__mutmut_33",),
    "MixedCosts: the split table taken only below 4 tokens (`rest <= 4` for `< 4`): at rest 4 the chunks are "
    "one of 4 tokens or two of 2 (a 1-token sequence is a decode), whose pairs are at least the even split's "
    "canon (kv >= q; the sum of q(q + 1)/2 is convex), so dp >= 0 takes the pairs table either way":
        ("sim.apps.serve.mixedcost.xǁMixedCostsǁ__call____mutmut_103",),
    # --- the last two stops' modules
    "StepOverhead.host_s `n_seqs < x[0]`: at n_seqs == x[0] the first segment's extension is y[0] + 0 x slope "
    "and np.interp gives y[0]: the same number":
        ("hw_models.stack.step_overhead.xǁStepOverheadǁhost_s__mutmut_3",),
    "validate.mape: float('NAN') is nan":
        ("sim.apps.serve.validate.x_mape__mutmut_23",),
    "runahead.Run.waits `times[+1]`: a one-step run has times[1] == times[-1]; a longer one then waits each "
    "step's dt, and the clock adds them as _timed added them to make times, so the run ends at times[-1] to "
    "the bit either way (only more simpy events)":
        ("sim.apps.serve.runahead.xǁRunǁwaits__mutmut_3",),
    "_build: the no-decode row `_cost(0, 1, t)`: with no decodes the KV argument is not read (`[(q, kv)] * 0` is "
    "empty), as `_cost(0, None, r)` below":
        (f"{SUR}ǁSurrogateǁ_build__mutmut_46",),   # was _43 (ExactCost.kinks added mutants above it)
    "_build: the KV grid `self.kv0 <= k`: kv0 is in the set already (`| {self.kv0, self.kv1}`)":
        (f"{SUR}ǁSurrogateǁ_build__mutmut_67",),   # was _53
    "_build: the chunk table's grid `_grid(R, fine=None)`: None is falsy, the same as fine=False":
        (f"{SUR}ǁSurrogateǁ_build__mutmut_145",),   # was _142, _203, _133 (mutmut renumbers a function's mutants on edits)
    "_build: the chunk table's one-chunk cost `_cost(0, None, r)`: with no decodes the KV argument is not "
    "read (`[(q, kv)] * 0` is empty)":
        (f"{SUR}ǁSurrogateǁ_build__mutmut_165",),   # was _162, _223, _153
    "_build: the mixed table's decode counts `_decodes(fine=None)`: None is falsy, the same as fine=False":
        (f"{SUR}ǁSurrogateǁ_build__mutmut_213",),
    "_build: the mixed table's one-chunk cost `_cost(0, 1, r + n x q)`: with no decodes the KV argument is not "
    "read (`[(q, kv)] * 0` is empty)":
        (f"{SUR}ǁSurrogateǁ_build__mutmut_243",),
    "runahead._timed `v = None` (the memo not read): a run's step vectors are then the cost's own, computed "
    "afresh; Surrogate.memo holds what that cost returned for the same features (n, KV, width), which a pure "
    "decode step's interpolated cost alone reads, and its entries are fixed once read (lazytable.Remembered), so "
    "the same vectors to the bit, only computed again. A vector wider than the run's first (keys grown) ends the "
    "run there either way, and where a run stops changes no output (the module's invariant, tested to the bit)":
        ("sim.apps.serve.runahead.x__timed__mutmut_33",),
    "runahead.allowed reading `MAX_TOKENS` (absent: MAX_SEQS) for `max_tokens`: the one cost a run is allowed "
    "under is the Surrogate (op_level False; GroupedCost only with groups > 1, refused before), whose "
    "max_tokens = max(max_tokens, max_decode x decode_q, 2) >= max_decode, so the min is max_decode either way":
        ("sim.apps.serve.runahead.x_allowed__mutmut_43",),
    "runahead._regrow_requests `computed = c0 + j + 1` while step j is regrown: the counter is read there only by "
    "VllmV1.regrow's `end = computed + 1`, which _cache caps at prompt + generated; generated is set right "
    "(g0 + j - 1) and a decoding member has computed = prompt + generated - 1 (_steps_left's test), so the cap is "
    "c0 + j, the unmutated end (an earlier `end // unit > cached` test then caches nothing more). The base "
    "regrow and decode_event (blocks, shared units, cached units) read no counter, and land sets both after "
    "the run (tried: block sizes 1, 2, 4 under prefix caching give the same run to the bit)":
        ("sim.apps.serve.runahead.x__regrow_requests__mutmut_43",),
    "closed.benchmark_figures: float('NAN') is nan":
        ("sim.apps.serve.closed.x_benchmark_figures__mutmut_123",),
    "closed._itl_s: float('NAN') is nan":
        ("sim.apps.serve.closed.x__itl_s__mutmut_33",),
    "attention_cost `d.get('kv_len', 2)`: every fused attention op has kv_len in its dims (the two builders, "
    "lowering._attention_block and mixed._layer's groups, set it; measured trace ops are not Ops), so the "
    "default is never read":
        ("hw_models.stack.attention_kernels.x_attention_cost__mutmut_96",),
    "attention_cost `d.get('head_dim', None)` / `d.get('head_dim')` for `d.get('head_dim', 128)`: every fused "
    "attention op has head_dim in its dims (lowering._attention_block and mixed._layer set it), so the default is "
    "never read":
        ("hw_models.stack.attention_kernels.x_attention_cost__mutmut_111",
         "hw_models.stack.attention_kernels.x_attention_cost__mutmut_113"),
    # --- stack cost
    "stack_cost `m = op.dims.get('m') if ... or True`: M for every op kind, but for_kind reads it only for a "
    "GEMM (Efficiency.is_gemv tests kind == GEMM; by_kind ignores M) and a GEMM gets it unchanged":
        ("hw_models.stack.cost.x_stack_cost__mutmut_94",),
    "stack_cost `attention = ... if (op.kind == g.ATTENTION) or True`: the family is looked up for every op that "
    "reaches it, but attention_cost returns None for an op that is not attention, so the op keeps the spec path":
        ("hw_models.stack.cost.x_stack_cost__mutmut_65",),

    # --- metrics (whole set)
    "`key.rpartition('_')` for partition: an SLO key is METRIC_STAT and no metric name has an underscore":
        (f"{MET}meets__mutmut_8", f"{MET}slo_check__mutmut_4"),
    "stats: float('NAN') is nan; argsort kind None/default/'STABLE' only reorders equal values, and a "
    "quantile is a value, the same for any of them; `len(xs) + 1` in the index guard: searchsorted of "
    "q/100 x the total weight (q <= 99) never passes the last index":
        (f"{MET}stats__mutmut_11", f"{MET}stats__mutmut_18", f"{MET}stats__mutmut_20",
         f"{MET}stats__mutmut_22", f"{MET}stats__mutmut_48"),
    "summarize: lat_stats['tbt'] is overwritten on the next line (so computing it from the per-request "
    "gaps first changes nothing); stats of an empty gap array with weights is the NaN table, as without; "
    "the sum of no iterations' durations is 0.0 either way":
        (f"{MET}summarize__mutmut_51", f"{MET}summarize__mutmut_52", f"{MET}summarize__mutmut_57",
         f"{MET}summarize__mutmut_68"),
}


def reasons() -> dict[str, str]:
    """mutant name -> why it is equivalent."""
    return {name: why for why, names in EQUIVALENT.items() for name in names}
