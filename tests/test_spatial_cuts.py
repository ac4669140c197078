"""Where the pipeline is cut (issue 17 item 12): the cut depends on the chip count, never on
the batch, so on a fixed machine a larger batch can only be slower."""

from __future__ import annotations

import pytest

from hw_models.machine import load_machine
from hw_models.registry import mapper_for
from sim.core.errors import CapacityError
from sim.core.workload import workload_from_dict


def test_cut_depends_on_the_chip_count_not_the_batch():
    """Issue 17 item 12: on a fixed chip count every batch that fits runs the same cut (the one
    for the largest batch the chips hold), so its decode stations are the same and its step can
    only grow with the batch. Llama-2-7B fp16 at 66 tokens on groq_lpu: auto takes 67 chips at
    batch 1-3 and 68 from batch 4; the step falls from 67 to 68 chips at ANY batch (a chip-count
    effect of the cut, not a batch effect), so a batch series compares equal chip counts."""
    def mapper(batch, chips):
        w = workload_from_dict(dict(model="llama2-7b", batch=batch, prompt_len=64, gen_len=2), "cuts.yaml")
        return mapper_for(load_machine("groq_lpu", {"spatial.chips": chips}), w, w.model_config_())

    for chips in (67, 68):
        ref = mapper(1, chips)
        for batch in (2, 3):
            m = mapper(batch, chips)
            assert m.partition.slices == ref.partition.slices
            assert m.decode_costs(65).stations() == ref.decode_costs(65).stations()
            assert m.decode_step_s(65) >= ref.decode_step_s(65) * (1 - 1e-12)
    with pytest.raises(CapacityError, match="needs 68 chips"):
        _ = mapper(4, 67).partition   # the property raises
    assert mapper(1, 68).decode_step_s(65) < mapper(1, 67).decode_step_s(65)
