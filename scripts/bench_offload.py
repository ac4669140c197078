"""Time the offload policy search: OPT-175B on flexgen_t4, effective batch up to 256
(issue 4 asks for >= 200 candidate policies in under 30 s).

    /work/venv/bin/python scripts/bench_offload.py
"""

from __future__ import annotations

import time

from hw_models.registry import mapper_for
from hw_models.machine import load_machine
from hw_models.offload.search import search
from sim.core.workload import workload_from_dict
from sim.apps.script_help import no_options


def main() -> None:
    no_options(__doc__)
    w = workload_from_dict(dict(name="bench", model="opt-175b", batch=256, prompt_len=512, gen_len=32,
                                policy="search"), "bench")
    t0 = time.perf_counter()
    m = mapper_for(load_machine("flexgen_t4"), w, w.model_config_())
    r = search(m, m.spec)
    elapsed = time.perf_counter() - t0
    print(f"{r.candidates} candidate policies ({r.feasible} feasible), LP + DES confirmation of the top "
          f"{len(r.top)}: {elapsed:.1f} s")
    for c in r.top:
        print(f"  LP {c.lp_throughput:.3f} tok/s, DES {c.des_throughput:.3f} tok/s: {c.policy.describe()}")
    print(f"best: {r.best.policy.describe()}")


if __name__ == "__main__":
    main()
