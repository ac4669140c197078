"""Groq's two published batch-1 decode points (issue 22) against the spatial model,
under each candidate parallel plan, with ONE set of preset parameters (groq_lpu as
shipped; the plan is the only thing that changes, the same for both models).

    python scripts/groq_published.py

Published (TechPowerUp, Feb 2024; hardware.md §3.1): Llama-2-7B at 2048 context
~750 tok/s/user, Llama-2-70B at 4096 context ~300 tok/s/user. Deployed size for 70B:
"over 500 GroqChips" (Arsovski, SC23), 576 = 8 GroqRacks x 9 GroqNodes x 8 (SemiAnalysis,
unverified); no chip count is published for 7B. Prints tok/s/user at the mean decode
context, the error, and where the token's time goes (stages, hops, collectives).
Per-hop latency, C2C framing and issue latency: ISCA 2020/2022 via the summaries cited in
hw_models/presets/groq_lpu.yaml (issue 22)."""

from __future__ import annotations

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from sim.core.workload import load_workload
from sim.apps.script_help import no_options

POINTS = (("workloads/llama2_7b_groq_2k.yaml", 750.0), ("workloads/llama70b_groq_4k.yaml", 300.0))
PLANS = {
    "pipeline, auto chips": {},
    "pipeline, 576 chips (8 GroqRacks)": {"spatial.chips": 576},
    "TP 8 (GroqNode) x pipeline, auto": {"spatial.tensor_parallel": 8},
    "TP 8 (GroqNode) x pipeline, 576 chips": {"spatial.tensor_parallel": 8, "spatial.chips": 576},
    # Not a plan any source names; printed so the gap between t = 1 and t = 8 is visible.
    "TP 2 x pipeline, 576 chips": {"spatial.tensor_parallel": 2, "spatial.chips": 576},
    "TP 4 x pipeline, 576 chips": {"spatial.tensor_parallel": 4, "spatial.chips": 576},
}


def point(path: str, overrides: dict) -> tuple[int, float, object]:
    """(chips, tok/s/user, decode costs) at the mean decode context of the workload."""
    w = load_workload(path)
    m = mapper_for(load_machine("groq_lpu", overrides), w, w.model_config_())
    kv = w.prompt_len + w.gen_len // 2
    return m.partition.chips, 1.0 / m.decode_step_s(kv), m.decode_costs(kv)


def main() -> None:
    no_options(__doc__)
    print(f"{'plan':40s} {'model':22s} {'chips':>5s} {'tok/s':>7s} {'pub':>5s} {'error':>7s} "
          f"{'stages':>9s} {'hops':>9s} {'coll.':>9s}")
    for plan, overrides in PLANS.items():
        for path, published in POINTS:
            chips, tok_s, c = point(path, overrides)
            name = path.split("/")[-1].removesuffix(".yaml")
            print(f"{plan:40s} {name:22s} {chips:5d} {tok_s:7.0f} {published:5.0f} {tok_s / published - 1:+7.0%} "
                  f"{sum(c.stage_s) * 1e6:7.0f}us {sum(c.hop_s) * 1e6:7.0f}us {sum(c.collective_s) * 1e6:7.0f}us")


if __name__ == "__main__":
    main()
