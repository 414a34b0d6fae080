"""Where a job asks to run (a :class:`~fusesched.submit.request.JobRequest`'s ``placement``):
label filters, preferred terms that score nodes, a cap on tasks per node, an exact node count
(``nodes``: Slurm's ``-N``), a topology domain to keep its gang in, and whole nodes to
itself. A task group's own label filters are :mod:`fusesched.submit.label_terms`'s.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from fusesched.core.topology import TopologyMode as CoreTopologyMode
from fusesched.core.topology import TopologyRequest as CoreTopologyRequest
from fusesched.model.job import Placement, PreferredTerm
from fusesched.submit.label_terms import LabelRequirementRequest
from fusesched.submit.strict_model import StrictModel


class TopologyMode(StrEnum):
    REQUIRED = "required"  # all tasks within one domain of the label
    PREFERRED = "preferred"  # as few domains as possible


class PreferredTermRequest(LabelRequirementRequest):
    """A soft term: matching nodes score ``weight`` more (negative: less), -100..100."""

    weight: Annotated[int, Field(ge=-100, le=100)]

    @field_validator("weight")
    @classmethod
    def _nonzero(cls, weight: int) -> int:
        if weight == 0:
            raise ValueError("a preferred term needs a non-zero weight")
        return weight


class TopologyRequest(StrictModel):
    """Keep a gang's tasks inside one domain of a node label (NVLink domain, switch, rack)."""

    key: Annotated[str, Field(min_length=1)]
    mode: TopologyMode = TopologyMode.PREFERRED

    def to_model(self) -> CoreTopologyRequest:
        return CoreTopologyRequest(self.key, CoreTopologyMode(self.mode.value))


class PlacementRequest(StrictModel):
    node_selector: dict[str, str] = Field(default_factory=dict)
    required: list[LabelRequirementRequest] = Field(default_factory=list)
    anti_affinity: list[LabelRequirementRequest] = Field(default_factory=list)
    preferred: list[PreferredTermRequest] = Field(default_factory=list)
    max_tasks_per_node: Annotated[int, Field(ge=1)] | None = None
    topology: TopologyRequest | None = None
    exclusive: bool = False  # whole nodes to itself (sbatch --exclusive)
    # exactly this many distinct nodes, each with a task (sbatch -N; checked against the
    # job's task count by JobRequest); dumped only when given, so a request without it reads
    # as before
    nodes: Annotated[int, Field(ge=1)] | None = Field(default=None, exclude_if=lambda v: v is None)

    def to_model(self) -> Placement:
        return Placement(
            node_selector=dict(self.node_selector),
            required=tuple(r.to_model() for r in self.required),
            anti_affinity=tuple(r.to_model() for r in self.anti_affinity),
            preferred=tuple(PreferredTerm(p.to_model(), p.weight) for p in self.preferred),
            max_tasks_per_node=self.max_tasks_per_node,
            topology=None if self.topology is None else self.topology.to_model(),
            exclusive=self.exclusive,
            nodes=self.nodes,
        )
