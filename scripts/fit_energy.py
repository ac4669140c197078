#!/usr/bin/env python3
"""Fit the board-power figures on ML.ENERGY's H100 serving runs only (issue 33), and check the presets.

Fitted (sim.apps.serve.mlenergy_fit): h100_sxm.yaml's active_power_w and fp16/bf16 energy per FLOP, by
non-negative least squares on the relative power error over every FIT_EVERY-th run of each H100 sweep
(lm-arena-chat and sourcegraph-fim, max_num_seqs <= MAX_SEQS; runs measured at the 700 W cap left out), with the
HBM's energy per byte held at the preset's cited 40 pJ. Nothing else is fitted; the other presets take these
figures by rule:

* h200.yaml, h200_calibrated.yaml, h100_offload.yaml (its GPU is the h100_sxm's): the H100's (same GH100 die and
  700 W board). The H200's measured
  prefill and decode power (h200_micro.json; traces/h200/graph_steps) are held out (scripts/energy_h200.py,
  scripts/validation_h200_graph.py).
* b200.yaml: active power x the board limits' ratio (1000 / 700 W); J/FLOP x the ratio of joules per
  peak bf16 FLOP at the limit ((1000 W / 2250 TFLOP/s) / (700 W / 989.4 TFLOP/s)); J/byte the H100's.
* a100_80g.yaml, hbm_pim.yaml's host (an A100 board) and attacc_dgx.yaml's host (eight of them in one unit: eight
  boards' idle and activity, the same J/FLOP): active power by b200's rule at 400 W; hbm_pim's HBM2
  keeps its cited J/byte. The J/FLOP is not scaled (the rule's 1.25 pJ put 390 W of dynamic power on the A100's
  312 TFLOP/s peak, so the 400 W limit held a saturated GEMM to ~161 TFLOP/s): it is the figure at which a measured
  saturated bf16 GEMM holds the board at its limit (GEMM_AT_LIMIT: cuBLAS 8192^3 on random data runs at 257 TFLOP/s,
  clock-throttled by the 400 W limit, where zeros, drawing less, run at 295; H. He, "Strangely, Matrix
  Multiplications on GPUs Run Faster When Given 'Predictable' Data", thonking.ai, 2024): idle + activity + the
  GEMM's FLOPs and HBM bytes over its measured time = the limit. No A100 serving power is fitted (ML.ENERGY's A100
  runs are vLLM 0.5.4's).
* a6000.yaml, a6000_offload.yaml's GPU, a6000_calibrated.yaml and aim_gddr6.yaml's host (an A6000 board): the A100's rule at 300 W, its GDDR6 keeping its cited J/byte; the GEMM at its limit is Llama-2-7B's
  fused gate/up projection at 4096 tokens (M 4096, K 4096, N 22016, fp16), 6.096 ms median on an RTX A6000 (vidur
  profiler, UT-SysML/MaverIQ @ 067d7a1 mlp.csv; shared/validation/vidur/a6000): 121.2 TFLOP/s. That an A6000
  reaches its limit under sustained compute: NVML reports power-cap ("SW Power Scaling") throttling below the
  requested clock (forums.developer.nvidia.com/t/203772).

`--free-hbm` fits the HBM's J/byte too and prints that fit beside the shipped one: the runs give 0 W of activity,
0.817 pJ/FLOP and 155 pJ/byte, power MAPE 8.2% -> 6.4% on them; not shipped, because it does worse where it is not
fitted (docs/energy.md, "A third free figure").

The replays behind the fit (four per run, minutes in all) are stored in COMPONENTS (keys and
simulated figures only; the measured ones are read from the shared CSV).

    python scripts/fit_energy.py            # print the fit
    python scripts/fit_energy.py --replay   # replay the fit's runs, rewrite COMPONENTS, print the fit
    python scripts/fit_energy.py --check    # exit 1 if a preset's figures are not the fit's (copy them by hand),
                                            # or the stored replays are stale (one run replayed afresh)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hw_models.machine import load_machine  # noqa: E402
from sim.apps.serve import mlenergy as M  # noqa: E402
from sim.apps.serve import mlenergy_fit as F  # noqa: E402
from sim.core.shared_data import shared_validation_dir  # noqa: E402

SHARED = shared_validation_dir()
COMPONENTS = ROOT / "scripts" / "energy_fit_components.json"
FIT_EVERY, MAX_SEQS, TASKS, FIT_GPU = M.FIT_EVERY, M.FIT_MAX_SEQS, M.FIT_TASKS, M.FIT_GPU   # the fit's runs
FIT_PRESET = "h100_sxm"
fit_runs = M.fit_runs
SAME_DIE = ("h200", "h200_calibrated", "h100_offload")
# A saturated 16-bit GEMM at the board's limit (module doc): its M, N, K and measured rate (throttled by the
# limit), in FLOP/s. A100: H. He, thonking.ai (bf16 8192^3 on random data); A6000: vidur's mlp_up_proj, 6.096 ms.
GEMM_AT_LIMIT = {"a100_80g": (8192, 8192, 8192, 257e12),
                 "a6000": (4096, 22016, 4096, 2 * 4096 * 22016 * 4096 / 6.096e-3)}
# Boards scaled from the H100's fit by b200.yaml's rule for activity, their J/FLOP from the GEMM of the board named.
SCALED_BOARDS = {"a100_80g": "a100_80g", "hbm_pim": "a100_80g", "attacc_dgx": "a100_80g",
                 **{p: "a6000" for p in ("a6000", "a6000_offload", "a6000_calibrated", "aim_gddr6")}}
# Presets whose one unit is several such boards (attacc_dgx: 8 A100s): idle and activity are that many boards'.
UNIT_BOARDS = {"attacc_dgx": 8}
STALE = 0.02   # a stored component more than 2% off a fresh replay of it: rerun --replay


def stored(runs: list[M.Run]) -> list[F.Components]:
    by_key = {k: r for r, k in F.run_keys(runs).items()}
    got = [F.from_dict(d, by_key) for d in json.loads(COMPONENTS.read_text())]
    return [c for c in got if c is not None]


def replay_all(runs: list[M.Run]) -> list[F.Components]:
    keys = F.run_keys(runs)
    comps = []
    for r in fit_runs(runs):
        comps.append(F.components(r))
        print(f"  {r.preset} tp{r.tp} ep{r.ep} {r.task} seqs {r.max_num_seqs}: {comps[-1].tput_tok_s:.0f} tok/s",
              flush=True)
    COMPONENTS.write_text(json.dumps([c.to_dict(keys) for c in comps], indent=1) + "\n")
    print(f"wrote {COMPONENTS}")
    return comps


def limits(preset: str) -> float:
    """The preset's board limit over the fitted H100's: the rule's scale for idle and activity power."""
    u, h100 = (load_machine(p).units["gpu"] for p in (preset, FIT_PRESET))
    return (u.power_limit_w or u.power_w) / (h100.power_limit_w or h100.power_w)


