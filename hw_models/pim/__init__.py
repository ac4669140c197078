"""Kind `pim`: a host GPU whose DRAM stacks carry MAC units (HBM-PIM, AiM, AttAcc);
op by op the mapper places work on the host or in the stacks."""

from __future__ import annotations

from hw_models.pim.config import PimConfig, PimPolicy
from hw_models.pim.mapper import PimMapper
from hw_models.pim.report import report_sections
from hw_models.pim.roofs import roofs

KIND = "pim"
MAPPER = PimMapper
PRESET_SCHEMA = PimConfig                       # the preset's `pim:` section
WORKLOAD_SCHEMAS = {"pim_policy": PimPolicy}    # which ops may run in PIM
register = None

__all__ = ["KIND", "MAPPER", "PRESET_SCHEMA", "WORKLOAD_SCHEMAS", "register", "report_sections", "roofs"]
