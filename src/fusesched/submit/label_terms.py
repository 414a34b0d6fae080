"""Node label filters as a request gives them: one condition on a label
(:class:`LabelRequirementRequest`) and a task group's own filters (:class:`GroupPlacementRequest`:
a node selector, required and anti-affinity terms), which the group's nodes must meet besides
the job's ``placement`` (a heterogeneous job's component with its own ``-C``/``-w``/``-x`` or
GPU type, a Kubeflow replica type or Volcano task with its own ``nodeSelector``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Final

from pydantic import Field, model_validator

from fusesched.model.job import LabelOp, LabelRequirement, Placement
from fusesched.submit.strict_model import StrictModel

#: Placement fields a job has and a task group does not.
JOB_WIDE: Final = ("preferred", "max_tasks_per_node", "nodes", "topology", "exclusive")


class LabelRequirementRequest(StrictModel):
    """A condition on a node label: ``In``/``NotIn`` need values, ``Exists``/``DoesNotExist``
    take none."""

    key: Annotated[str, Field(min_length=1)]
    op: LabelOp
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_op(self) -> LabelRequirementRequest:
        if self.op in (LabelOp.IN, LabelOp.NOT_IN) and not self.values:
            raise ValueError(f"label {self.key!r}: {self.op} needs at least one value")
        if self.op in (LabelOp.EXISTS, LabelOp.DOES_NOT_EXIST) and self.values:
            raise ValueError(f"label {self.key!r}: {self.op} takes no values")
        return self

    def to_model(self) -> LabelRequirement:
        return LabelRequirement(self.key, self.op, tuple(self.values))


class GroupPlacementRequest(StrictModel):
    """A task group's own label filters (the job's other placement fields — preferred terms,
    ``max_tasks_per_node``, topology, exclusive — are the whole job's: unknown here)."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    required: list[LabelRequirementRequest] = Field(default_factory=list)
    anti_affinity: list[LabelRequirementRequest] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _labels_only(cls, data: object) -> object:
        if isinstance(data, Mapping):
            wide = [key for key in JOB_WIDE if key in data]
            if wide:
                raise ValueError(
                    f"{wide[0]} is the whole job's (its placement), not a task group's: a "
                    "group's placement holds node_selector, required and anti_affinity"
                )
        return data

    def to_model(self) -> Placement | None:
        """The core's form; None when it filters nothing."""
        if not (self.node_selector or self.required or self.anti_affinity):
            return None
        return Placement(
            node_selector=dict(self.node_selector),
            required=tuple(r.to_model() for r in self.required),
            anti_affinity=tuple(r.to_model() for r in self.anti_affinity),
        )


def split_label_filters(
    placements: Sequence[Mapping[str, object]],
) -> tuple[dict[str, object], list[dict[str, object]]]:
    """Several task groups' label filters, as placements in request form (``node_selector``
    and ``required``; other fields are not read), split in two: what every group gives alike,
    the job's; and per group the rest, its own (empty when it has none). A node a group's
    tasks may use meets both, as it met the group's filters."""
    selectors = [_selector(p) for p in placements]
    terms = [_terms(p) for p in placements]
    common = {k: v for k, v in selectors[0].items() if all(s.get(k) == v for s in selectors)}
    shared_terms = [key for key in terms[0] if all(key in t for t in terms)]
    shared: dict[str, object] = {}
    if common:
        shared["node_selector"] = common
    if shared_terms:
        shared["required"] = [terms[0][key] for key in shared_terms]
    owns: list[dict[str, object]] = []
    for selector, own_terms in zip(selectors, terms, strict=True):
        own: dict[str, object] = {}
        rest = {k: v for k, v in selector.items() if k not in common}
        if rest:
            own["node_selector"] = rest
        required = [term for key, term in own_terms.items() if key not in shared_terms]
        if required:
            own["required"] = required
        owns.append(own)
    return shared, owns


def _selector(placement: Mapping[str, object]) -> Mapping[str, object]:
    given = placement.get("node_selector")
    return given if isinstance(given, Mapping) else {}


def _terms(placement: Mapping[str, object]) -> dict[str, object]:
    """A placement's required terms, each once, by their JSON (equal terms, equal keys)."""
    given = placement.get("required")
    if not isinstance(given, list):
        return {}
    return {json.dumps(term, sort_keys=True, default=str): term for term in given}
