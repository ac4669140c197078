"""Busy share per resource over a run, shared by `sim run`'s report and the serving figures: numbered
members of one family (pim.stack0 ... pim.stack4) reported as one entry, their mean."""

from __future__ import annotations

import re

from hw_models.clock import CLOCK_COUNTERS
from hw_models.power import CAP_ADDED, CAP_CLOCK, CAP_CLOCKED

# A numbered member of a family of resources (pim.stack3, pim.stack3.memory): the digits before the part.
_MEMBER = re.compile(r"^(.*\D)(\d+)(\.compute|\.memory)?$")


def utilization(busy_s: dict[str, float], wall_s: float, instances: int = 1) -> dict[str, float]:
    """Each resource's busy time over `wall_s` (the mean over `instances` of an instance's resource).
    Numbered members of one family (pim.stack0 ... pim.stack4) as one entry, pim.stack0-4: their mean.
    The power cap's added and lowered-clock seconds (CAP_ADDED, CAP_CLOCKED, booked beside the resources by a serving
    step) and the ops' split by what the SM clock paces (CLOCK_COUNTERS, beside them too: hw_models.clock) are no
    resource."""
    if not wall_s:
        return {}
    families: dict[tuple[str, str], dict[int, float]] = {}
    for name, b in busy_s.items():
        if name in (CAP_ADDED, CAP_CLOCKED, CAP_CLOCK, *CLOCK_COUNTERS):
            continue
        m = _MEMBER.match(name)
        head, num, part = (m.group(1), int(m.group(2)), m.group(3) or "") if m else (name, -1, "")
        members = families.setdefault((head, part), {})
        members[num] = members.get(num, 0.0) + b
    out = {}
    for (head, part), members in families.items():
        nums = sorted(members)
        name = head if nums == [-1] else f"{head}{nums[0]}" if len(nums) == 1 else f"{head}{nums[0]}-{nums[-1]}"
        out[name + part] = float(sum(members.values()) / (len(nums) * instances * wall_s))
    return dict(sorted(out.items()))