def derived(fit: F.Fit) -> dict[str, tuple[float, float, float]]:
    """(active_power_w, fp16 J/FLOP, HBM J/byte) each preset must carry, by the module doc's rules."""
    h100, b200 = (load_machine(p).units["gpu"] for p in (FIT_PRESET, "b200"))
    b200_limits = limits("b200")
    per_peak = b200_limits * h100.peak_flops_per_s["bf16"] / b200.peak_flops_per_s["bf16"]
    out = {p: (fit.active_power_w, fit.fp16_j_per_flop, fit.hbm_j_per_byte) for p in (FIT_PRESET, *SAME_DIE)}
    out["b200"] = (F.sig3(fit.active_power_w * b200_limits), F.sig3(fit.fp16_j_per_flop * per_peak),
                   fit.hbm_j_per_byte)
    for preset, board in SCALED_BOARDS.items():   # hbm_pim's HBM2 and the A6000's GDDR6 keep their cited J/byte
        active = F.sig3(fit.active_power_w * limits(board))
        out[preset] = (active * UNIT_BOARDS.get(preset, 1), gemm_j_per_flop(board, active),
                       fit.hbm_j_per_byte if preset == "a100_80g" else None)
    return out


def gemm_j_per_flop(preset: str, active_power_w: float) -> float:
    """The 16-bit J/FLOP at which the preset's GEMM_AT_LIMIT, at its measured rate, draws exactly the board's limit:
    (limit - idle - activity - its DRAM bytes' power) / rate; the bytes as sim's op counts them (A, B and C once), at
    the preset's own J/byte."""
    machine = load_machine(preset)
    u = machine.units["gpu"]
    m, n, k, rate = GEMM_AT_LIMIT[preset]
    seconds = 2 * m * n * k / rate
    dram_w = (m * k + k * n + m * n) * 2 * machine.memory[u.memory].energy_j_per_byte / seconds
    return F.sig3((u.power_w - u.idle_power_w - active_power_w - dram_w) / rate)


