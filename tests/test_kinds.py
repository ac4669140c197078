"""The kind face and registry (hw_models.kinds, hw_models.registry): a kind is one
folder with the same face, registered by one line. A toy kind, registered from
this file alone, runs through the core generation loop; every shipped kind shows
the face; PIM's no-PIM baseline is simulated only when a report asks for it."""

import types

import pytest

import hw_models.pim.mapper as pim_mapper
from hw_models.base import Mapper, Section
from hw_models.kinds import KINDS, KindEntry, register_kind
from hw_models.machine import load_machine, machine_from_dict
from hw_models.registry import FACE, kind_module, report_sections, simulate
from sim.core.engine import Task
from sim.core.generation import DECODE_SAMPLES
from sim.core.workload import workload_from_dict

LATENCY_S = 1e-6
MODEL = dict(name="toy", hidden_size=64, intermediate_size=128, num_layers=4, num_heads=4, num_kv_heads=4,
             vocab_size=256, max_position_embeddings=4096)


class FixedLatencyMapper(Mapper):
    """A fixed-latency accelerator: every op takes the same time, one after another."""

    kind = "fixed"
    in_order = True

    def plan_step(self, graph):
        return [Task(op.name, "acc", LATENCY_S, tuple(graph.deps(op.name)), tag=op.name) for op in graph.ops()]


def _toy_kind() -> types.ModuleType:
    mod = types.ModuleType("toy_fixed_kind")
    mod.KIND, mod.MAPPER, mod.PRESET_SCHEMA, mod.WORKLOAD_SCHEMAS = "fixed", FixedLatencyMapper, None, {}
    mod.register, mod.roofs = None, None
    mod.report_sections = lambda result: [Section("Fixed latency", [("per op", f"{LATENCY_S * 1e6:.0f} us")])]
    return mod


@pytest.fixture
def fixed_kind(monkeypatch):
    monkeypatch.setitem(KINDS, "fixed", KINDS["gpu"])     # restored after the test
    register_kind("fixed", KindEntry(_toy_kind()))
    return machine_from_dict(dict(name="fixed1", kind="fixed",
                                  memory={"sram": dict(capacity_bytes=1e9, bandwidth_bytes_per_s=1e12)},
                                  units={"acc": dict(memory="sram", peak_flops_per_s={"fp16": 1e12},
                                                        vector_flops_per_s=1e11)}), "test")


def test_a_toy_kind_registered_from_the_test_runs_the_generation_loop(fixed_kind):
    w = workload_from_dict(dict(model=MODEL, batch=1, prompt_len=8, gen_len=5), "t")
    r = simulate(w, fixed_kind)
    ops_per_step = len(r.prefill_ops)                       # every op of the whole model, once
    assert ops_per_step == len(r.decode_ops) and ops_per_step > 4 * 10
    # Hand-derived: ops run back to back, so a step takes (ops) x latency, prefill and decode alike,
    # and layer folding (2 and 3 layers extrapolated to 4) is exact for a serial chain.
    assert r.ttft_s == pytest.approx(ops_per_step * LATENCY_S, rel=1e-12)
    assert r.tpot_s == pytest.approx(ops_per_step * LATENCY_S, rel=1e-12)
    assert r.e2e_s == pytest.approx(5 * ops_per_step * LATENCY_S, rel=1e-12)
    assert r.kind == "fixed" and r.utilization == {"acc": pytest.approx(1.0)}
    assert [s.title for s in report_sections(r)] == ["Fixed latency"]


def test_an_unregistered_kind_is_one_line():
    with pytest.raises(Exception, match="kind: unknown kind 'warp'; kinds: gpu, cpu"):
        machine_from_dict(dict(name="x", kind="warp", memory={"m": dict(capacity_bytes=1, bandwidth_bytes_per_s=1)},
                               units={"u": dict(memory="m", peak_flops_per_s={"fp16": 1})}), "w.yaml")


@pytest.mark.parametrize("kind", ["gpu", "cpu", "offload", "pim", "spatial"])
def test_every_shipped_kind_has_the_face(kind):
    mod = kind_module(kind)
    assert all(hasattr(mod, a) for a in FACE)
    assert callable(mod.MAPPER)      # a Mapper subclass, or a factory (machine, workload, model) -> Mapper
    assert set(mod.WORKLOAD_SCHEMAS) == set(KINDS[kind].workload_sections)


def test_pim_sweep_point_simulates_the_generation_once(monkeypatch):
    """detail=False (a sweep point): the generation once, no no-PIM baseline; a report
    (detail=True) adds the baseline's generation, once."""
    calls = []
    real = pim_mapper.PimMapper.step

    def counted(self, *a, **k):
        calls.append(self.policy)
        return real(self, *a, **k)

    monkeypatch.setattr(pim_mapper.PimMapper, "step", counted)
    w = workload_from_dict(dict(model="llama2-7b", batch=1, prompt_len=64, gen_len=32), "t")
    r = simulate(w, load_machine("hbm_pim"), detail=False)
    assert calls == ["auto"] * (1 + DECODE_SAMPLES) and "pim.speedup_tpot" not in r.metrics()
    calls.clear()
    r = simulate(w, load_machine("hbm_pim"), detail=True)
    assert calls == ["auto"] * (1 + DECODE_SAMPLES) + ["none"] * (1 + DECODE_SAMPLES)
    assert r.metrics()["pim.speedup_tpot"] > 1.0


def test_the_registry_line_names_the_face_register():
    for kind, entry in KINDS.items():
        if entry.cli:
            import importlib
            assert importlib.import_module(entry.cli).register is kind_module(kind).register
        else:
            assert kind_module(kind).register is None
