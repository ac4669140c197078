"""Where HBM-PIM stops paying: decode-step speed-up of `hbm_pim` over the same
GPU without PIM, over batch x context, for Llama-2-13B (fp16).

Each cell simulates one decode step at kv_len = context with pim_policy auto
and fc_and_attention, against none. Cells whose KV cache would not fit the
preset's 30 GiB are still simulated (the step time does not depend on it) and
marked. Writes a markdown table to stdout and docs/img/pim_crossover.png.

    python scripts/pim_crossover.py [--hw hbm_pim] [--model llama2-13b] [--all-dies]

--all-dies: as if every die carried PIM units (pim.pim_capacity_bytes_per_stack null; hw_models/pim/reach.py).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from hw_models.machine import load_machine
from hw_models.pim.mapper import PimMapper
from sim.core.errors import CapacityError
from sim.core.workload import workload_from_dict

BATCHES = (1, 2, 4, 8, 16, 32, 64)
CONTEXTS = (512, 1024, 2048, 4096)
ROOT = Path(__file__).resolve().parents[1]


def cell(machine, model: str, batch: int, ctx: int) -> dict:
    out = {}
    for policy in ("none", "auto", "fc_and_attention"):
        w = workload_from_dict(dict(model=model, batch=batch, prompt_len=ctx - 1, gen_len=2, pim_policy=policy), "grid")
        m = PimMapper(machine, w, w.model_config_())
        out[policy] = m.step("decode", 1, ctx).time_s
        if policy == "auto":
            try:
                m.footprint()
                out["fits"] = True
            except CapacityError:
                out["fits"] = False
            decisions = m.decisions(m.step_graph("decode", 1, ctx, num_layers=1))   # one layer's placement
            out["fc_on_pim"] = sorted({d.op.base_name for d in decisions if d.where == "pim" and d.op.kind == "gemm"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="hbm_pim")
    ap.add_argument("--model", default="llama2-13b")
    ap.add_argument("--png", default=str(ROOT / "docs/img/pim_crossover.png"))
    ap.add_argument("--all-dies", action="store_true", help="every die with PIM units (no reach limit)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    machine = load_machine(args.hw, {"pim.pim_capacity_bytes_per_stack": None} if args.all_dies else None)
    grid = {(b, c): cell(machine, args.model, b, c) for b in BATCHES for c in CONTEXTS}

    print(f"Decode-step speed-up of {args.hw} over the same GPU without PIM ({args.model}, fp16):")
    print("auto / fc_and_attention; * = does not fit the preset's memory\n")
    print("| batch \\ context | " + " | ".join(str(c) for c in CONTEXTS) + " |")
    print("|---|" + "---|" * len(CONTEXTS))
    for b in BATCHES:
        row = []
        for c in CONTEXTS:
            r = grid[(b, c)]
            row.append(f"{r['none'] / r['auto']:.2f} / {r['none'] / r['fc_and_attention']:.2f}{'' if r['fits'] else '*'}")
        print(f"| {b} | " + " | ".join(row) + " |")
    print("\nFC GEMMs on PIM under auto (context 2048):")
    for b in BATCHES:
        print(f"  batch {b}: {', '.join(grid[(b, 2048)]['fc_on_pim']) or 'none'}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, policy in zip(axes, ("auto", "fc_and_attention")):
        z = np.array([[grid[(b, c)]["none"] / grid[(b, c)][policy] for c in CONTEXTS] for b in BATCHES])
        im = ax.imshow(z, cmap="RdYlGn", vmin=0.0, vmax=max(2.0, z.max()), origin="lower", aspect="auto")
        for i, b in enumerate(BATCHES):
            for j, c in enumerate(CONTEXTS):
                ax.text(j, i, f"{z[i, j]:.2f}{'' if grid[(b, c)]['fits'] else '*'}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(CONTEXTS)), [str(c) for c in CONTEXTS])
        ax.set_yticks(range(len(BATCHES)), [str(b) for b in BATCHES])
        ax.set_xlabel("context (kv_len)")
        ax.set_title(f"pim_policy={policy}")
    axes[0].set_ylabel("batch")
    fig.colorbar(im, ax=axes, label="speed-up vs no PIM (decode step)")
    reach = machine.section("pim").get("pim_capacity_bytes_per_stack")
    dies = "every die with PIM units" if reach is None else f"PIM dies reach {reach} a stack"
    fig.suptitle(f"{args.model} on {args.hw} ({dies}): where PIM stops paying (* does not fit)")
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110, bbox_inches="tight")
    print(f"\nwrote {args.png}")


if __name__ == "__main__":
    main()