def stale_presets(fit: F.Fit) -> list[str]:
    bad = []
    for preset, (a, j, b) in derived(fit).items():
        m = load_machine(preset)
        u = m.units["gpu"]
        have = (u.active_power_w, u.energy_j_per_flop.get("fp16"), u.energy_j_per_flop.get("bf16"),
                m.memory[u.memory].energy_j_per_byte)
        want_all = (a, j, j if "bf16" in u.peak_flops_per_s else None, b)   # attacc_dgx's A100a runs fp16 alone
        if any(want is not None and (h is None or abs(h - want) > 1e-9 * max(abs(want), 1e-12))
               for h, want in zip(have, want_all)):
            wants = f"{a:g} W, {j:.3g} J/FLOP" + (f", {b:.3g} J/byte" if b is not None else " (its own J/byte)")
            bad.append(f"{preset}: active_power_w {have[0]:g}, fp16/bf16 J/FLOP {have[1]}/{have[2]}, "
                       f"HBM J/byte {have[3]}; the fit gives {wants}")
    return bad


def stale_idle() -> list[str]:
    """Each rule-scaled board's idle power: the H100's (itself assumed: the H200's measured idle) x the board limits'
    ratio, as its active power (a review: the check held active power and J/FLOP, not the idle figure)."""
    h100 = load_machine(FIT_PRESET).units["gpu"]
    bad = []
    for preset in ("b200", *SCALED_BOARDS):
        u = load_machine(preset).units["gpu"]
        board = SCALED_BOARDS.get(preset, preset)   # to 0.1 W a board, as the presets
        want = round(round(h100.idle_power_w * limits(board), 1) * UNIT_BOARDS.get(preset, 1), 1)
        if u.idle_power_w is None or abs(u.idle_power_w - want) > 1e-9 * want:
            bad.append(f"{preset}: idle_power_w {u.idle_power_w}; the rule gives {want:g} W")
    return bad


def stale_components(comps: list[F.Components]) -> list[str]:
    """The cheapest stored run replayed afresh: a moved serving model makes the stored replays stale."""
    c = min(comps, key=lambda c: (c.run.num_gpus, c.run.max_num_seqs, c.run.avg_output_tokens))
    fresh = F.components(c.run)
    off = [f"{name} {a:.4g} (fresh {b:.4g})" for name, a, b in
           (("p0_w", c.p0_w, fresh.p0_w), ("busy", c.busy, fresh.busy), ("per_j_w", c.per_j_w, fresh.per_j_w),
            ("per_b_w", c.per_b_w, fresh.per_b_w), ("tput", c.tput_tok_s, fresh.tput_tok_s))
           if abs(a / b - 1.0) > STALE]
    return [f"{COMPONENTS.name}: {c.run.preset} seqs {c.run.max_num_seqs}: " + ", ".join(off)] if off else []


def the_fit(comps: list[F.Components], free_hbm: bool = False) -> F.Fit:
    """The fit of `comps`: the HBM's J/byte held at the fitted preset's (free_hbm: fitted too)."""
    m = load_machine(FIT_PRESET)
    u = m.units["gpu"]
    return F.fit(comps, u.power_limit_w or u.power_w, None if free_hbm else m.memory[u.memory].energy_j_per_byte)


def fit_line(comps: list[F.Components] | None = None, free_hbm: bool = False) -> str:
    """The fit (of the stored components by default), as docs/energy.md states it."""
    comps = comps if comps is not None else stored(M.load_runs(SHARED))
    fit = the_fit(comps, free_hbm)
    return (f"Fitted on {fit.runs} H100 runs (every {FIT_EVERY}th of each sweep; {fit.left_out} measured at the "
            f"700 W cap left out): active_power_w **{fit.active_power_w:g} W**, fp16 "
            f"**{fit.fp16_j_per_flop * 1e12:.3g} pJ/FLOP**, HBM **{fit.hbm_j_per_byte * 1e12:.3g} pJ/byte**; "
            f"power MAPE over them {fit.power_mape:.1%}.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", action="store_true", help="replay the fit's runs and rewrite the stored components")
    ap.add_argument("--check", action="store_true", help="exit 1 if the presets or the stored replays differ")
    ap.add_argument("--free-hbm", action="store_true", help="also print the fit with the HBM's J/byte free (not shipped)")
    args = ap.parse_args()
    if not (SHARED / M.CSV_NAME).is_file():
        print(f"{SHARED / M.CSV_NAME} not found: nothing to fit")
        return 0
    runs = M.load_runs(SHARED)
    comps = replay_all(runs) if args.replay else stored(runs)
    fit = the_fit(comps)
    print(json.dumps(fit.as_dict()))
    print(fit_line(comps))
    if args.free_hbm:
        print("With the HBM's J/byte free (not shipped): " + fit_line(comps, free_hbm=True))
    if not args.check:
        return 0
    bad = stale_presets(fit) + stale_idle() + stale_components(comps)
    for line in bad:
        print(f"{line}: differs from scripts/fit_energy.py's fit (presets: copy the figures; replays: --replay)")
    if not bad:
        print("shipped figures are the script's output")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
