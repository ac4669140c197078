#!/usr/bin/env python3
"""Mutation testing of the core cost functions (issue 21) and of the serving, parallel and stack code (issue 32),
with mutmut (pinned in the `mutation` extra).

mutmut plants one small change at a time (an operator, a constant, an argument) in the functions
named by TARGETS and runs the tests that cover each function (pyproject's [tool.mutmut] picks the
test files); a mutant is killed when a test fails. Prints the kill rate per module and overall, and
every survivor (`mutmut show NAME` shows its diff). Exits 1 when the overall rate is below
--min-kill-rate, 2 when mutmut itself fails.

    python scripts/mutation_check.py [--sample 147] [--sample-new 3] [--only core|new|MODULE,...]
                                     [--min-kill-rate 0.9] [--log mutmut.log] [--resume]

--resume reruns only what an earlier run left surviving or unrun (a whole set in pieces, or after new
tests). --sample DIGITS runs only the mutants whose number ends in one of DIGITS (147: 30 %, a fixed subset, so
runs compare); CI uses it to stay within its time budget. --sample-new gives issue 32's modules their own
digits. Without them every mutant runs (core alone ~4 min on an idle 2-core machine; all ~3 500 mutants,
most of them issue 32's, several times that).

Measured (2026-11-30, whole set): 98.0 % (791 of 807; footprint 92.5, formats 100, roofline cost 97.6,
folding 98.7, PIM decision 99.4 %), up from 79.3 % (634 of 799) before tests/test_cost_edges.py and
tests/test_pim_placement.py; CI's sample 99.4 % (160 of 161). The 16 survivors change nothing
observable, so they are left visible rather than excluded (a `# pragma: no mutate` would also drop
the killed mutants of their lines):
  footprint.weight_bytes  `is_moe or True`; `first_dense_layers + 2`; `else 2` (dense): lowering one
      more identical layer, or a dense model's min(L, 0 + 1) = 1, gives the same bytes, the last lowered
      layer standing for the rest (for a 1-layer model it stands for 0 more). batch, q_len or kv_len 2
      in its lowering: weight shapes do not depend on them (_resident_shape takes the whole table).
      `seen.get(name, 1)`: every weight tensor is at least 1 byte.
  cost.roofline_cost  mode default "XXautoXX"/"AUTO": compute_path tests only mode == "native".
      `_family_gemm(...) and False` (plain roofline computed for a kernel-family GEMM too): the family
      cost ignores it; it differs only in whether compute: native refuses a format that a stack's
      kernel family runs, which no document specifies (left open, not pinned).
  cost.work_time_s  asarray without dtype=float: `np.where(w > 0, w, 1.0)` is float either way;
      the placeholder 2.0 for zero work: it is masked out by the final np.where.
  generation.sample_indices  `n < samples`: at n == samples, linspace(0, n - 1, n) rounds to arange(n).
  pim.mapper.decide  `pim_s <= host`; `memory_s > duration / 2`: differ only at an exact float tie
      (the second changes only the wording of the reason).

Issue 32's modules (`--only new`), on mutants numbered *3 (10 %), 2026-12-02: 71.1 % (189 of 266) on
main before this work (schedulers 79.5, KV pool 85.0, metrics 67.5, surrogate 64.5, collectives 68.8,
parallel plan 3 of 3, MoE routing 2 of 5, stack cost 64.3, kernel families 4 of 5 %); after the
tests/test_mutation_kills_*.py files, 100 % (254 of 254) with 12 survivors argued equivalent in
scripts/mutation_equivalents.py (left out of the rate; the script notes a listed one that gets killed,
as after a renumbering). Core on *47 (CI's): 97.0 % before (5 survivors), now 100 % (165 of 165, the
PIM tie argued equivalent). Whole sets: KV pool 80.1 % (121 of 151) before, 100 % (137 of 137, 14 argued
equivalent) after; metrics 88.5 % (332 of 375) with the first kill tests, 100 % (364 of 364, 11 argued) after.
Whole sets, 2026-12-02 (issue 32, later): the scheduler set now takes in sglang.py, trtllm.py and
vllm_cohort.py (842 mutants), and the decode cohort (cohort.py), the capacity search's early stop and the
lazy tables join as sets of their own. Schedulers 80.9 % (296 of 366) on the part run before the new
tests (base, orca, sarathi, sglang, static, trtllm, vllm_v0 in part), 98.3 % (342 of 348) on the same
mutants after; the whole set after: 96.2 % (769 of 799; 40 argued equivalent, 3 not reached, 10
timeouts), 100 % (89 of 89) on CI's *3. Decode cohort 93.0 % (225 of 242, 4 argued). Early stop 45.4 %
(74 of 163, its only test the excluded search) before, 100 % (158 of 158, 5 argued) after; lazy table
82.1 % (46 of 56) before, 100 % (54 of 54, 2 argued) after. The kill tests: tests/test_mutation_kills_
sched_paths.py, test_early_stop_hand.py, test_lazytable_book.py. The other new sets were not rerun whole.
A whole set runs in pieces with --resume (each piece's verdicts kept).
CI's sample after the merge of mutation3 (2026-12-02): 97.1 % (509 of 524; 15 survivors in the surrogate,
stack cost and cohort, two listed V1 equivalents renumbered and killed); with tests/test_mutation_kills_cohort.py
and the new surrogate and stack tests, 100 % (520 of 520; 5 more argued equivalent, 279 s).
Whole decode cohort set after its rewrite (327 mutants): 89.6 % (293 of 327, 3 listed equivalents stale); with
two more hand-worked cohort tests and 13 argued or renumbered, 94.6 % (298 of 315; 17 left, 4 of them not reached).
CI gates both in one mutmut run: `--only core,new --sample 47 --sample-new 3 --min-kill-rate 0.90`
(423 mutants after the last merge of main: 216 CPU-s, 4.7 min wall with 75 % of the CPU; 324 CPU-s and 15 min at
load 8-11 before: about 2-3 min on two idle cores).

This stop (issue 32, later): CI's sample on 8373f6d, 97.3 % (532 of 547; 1511 s wall, 456 CPU-s at load ~12),
its 15 survivors in the run-ahead hooks (decode_event, decode_need, regrow, runs_ahead, V1's cohort_regrow),
DecodeCohort.advance, the stack's family cost and the surrogate's pairs/split choice: after
tests/test_mutation_kills_runahead.py and the added stack and surrogate tests, 99.8 % (549 of 550, one
argued equivalent more). The selection then took in the last two stops' modules (one-pass costs, all of
costvec, run-ahead, closed loop, serving validation's figures and the overhead fit, engine terms, attention
kernels, engine collectives: 898 more mutants); on their *3 (201 mutants) 73.1 % before any test of their
own (run-ahead 74.5, closed loop 73.9, validation 38.9, engine terms 75.0, attention kernels 78.1, engine
collectives 92.3, one-pass costs 94.1 %); with tests/test_validate_figures.py, the host-curve and collective
tests and five more argued equivalent, 77.7 % (160 of 206, after a merge of main renumbered the attention
kernels: run-ahead 75.9, closed loop 73.9, validation 50.0 (step_features has no test that reaches it),
attention kernels 80.0, one-pass costs 97.0, engine terms and collectives 100 %). The closed loop's
no-gap figures and validate.group_key got tests after that run (not rerun). CPU: the new modules with the
surrogate set, 294 mutants, 345 CPU-s (486 s wall at load ~10): CI's sample grows from 547 to about 756
mutants and from ~456 to ~700 CPU-s. So CI samples the newest modules on numbers ending in 03-43
(--sample-newest '[0-4]3', about 5 %): 81.6 % (80 of 98; run-ahead 69.0, closed loop 81.8, validation 50.0,
attention kernels 93.8, the rest 100 %), 193 CPU-s run alone (stats and clean run included), so CI's sample is
about 648 mutants, ~97 % and ~600-650 CPU-s (estimated from the parts; not run whole).

The next stop (issue 32 items 4 and 7): the newest modules on *[0-4]3 were 77.0 % (77 of 100; run-ahead 69.0,
closed loop 80.0, validation 42.9, attention kernels 76.5 %); with hand-worked tests for 18 survivors
(tests/test_validate_figures.py, test_attention_kernels.py, test_serve_runahead.py, test_mutation_kills_runahead.py,
test_serve_closed.py, test_engine_overheads.py) and 5 more argued equivalent, CI's whole selection is 100 %
(649 of 649, 23 argued equivalent), 270 s wall.

TARGETS are mutmut's mutant-name globs (module, then `x_` + function or `xǁClassǁ` + method); their
files are pyproject's [tool.mutmut] only_mutate. A glob that matches nothing is reported: a function
that moved needs both lists updated.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mutation_equivalents import reasons   # scripts/: the survivors argued equivalent, with why

REPO = Path(__file__).resolve().parent.parent

TARGETS: dict[str, list[str]] = {
    "footprint": ["sim.core.footprint.x_weight_bytes__mutmut_*", "sim.core.footprint.x_kv_bytes__mutmut_*",
                  "sim.core.footprint.x_activation_peak_bytes__mutmut_*"],
    "formats": [f"sim.core.formats.xǁNumberFormatǁ{f}__mutmut_*"
                for f in ("scale_count", "element_bytes", "scale_bytes", "storage_bytes")],
    "roofline cost": [f"hw_models.cost.x_{f}__mutmut_*" for f in ("roofline_cost", "work_time_s")],
    "folding": [f"sim.core.generation.x_{f}__mutmut_*" for f in ("fold_layers", "sample_indices", "decode_kv_lens")],
    "PIM decision": [f"hw_models.pim.mapper.xǁPimMapperǁ{f}__mutmut_*" for f in ("decide", "piece_cost")]
    + ["hw_models.pim.layout.xǁ*ǁsplit_gemm__mutmut_*"],
    # issue 32: the code written since, reached through its hand-worked tests
    "schedulers": [f"sim.apps.serve.schedulers.{m}.*__mutmut_*"
                   for m in ("base", "orca", "sarathi", "static", "vllm", "vllm_v0", "vllm_cohort", "sglang", "trtllm")],
    "KV pool": ["sim.apps.serve.kvpool.*__mutmut_*"],
    "metrics": ["sim.apps.serve.metrics.*__mutmut_*"],
    "surrogate": ["sim.apps.serve.stepcost.xǁSurrogateǁ*__mutmut_*", "sim.apps.serve.costvec.*__mutmut_*",
                  "sim.apps.serve.iteration.x_features__mutmut_*", "sim.apps.serve.iteration.x_verify_logits__mutmut_*",
                  "sim.apps.serve.stepcost.x__grid__mutmut_*"],
    "collectives": ["hw_models.network.collectives.*__mutmut_*"],
    # (ParallelPlan's figures are properties, which mutmut 3.8 leaves alone: decorated functions are not mutated)
    "parallel plan": ["hw_models.gpu.parallel.xǁParallelGpuMapperǁenergy_j__mutmut_*",
                      "hw_models.gpu.parallel.xǁParallelGpuMapperǁpower_j__mutmut_*"],
    "MoE routing": ["sim.core.moe.*__mutmut_*"],
    "stack cost": ["hw_models.stack.cost.*__mutmut_*"],
    "kernel families": ["hw_models.stack.kernel_families.*__mutmut_*"],
    # the decode cohort's array pass (issue 30), the capacity search's early stop, the surrogate's lazy table
    "cohort": ["sim.apps.serve.cohort.*__mutmut_*"],
    "early stop": ["sim.apps.serve.early_stop.*__mutmut_*"],
    "lazy table": ["sim.apps.serve.lazytable.*__mutmut_*"],
    # the last two stops' modules (issue 32, later): the one-pass decode and mixed costs, decode run-ahead,
    # closed-loop load, serving validation's figures and the engine-overhead fit, and the stack's engine terms
    "one-pass costs": ["sim.apps.serve.decodecost.*__mutmut_*", "sim.apps.serve.mixedcost.*__mutmut_*"],
    "run-ahead": ["sim.apps.serve.runahead.*__mutmut_*"],
    "closed loop": ["sim.apps.serve.closed.*__mutmut_*"],
    # (run_file, simulate and the report's text and plots are left out: whole serving runs and wording)
    "validation": [f"sim.apps.serve.validate.x_{f}__mutmut_*"
                   for f in ("step_features", "layout_features", "signed_errors", "group_key", "mape", "overall")]
    + ["sim.apps.serve.overhead_fit.*__mutmut_*"],
    "engine terms": ["hw_models.stack.engine_overheads.*__mutmut_*", "hw_models.stack.step_overhead.*__mutmut_*",
                     "hw_models.stack.sampler.*__mutmut_*"],
    "attention kernels": ["hw_models.stack.attention_kernels.*__mutmut_*"],
    "engine collectives": ["hw_models.network.engine_collectives.*__mutmut_*"],
}
CORE = ("footprint", "formats", "roofline cost", "folding", "PIM decision")   # issue 21's set
NEWEST = ("one-pass costs", "run-ahead", "closed loop", "validation", "engine terms", "attention kernels",
          "engine collectives")   # the last two stops' modules: CI samples them more sparsely (--sample-newest)
KILLED = {1, 3, 36, 37, -24, 24, 152, 255}      # test failed, pytest error, timeout, caught by type check
SURVIVED = {0, 5, 33}                           # tests passed, or no test covers the mutant
TIMEOUT = {36, -24, 24, 152}                    # killed by the time limit (pyproject's timeout_multiplier)


def statuses() -> dict[str, int | None]:
    """mutant name -> exit code of its test run (None: not run), from mutmut's .meta files."""
    out: dict[str, int | None] = {}
    for meta in (REPO / "mutants").rglob("*.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def report(targets: dict[str, list[str]], codes: dict[str, int | None]) -> float:
    """Print each module's kill rate, the survivors not argued equivalent, and any listed equivalent
    that was killed; return the overall rate (the argued equivalents left out)."""
    print(f"{'module':<15} {'mutants':>8} {'killed':>7} {'survived':>9} {'equivalent':>11} {'kill rate':>10} "
          f"{'(timeouts)':>10}")
    equivalent = reasons()
    killed_all = total_all = 0
    survivors: list[str] = []
    stale: list[str] = []
    for module, patterns in targets.items():
        names = [n for n in codes if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
        for p in TARGETS[module]:
            if not any(fnmatch.fnmatchcase(n, p) for n in codes):
                print(f"  note: no mutant matches {p} (moved or renamed? update TARGETS)")
        checked = [n for n in names if codes[n] is not None and codes[n] != 34]
        killed = [n for n in checked if codes[n] in KILLED]
        stale += sorted(n for n in killed if n in equivalent)
        argued = [n for n in checked if n not in killed and n in equivalent]
        survivors += sorted(n for n in checked if n not in killed and n not in equivalent)
        counted = len(checked) - len(argued)
        killed_all, total_all = killed_all + len(killed), total_all + counted
        rate = len(killed) / counted if counted else float("nan")
        timeouts = sum(codes[n] in TIMEOUT for n in killed)
        print(f"{module:<15} {counted:>8} {len(killed):>7} {counted - len(killed):>9} {len(argued):>11} {rate:>10.1%} "
              f"{timeouts:>10}")
    rate = killed_all / total_all if total_all else 0.0
    print(f"mutation kill rate: {rate:.1%} ({killed_all} of {total_all} mutants killed; "
          "those argued equivalent in scripts/mutation_equivalents.py left out)")
    for name in survivors:
        print(f"  survived: {name}")
    for name in stale:
        print(f"  note: {name} is listed as equivalent but was killed (renumbered? re-argue it)")
    return rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-kill-rate", type=float, default=0.0, help="fail below this overall fraction")
    ap.add_argument("--sample", default="", help="digits: run only mutants whose number ends in one of them")
    ap.add_argument("--sample-new", default=None, help="digits for issue 32's modules (default: --sample's)")
    ap.add_argument("--sample-newest", default=None,
                    help="a glob the NEWEST modules' mutant numbers end with, e.g. '[0-4]3' (about 5 %%; default: "
                         "--sample-new's digits)")
    ap.add_argument("--log", type=Path, default=REPO / "mutants-run.log", help="mutmut's own output")
    ap.add_argument("--only", default="", help="comma-separated modules of TARGETS (default: all); "
                    "'core' for issue 21's, 'new' for issue 32's")
    ap.add_argument("--resume", action="store_true",
                    help="keep mutants/ and its verdicts; run only the chosen mutants that survived or were not "
                         "run (after adding tests; a changed source file is mutated afresh by mutmut)")
    args = ap.parse_args(argv)

    chosen = [m.strip() for m in args.only.split(",") if m.strip()]
    chosen = [x for m in chosen for x in (CORE if m == "core" else [t for t in TARGETS if t not in CORE]
                                              if m == "new" else [m])]
    unknown = [m for m in chosen if m not in TARGETS]
    if unknown:
        print(f"--only: no module {', '.join(unknown)} (modules: {', '.join(TARGETS)}, core, new)")
        return 2
    def tail(module: str) -> str:
        if module in NEWEST and args.sample_newest is not None:
            return args.sample_newest
        digits = args.sample if module in CORE or args.sample_new is None else args.sample_new
        return f"[{digits}]" if digits else ""

    targets = {module: [p + tail(module) for p in patterns] for module, patterns in TARGETS.items()
               if not chosen or module in chosen}
    globs = [g for gs in targets.values() for g in gs]
    earlier: dict[str, int | None] = {}
    if args.resume:
        earlier = statuses()
        globs = unsettled(globs, earlier)
        if not globs:
            print("--resume: no mutant of these modules left to run; their verdicts as they stand:")
            return verdict(report(targets, statuses()), args.min_kill_rate)
    else:
        shutil.rmtree(REPO / "mutants", ignore_errors=True)   # no verdicts cached from an earlier run
    t0 = time.monotonic()
    with args.log.open("w") as log:
        env = {**os.environ, "SIM_HYPOTHESIS_PROFILE": "derandomized"}   # tests/conftest.py: same verdict every run
        rc = subprocess.run([sys.executable, "-m", "mutmut", "run", *globs], cwd=REPO, stdout=log, env=env,
                            stderr=subprocess.STDOUT).returncode
    elapsed = time.monotonic() - t0
    # A changed test selection makes mutmut forget every verdict; the mutants not rerun keep their earlier one.
    codes = {**earlier, **{n: c for n, c in statuses().items() if c is not None or n not in earlier}}
    if rc != 0 or not codes:
        print(f"mutmut failed (exit {rc}); see {args.log}")
        return 2

    samples = sorted({tail(m) for m in targets} - {""})
    print(f"mutation testing (mutmut), {elapsed:.0f} s" + (f", mutants numbered *{' and *'.join(samples)}"
                                                           if samples else ""))
    return verdict(report(targets, codes), args.min_kill_rate)


def verdict(rate: float, min_kill_rate: float) -> int:
    if rate < min_kill_rate:
        print(f"FAILED: kill rate {rate:.1%} below {min_kill_rate:.0%}")
        return 1
    return 0


def unsettled(globs: list[str], codes: dict[str, int | None]) -> list[str]:
    """The mutants of `globs` an earlier run left surviving or did not reach (--resume): tests only
    added since cannot revive a killed one, so only these need running again."""
    return sorted(n for n, c in codes.items() if c not in KILLED and any(fnmatch.fnmatchcase(n, g) for g in globs))


if __name__ == "__main__":
    sys.exit(main())
