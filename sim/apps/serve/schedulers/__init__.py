"""Iteration schedulers, one module each, found by the class of their settings (sim.apps.serve.spec).

A new scheduler is one module here (a base.Scheduler subclass), one settings class (a
spec.SchedulerConfig subclass whose properties give its traits) and one line in SCHEDULERS
(or a `register` call, as tests/test_serve_schedulers.py does for a toy one).
"""

from __future__ import annotations

from sim.apps.serve import spec as s
from sim.apps.serve.schedulers.base import Batch, Request, Scheduler
from sim.apps.serve.schedulers.orca import Orca
from sim.apps.serve.schedulers.sarathi import Sarathi
from sim.apps.serve.schedulers.sglang import Sglang
from sim.apps.serve.schedulers.static import Static
from sim.apps.serve.schedulers.trtllm import Trtllm
from sim.apps.serve.schedulers.vllm import VllmV1
from sim.apps.serve.schedulers.vllm_v0 import VllmV0

SCHEDULERS: dict[type[s.SchedulerConfig], type[Scheduler]] = {
    s.Vllm: VllmV1,
    s.VllmV0: VllmV0,
    s.Sarathi: Sarathi,
    s.Orca: Orca,
    s.Static: Static,
    s.Sglang: Sglang,
    s.Trtllm: Trtllm,
}


def register(config: type[s.SchedulerConfig], scheduler: type[Scheduler]) -> None:
    SCHEDULERS[config] = scheduler


def scheduler_class(cfg: s.SchedulerConfig) -> type[Scheduler]:
    """The scheduler that `cfg`'s settings class names."""
    return SCHEDULERS[type(cfg)]


__all__ = ["SCHEDULERS", "Batch", "Request", "Scheduler", "register", "scheduler_class"]
