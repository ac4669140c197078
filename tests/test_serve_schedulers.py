"""A scheduler is a plug-in (issue 27): one module, one settings class, one registry line
(sim.apps.serve.schedulers). A toy scheduler registered from this file alone, one request at
a time with no batching, runs through the whole serving path (instance sizing, simulator,
metrics); it must answer what a static batch of one answers, and never overlap two requests."""

from typing import Literal

import numpy as np
import pytest

from hw_models.machine import load_machine
from sim.apps.serve import schedulers
from sim.apps.serve.run import serve
from sim.apps.serve.schedulers import Batch, Scheduler
from sim.apps.serve.spec import SchedulerConfig, ServeFile, Static
from sim.core.schema import validate_mapping


class OneAtATime(SchedulerConfig):
    """The toy's settings: its traits are the defaults (no paging, no budget) but one sequence."""
    kind: Literal["one-at-a-time"] = "one-at-a-time"

    @property
    def max_seqs(self) -> int:
        return 1


class OneAtATimeScheduler(Scheduler):
    """The oldest waiting request runs alone, prefill then every decode, before the next starts."""

    def schedule(self, now: float, more_coming: bool) -> Batch | None:
        if not self.running:
            if not self.waiting:
                return None
            r = self.waiting.popleft()
            r.blocks = self.pool.blocks_for(r.prompt + r.output)
            if not self.pool.allocate(r.blocks):
                raise AssertionError("the toy's stream fits the pool")
            self.running = [r]
        r = self.running[0]
        return Batch([(r, r.pending)])


@pytest.fixture
def toy_registered():
    schedulers.register(OneAtATime, OneAtATimeScheduler)
    yield
    del schedulers.SCHEDULERS[OneAtATime]


def _file(sched) -> ServeFile:
    raw = dict(name="t", model="llama2-7b", serving=dict(
        arrivals=dict(process="poisson", rate=20.0, num_requests=12, seed=5),
        lengths=dict(prompt=dict(dist="uniform", low=32, high=256), output=dict(dist="uniform", low=2, high=12)),
        scheduler=dict(kind="static", batch_size=1)))
    f = validate_mapping(ServeFile, raw, "test.yaml", "a serving file")
    return f.model_copy(update={"serving": f.serving.model_copy(update={"scheduler": sched})})


def test_a_toy_scheduler_registered_from_a_test_runs_the_serving_path(toy_registered):
    a6000, cache = load_machine("a6000"), {}
    toy, _ = serve(_file(OneAtATime()), a6000, cache=cache)
    ref, _ = serve(_file(Static(kind="static", batch_size=1)), a6000, cache=cache)
    # A static batch of one runs the same iterations in the same order (module doc), so every
    # request's times agree; a different scheduler (V1's batching, the default) would not.
    for col in ("scheduled_s", "first_token_s", "finish_s"):
        assert toy.requests[col] == pytest.approx(ref.requests[col], rel=1e-12), col
    assert toy.iterations["duration_s"].size == ref.iterations["duration_s"].size
    # One at a time: each request starts after the one before it finished.
    order = np.argsort(toy.requests["scheduled_s"], kind="stable")
    assert (toy.requests["scheduled_s"][order][1:] >= toy.requests["finish_s"][order][:-1]).all()
    assert toy.requests["scheduled_s"][order][1] > toy.requests["arrival_s"][order][1]   # someone queued


def test_an_unregistered_settings_class_names_no_scheduler():
    with pytest.raises(KeyError):
        schedulers.scheduler_class(OneAtATime())
