"""Mixture-of-Experts routing: how many tokens each expert receives in a step.

A step routes T tokens, each to k of E experts. The load model gives each
expert a share p_e of the routing (sum 1): `uniform` (p_e = 1/E), `zipf`
(p_e proportional to 1/rank^skew, the skew seen in measured routers), or a
measured `histogram` of per-expert counts. A token picks expert e with
probability q_e = min(1, k p_e) (k distinct experts, so no expert is picked
twice by one token), hence in expectation

* expert e receives T q_e tokens;
* expert e is touched (receives at least one token, so its weights are read)
  with probability 1 - (1 - q_e)^T. Under uniform routing the expected number
  of distinct experts touched is E (1 - (1 - k/E)^T): 2 of 8 for one Mixtral
  token, all 8 (7.9992) at T = 32.

A capacity factor C (GShard, Switch Transformer) caps each expert at
C T k / E tokens; the excess is dropped (the token skips that expert). We use
the expected load, min(T q_e, capacity), not E[min(X, capacity)]: it counts no
drops where a binomial load would drop a few; dropless engines (vLLM, Mixtral)
leave `capacity_factor` unset.

The step's expert work is the expected value of these counts: fractional
experts and tokens are kept (a step at batch 3 reads 4.56 Mixtral experts'
weights), since the simulator predicts means, not one random draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

DISTRIBUTIONS = ("uniform", "zipf", "histogram")


@dataclass(frozen=True)
class ExpertLoad:
    """How a workload's tokens spread over a model's experts."""

    distribution: str = "uniform"
    skew: float = 1.0                       # Zipf exponent (distribution = zipf)
    histogram: tuple[float, ...] = ()       # per-expert counts (distribution = histogram)
    capacity_factor: float | None = None    # None: dropless

    def shares(self, num_experts: int) -> np.ndarray:
        """p_e, sorted as given (Zipf: expert 0 is the most popular)."""
        if self.distribution == "uniform":
            p = np.ones(num_experts)
        elif self.distribution == "zipf":
            p = 1.0 / np.arange(1, num_experts + 1) ** self.skew
        else:
            p = np.asarray(self.histogram, dtype=float)
            if len(p) != num_experts or p.sum() <= 0:
                raise ValueError(f"expert histogram has {len(p)} entries (sum {p.sum():g}); "
                                 f"the model has {num_experts} experts")
        return p / p.sum()


@dataclass(frozen=True)
class Routing:
    """Expected routing of one step: per expert, tokens kept and the chance it is touched."""

    tokens: np.ndarray      # kept tokens per expert (after capacity)
    touched: np.ndarray     # probability each expert receives >= 1 token
    dropped: float          # token-expert assignments dropped by capacity

    @property
    def experts_touched(self) -> float:
        return float(self.touched.sum())

    @property
    def assignments(self) -> float:
        return float(self.tokens.sum())

    def ranks(self, groups: int) -> list["Routing"]:
        """Split contiguously over `groups` expert-parallel ranks (E / groups experts each)."""
        n = len(self.tokens) // groups
        return [Routing(self.tokens[r * n:(r + 1) * n], self.touched[r * n:(r + 1) * n], 0.0)
                for r in range(groups)]


@lru_cache(maxsize=1024)
def route(num_experts: int, top_k: int, load: ExpertLoad, tokens: int) -> Routing:
    """Expected per-expert load of `tokens` tokens, each routed to `top_k` experts."""
    q = np.minimum(1.0, top_k * load.shares(num_experts))
    wanted = tokens * q
    kept = wanted
    if load.capacity_factor is not None:
        kept = np.minimum(wanted, load.capacity_factor * tokens * top_k / num_experts)
    touched = 1.0 - (1.0 - q) ** tokens
    return Routing(kept, touched, float(wanted.sum() - kept.sum()))
