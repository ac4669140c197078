"""The offload kind's CapacityError names the tier that overflows and only the levers that help there
(hw_models/offload/advice.py). It used to end "Lower gpu_batch_size or move more to CPU/disk" whatever
overflowed: also where the CPU memory or the disk was full, where the policy had nothing left on the GPU,
or at GPU batch 1; the search's refusal said "the GPU cannot hold ..., or the fixed policy keys leave no room"."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.offload.advice import fixed_footprint, set_value
from hw_models.offload.search import search
from hw_models.registry import mapper_for, simulate
from sim.core.errors import CapacityError
from sim.core.workload import workload_from_dict

ONE = dict(gpu_batch_size=1, num_gpu_batches=1)
ALL_ON_DISK = dict(wg=0, wc=0, cg=0, cc=0, hg=0, hc=0)


def wl(model, batch, policy, prompt=512, gen=32):
    return workload_from_dict(dict(name="t", model=model, batch=batch, prompt_len=prompt, gen_len=gen, policy=policy),
                              "test.yaml")


def refusal(workload, hw="flexgen_t4", sets=None, search_cap=None) -> str:
    """The one-line CapacityError of a run (or, with search_cap, of `sim offload search --max-gpu-mem`)."""
    machine = load_machine(hw, sets)
    with pytest.raises(CapacityError) as exc:
        if search_cap is None:
            simulate(workload, machine, detail=False)
        else:
            m = mapper_for(machine, workload, workload.model_config_())
            search(m, m.spec, gpu_capacity=search_cap)
    msg = str(exc.value)
    assert "\n" not in msg and "Lower gpu_batch_size or move more to CPU/disk" not in msg
    return msg


def test_set_value_rounds_up_and_reads_back():
    assert set_value(60.0201e9) == "60.03GB" and set_value(1.5e12) == "1.5TB" and set_value(999) == "999"


# --- a fixed policy's placement (OffloadMapper.footprint) ---------------------------------------------

def test_gpu_full_of_the_policys_weights_moves_them_to_cpu():
    msg = refusal(wl("opt-30b", 1, dict(wg=100, wc=0, cg=0, cc=100, hg=0, hc=100, **ONE)))
    assert "in flexgen_t4.gddr" in msg and "but it holds 16.00 GB: short by" in msg
    assert "more on CPU memory: lower policy.wg, raise policy.wc (flexgen_t4.cpu_memory has 207" in msg
    assert "--set hw.memory.gddr.capacity_bytes=60.0" in msg and "smaller batch" not in msg   # batch 1 already


def test_gpu_full_with_everything_on_disk_offers_no_move():
    """Nothing of the policy is on the GPU: only its working set and buffers, which a smaller GPU batch shrinks."""
    msg = refusal(wl("opt-30b", 64, dict(ALL_ON_DISK, gpu_batch_size=64, num_gpu_batches=1), prompt=1024))
    assert "in flexgen_t4.gddr (activations" in msg and "more on" not in msg
    assert "a smaller batch (the block of 64 = gpu_batch_size 64 x num_gpu_batches 1; the working set here" in msg
    assert "policy.cpu_attention: true" in msg and "--set hw.memory.gddr.capacity_bytes=" in msg


def test_gpu_full_at_batch_1_with_everything_on_disk_needs_a_larger_gpu():
    msg = refusal(wl("opt-30b", 1, dict(ALL_ON_DISK, cpu_attention=True, **ONE)),
                  sets={"memory.gddr.capacity_bytes": 1e9})
    assert msg.endswith("What helps: a larger gddr: --set hw.memory.gddr.capacity_bytes=" + msg.rsplit("=", 1)[1])


def test_cpu_memory_full_moves_to_disk_not_cpu():
    msg = refusal(wl("opt-6.7b", 32, dict(wg=0, wc=100, cg=0, cc=100, hg=100, hc=0, gpu_batch_size=8,
                                          num_gpu_batches=4)), sets={"memory.cpu_memory.capacity_bytes": 10e9})
    assert "in flexgen_t4.cpu_memory (weights" in msg and "but it holds 10.00 GB" in msg
    assert "more on disk: lower policy.wc/cc, raise policy.wd/cd (flexgen_t4.disk has 1.50 TB free)" in msg
    assert "a smaller batch (the block of 32 = gpu_batch_size 8 x num_gpu_batches 4; the KV cache here grows" in msg
    assert "--set hw.memory.cpu_memory.capacity_bytes=" in msg and "CPU memory:" not in msg


def test_cpu_memory_full_of_weights_has_no_batch_lever():
    msg = refusal(wl("opt-6.7b", 1, dict(wg=0, wc=100, cg=100, cc=0, hg=100, hc=0, **ONE)),
                  sets={"memory.cpu_memory.capacity_bytes": 10e9})
    assert "more on disk: lower policy.wc, raise policy.wd" in msg and "batch" not in msg.split("What helps")[1]


def test_disk_full_moves_back_to_cpu_memory():
    """The disk is the last tier: what helps is less on it, or a larger one, never "more to disk"."""
    msg = refusal(wl("opt-6.7b", 1, dict(wg=0, wc=0, cg=100, cc=0, hg=100, hc=0, **ONE)),
                  sets={"memory.disk.capacity_bytes": 5e9})
    assert "in flexgen_t4.disk (weights 13.32 GB) but it holds 5.00 GB: short by 8.32 GB" in msg
    assert "less on disk: raise policy.wc, lower policy.wd (flexgen_t4.cpu_memory has 208.00 GB free)" in msg
    assert "--set hw.memory.disk.capacity_bytes=13.32GB" in msg


def test_disk_full_and_cpu_memory_nearly_full_says_only():
    msg = refusal(wl("opt-6.7b", 1, dict(wg=0, wc=30, cg=100, cc=0, hg=100, hc=0, **ONE)),
                  sets={"memory.disk.capacity_bytes": 5e9, "memory.cpu_memory.capacity_bytes": 5e9})
    assert "(flexgen_t4.cpu_memory has only 1.00 GB free)" in msg


def test_the_suggested_capacity_fits():
    w = wl("opt-6.7b", 1, dict(wg=0, wc=0, cg=100, cc=0, hg=100, hc=0, **ONE))
    msg = refusal(w, sets={"memory.disk.capacity_bytes": 5e9})
    simulate(w, load_machine("flexgen_t4", {"memory.disk.capacity_bytes": msg.rsplit("=", 1)[1].rstrip(".")}),
             detail=False)


# --- the policy search finds no placement (advice.no_fit) ----------------------------------------------

def test_search_all_tiers_too_small_needs_a_larger_disk():
    msg = refusal(wl("opt-175b", 1, "search"),
                  sets={"memory.cpu_memory.capacity_bytes": 64e9, "memory.disk.capacity_bytes": 100e9})
    assert msg.startswith("test.yaml: opt-175b (")   # the workload file first, as sim run's (an offload trial)
    assert "needs 351.78 GB (weights" in msg and "across GPU, CPU and disk: short by" in msg
    assert "--set hw.memory.disk.capacity_bytes=287.78GB" in msg and "smaller batch" not in msg


def test_search_gpu_cannot_hold_one_layer():
    msg = refusal(wl("opt-30b", 1, "search", prompt=1024), sets={"memory.gddr.capacity_bytes": 1e9})
    assert msg.startswith("test.yaml: no placement of opt-30b (fp16 weights, 1024+32 tokens, batch 1) fits "
                          "flexgen_t4: it needs")
    assert "in flexgen_t4.gddr (activations" in msg and "streaming buffers" in msg
    assert "What helps: a larger gddr: --set hw.memory.gddr.capacity_bytes=" in msg   # the search tried the rest


def test_search_under_max_gpu_mem_names_the_flag():
    msg = refusal(wl("opt-30b", 1, "search", prompt=1024), search_cap=1e9)
    assert "a higher --max-gpu-mem (now 1.00 GB; flexgen_t4.gddr holds 16.00 GB)" in msg


def test_search_with_a_fixed_share_that_overflows_names_its_key():
    msg = refusal(wl("opt-30b", 8, dict(wg=0, wc=100)), sets={"memory.cpu_memory.capacity_bytes": 40e9})
    assert "in flexgen_t4.cpu_memory (weights 59.95 GB) but it holds 40.00 GB" in msg
    assert "more on disk: lower policy.wc, raise policy.wd" in msg


def test_search_room_left_by_the_fixed_parts_too_small():
    """Every tier holds its fixed part, and the tiers hold the model, but not beside the GPU's working set."""
    w = wl("opt-6.7b", 1, "search")
    t4 = load_machine("flexgen_t4")
    m = mapper_for(t4, w, w.model_config_())
    size = m.sizes(1, 1)
    fp, _ = fixed_footprint(m, m.spec, ("gddr", "cpu_memory", "disk"), 1, 1)
    gpu, cpu = 1e9, 6e9
    disk = size["weights"] + size["kv_cache"] - gpu - cpu + size["working"] / 2
    assert fp.total("gddr") < gpu
    msg = refusal(w, sets={"memory.gddr.capacity_bytes": gpu, "memory.cpu_memory.capacity_bytes": cpu,
                           "memory.disk.capacity_bytes": disk})
    assert "what the search places" in msg and "--set hw.memory.disk.capacity_bytes=" in msg


def test_cpu_attention_without_off_gpu_kv_is_not_reported_as_cpu_attention():
    """CPU attention reads the KV cache off the GPU; with all of it on the GPU the two attention options are one
    policy: the search lists it once and does not call it CPU attention, and a fixed policy that sets it says it
    has no effect."""
    from hw_models.offload.spec import Policy, PolicySpec

    on_gpu = Policy((1.0, 0.0, 0.0), (1.0, 0.0, 0.0), (1.0, 0.0, 0.0), 8, 1, cpu_attention=True)
    assert on_gpu.describe().endswith("GPU batch 8 x 1, CPU attention (no effect: no KV cache off the GPU)")
    assert "no effect" not in Policy((1.0, 0.0, 0.0), (0.5, 0.5, 0.0), (1.0, 0.0, 0.0), 8, 1, True).describe()
    w = workload_from_dict(dict(name="t", model="tinyllama-1.1b", batch=8, prompt_len=256, gen_len=16), "t.yaml")
    m = mapper_for(load_machine("a6000_offload"), w, w.model_config_())
    res = search(m, PolicySpec({}))
    assert res.best.policy.kv_cache[0] == 1.0 and not res.best.policy.cpu_attention
    assert len({c.policy for c in res.top}) == len(res.top)
