"""A heterogeneous job's step as ``srun --het-group`` plans it (agent/step.py): each
component's hostfile read from beside the job's (:func:`component_hosts`), the step's tasks
placed over them, and the variables its tasks get (:class:`HetStep`); the placing and the
variables themselves are worked out without I/O in :mod:`fusesched.agent.step_het`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fusesched.agent.step_het import (
    NODE_SHARE_VARS,
    HetShares,
    het_hostfile_name,
    het_node_env,
    het_rank_env,
    het_step_env,
    place_components,
)
from fusesched.agent.step_plan import StepError, StepOptions, StepTask, read_hostfile


@dataclass(frozen=True, slots=True)
class HetStep:
    """A heterogeneous job's step: its tasks (ranked), warnings, share of each component,
    the allocation its tasks see as the job's, and what its components hold on each node
    (None: the controller does not say)."""

    tasks: list[StepTask]
    warnings: list[str]
    shares: HetShares
    allocation: dict[str, str]
    nodes: dict[str, dict[str, str]] | None

    def envs(
        self, exported: Mapping[str, str], environ: Mapping[str, str], mpi: bool
    ) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The variables each task gets (the script's ``exported`` ones with the step's
        allocation) and each task's own, by rank: its component's CPUs per task and, unless
        the step runs through mpirun (one task: its ranks keep the script's), what the
        step's components hold on its node, in place of the script's."""
        common = dict(exported) | self.allocation
        own = het_rank_env(self.shares, environ)
        if mpi or self.nodes is None:
            return common, own
        common = {name: value for name, value in common.items() if name not in NODE_SHARE_VARS}
        pairs = zip(own, self.tasks, strict=True)
        return common, [mine | self.nodes.get(task.node, {}) for mine, task in pairs]


def plan_het_step(
    options: StepOptions, environ: Mapping[str, str], hostfile: str, groups: Sequence[int]
) -> HetStep:
    """The step on components ``groups`` of the job whose hostfile is ``hostfile``
    (:class:`StepError` for a component's hostfile missing, or a placement that cannot be)."""
    own = {group: component_hosts(hostfile, group) for group in groups}
    tasks, warnings, shares = place_components(options, environ, own)
    return HetStep(tasks, warnings, shares, het_step_env(own, environ), het_node_env(own, environ))


def component_hosts(hostfile: str, group: int) -> list[tuple[str, int]]:
    """Component ``group``'s hostfile, beside the job's (controller/hetjob_env.py)."""
    path = Path(hostfile).parent / het_hostfile_name(group)
    try:
        return read_hostfile(path.read_text(encoding="utf-8"))
    except OSError:
        raise StepError(
            f"no hostfile of component {group} at {path} (is the controller older than "
            "heterogeneous jobs?)"
        ) from None
