"""Named combinations of core policies: what ``--policy default`` means.

A preset fixes the queue order, the backfilling and the runtime prediction together, so a
recommendation can be run by one name. ``default`` is the combination the project recommends
for HPC traces; how it was chosen (on other traces than the ones it is judged on) is in
docs/HPC_DEFAULT.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fusesched.policies.registry import CoreConfig

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    description: str
    queue_order: str
    backfill: str
    runtime_prediction: str

    def config(self, placement: str = "first-fit") -> CoreConfig:
        return CoreConfig(
            queue_order=self.queue_order,
            backfill=self.backfill,
            placement=placement,
            runtime_prediction=self.runtime_prediction,
        )


PRESETS: Mapping[str, Preset] = {
    "default": Preset(
        "recommended for HPC traces: UNICEP (wait over log2(size) x predicted run time) with "
        "EASY backfilling on run times predicted from each user's finished jobs "
        "(user-last2-request)",
        queue_order="unicep-textbook",
        backfill="easy",
        runtime_prediction="user-last2-request",
    ),
}

# every preset names registered policies (checked once, at import)
for _preset in PRESETS.values():
    _preset.config()
