"""Compiling a job's request into array form, once per job *shape*.

Jobs with the same task groups, label constraints, spreading and gang size have the same
shape: the same per-group request vectors, total, feasibility on the cluster and fast-path
eligibility. The core compiles each shape once and numbers it; the EASY scan uses the number
to skip jobs of a shape that already failed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusesched.core.cluster import BoolArray, ClusterArrays, IntArray
from fusesched.core.device_specs import (
    DeviceDemand,
    DeviceError,
    device_demand,
    is_device_kind,
    models_from_placement,
)
from fusesched.core.devices import DeviceLedger
from fusesched.core.node_count import domain_hosts, nodes_holding, plan_on_nodes
from fusesched.core.placement import GroupShape, group_mask, plan_groups, task_slots
from fusesched.core.placement_search import SearchBudgetExceeded, search_placement
from fusesched.core.topology import DomainCodes, TopologyMode, TopologyStatus, choose_domains
from fusesched.model.job import JobSpec, Placement
from fusesched.model.resources import CPU, GPU_MILLI, Resources
from fusesched.policies.placement import PlacementPolicy

#: Steps of exhaustive search allowed when deciding at submission that a job can never fit.
NEVER_FITS_SEARCH_BUDGET = 50_000

#: Shapes remembered by the identity of their request objects (see ``ShapeCompiler``).
BY_ID_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Shape:
    """A compiled job shape."""

    groups: list[GroupShape] | None  # None: asks for a resource no node has
    total: IntArray  # the whole request
    bound: IntArray  # what it needs at least to start (less than total with min_member)
    never_fits: str  # why no node of the empty cluster could hold it; "" if one could
    single_column: int  # see SchedulerCore.fluid_column; -1 if not a candidate
    single_amount: int
    single_total: int  # what the whole request holds of ``single_column``
    number: int  # unique for the compiler's lifetime
    cpus: float  # CPUs of the whole request (for queue-order keys)
    family: int  # shared by the one-group shapes that differ only in task count; -1 if not


class ShapeCompiler:
    """Compiles and caches job shapes against one cluster (clear the cache when it changes)."""

    def __init__(
        self,
        cluster: ClusterArrays,
        placement: PlacementPolicy,
        reject_unschedulable: bool,
        ledger: DeviceLedger | None = None,
    ) -> None:
        self.cluster = cluster
        self.ledger = ledger if ledger is not None else DeviceLedger()
        self.placement = placement
        self.reject_unschedulable = reject_unschedulable
        self._cache: dict[tuple[object, ...], Shape] = {}
        # shapes by the identity of (task groups, placement) and min_member: workloads share
        # those objects between jobs, and hashing them by value is not free (each entry
        # holds its objects, so an id is not reused while it is here; bounded in size)
        self._by_id: dict[tuple[int, int, int | None], tuple[object, object, Shape]] = {}
        self._count = 0
        self._families: dict[tuple[object, ...], int] = {}
        self._domains: dict[str, DomainCodes] = {}

    def clear(self) -> None:
        self._cache.clear()
        self._by_id.clear()
        self._families.clear()
        self._domains.clear()

    def domains(self, key: str) -> DomainCodes:
        """Every node row's domain under the label ``key`` (cached until the cluster changes)."""
        found = self._domains.get(key)
        if found is None:
            labels = [spec.labels for spec in self.cluster.specs]
            found = self._domains[key] = DomainCodes.from_labels(labels, key)
        return found

    def shape_of(self, spec: JobSpec) -> Shape:
        groups = spec.task_groups
        placement = spec.placement
        ident = (id(groups), id(placement), spec.min_member)
        known = self._by_id.get(ident)
        if known is not None and known[0] is groups and known[1] is placement:
            return known[2]
        key = (
            spec.task_groups,
            placement.cache_key() if placement.constrained else None,
            placement.max_tasks_per_node,
            bool(placement.preferred),
            spec.min_member,
            placement.topology,
            placement.nodes,
        )
        shape = self._cache.get(key)
        if shape is None:
            shape = self._cache[key] = self._compile(spec, self._family(spec, key))
        if len(self._by_id) >= BY_ID_LIMIT:
            self._by_id.clear()
        self._by_id[ident] = (groups, placement, shape)
        return shape

    def _family(self, spec: JobSpec, key: tuple[object, ...]) -> int:
        """The family of a one-group job without ``min_member``: the same shape but for the
        number of tasks. Such a job fits wherever one with more tasks of its family fits."""
        if len(spec.task_groups) != 1 or spec.min_member is not None:
            return -1
        group = spec.task_groups[0]
        own = None if group.placement is None else group.placement.cache_key()
        family_key = (group.resources, own, *key[1:])
        family = self._families.get(family_key)
        if family is None:
            self._count += 1  # numbered like shapes: unique for the compiler's lifetime
            family = self._families[family_key] = self._count
        return family

    def _compile(self, spec: JobSpec, family: int) -> Shape:
        cluster = self.cluster
        groups: list[GroupShape] | None = []
        invalid = ""
        models: tuple[str, ...] | None = None
        for group in spec.task_groups:
            resources: Resources = group.resources
            demand: DeviceDemand | None = None
            if any(is_device_kind(name) or name == GPU_MILLI for name in resources):
                if models is None:
                    models = models_from_placement(spec.placement)
                own = models
                if group.placement is not None:  # (a GPU type of its own)
                    own = models_from_placement(spec.placement.joined(group.placement))
                try:
                    demand = device_demand(resources, own)
                except DeviceError as exc:
                    invalid = invalid or f"task group {group.name!r}: {exc}"
                if demand is not None:  # devices count in the aggregate columns
                    resources = demand.aggregate() + Resources(
                        {k: v for k, v in resources.items() if not _counted(k)}
                    )
            vec = cluster.vector(resources)
            if vec is None or groups is None or invalid:
                groups = None
                continue
            cluster.note_request(vec)
            groups.append(
                GroupShape(
                    group.name, group.replicas, vec, group.resources, demand, group.placement
                )
            )
        total = np.zeros(len(cluster.columns), dtype=np.int64)
        bound = total
        if groups is not None:
            groups = self._most_constrained_first(spec, groups)
            for g in groups:
                total = total + g.per_task * g.replicas
            bound = total
            if spec.min_member is not None:  # lower bound of what min_member tasks need
                bound = np.min([g.per_task for g in groups], axis=0) * spec.min_member
        column, amount = self._single_column(spec, groups)
        single_total = amount * groups[0].replicas if column >= 0 and groups else 0
        self._count += 1
        cpu = cluster.columns.get(CPU)
        cpus = float(total[cpu]) / 1000.0 if cpu is not None else 0.0
        never_fits = invalid or self._never_fits(spec, groups)
        number = self._count
        return Shape(
            groups, total, bound, never_fits, column, amount, single_total, number, cpus, family
        )

    def _most_constrained_first(self, spec: JobSpec, groups: list[GroupShape]) -> list[GroupShape]:
        """Place groups that fewer nodes can hold first (then bigger tasks first), so a greedy
        gang placement does not fill the few special nodes with tasks that fit anywhere."""
        if len(groups) < 2:
            return groups
        cluster = self.cluster
        allowed = cluster.allowed(spec.placement)
        scale = np.maximum(cluster.capacity.max(axis=0), 1)

        def key(group: GroupShape) -> tuple[int, float]:
            mask = group_mask(cluster, group, allowed)
            hosts = int((task_slots(cluster.capacity, mask, group.per_task, None) > 0).sum())
            return hosts, -float((group.per_task / scale).sum())

        return sorted(groups, key=key)

    def _never_fits(self, spec: JobSpec, groups: list[GroupShape] | None) -> str:
        """Why no node of the cluster, empty, could ever hold the job ('' if one could)."""
        if groups is None:
            return "asks for a resource that no node offers"
        if not self.reject_unschedulable:
            return ""
        cluster = self.cluster
        placement = spec.placement
        allowed = cluster.allowed(placement)
        best = 0
        for group in groups:
            mask = group_mask(cluster, group, allowed)
            if group.placement is not None and not mask.any():
                return (
                    f"task group {group.name!r}: no node meets its node constraints "
                    f"({group.placement.describe()}){_with_job(placement)}"
                )
            counts = task_slots(
                cluster.capacity, mask, group.per_task, placement.max_tasks_per_node
            )
            if group.demand is not None:
                counts = np.minimum(counts, self._capacity_slots(group.demand))
            holds = min(int(counts.sum()), group.replicas)
            best += holds
            if holds < group.replicas and spec.min_member is None:
                return (
                    f"task group {group.name!r} needs {group.replicas} tasks of "
                    f"{group.resources.to_spec()} but the whole cluster holds at most {holds}"
                )
        if best < spec.gang_size:
            return f"gang of {spec.gang_size} tasks cannot fit even on an empty cluster"
        if placement.topology is not None and spec.min_member is None:
            rows = allowed.nonzero()[0]
            slots = np.array(
                [self._slots_on_empty(group, allowed, placement)[rows] for group in groups]
            )
            choice = choose_domains(
                placement.topology,
                self.domains(placement.topology.key),
                rows,
                slots,
                [g.replicas for g in groups],
                capacity=slots,
            )
            if choice.status is TopologyStatus.NEVER:
                return choice.reason
        if placement.nodes is not None:
            return self._never_on_nodes(groups, allowed, placement, placement.nodes)
        greedy = plan_groups(
            groups,
            cluster.capacity,
            allowed,
            max_per_node=placement.max_tasks_per_node,
            min_tasks=spec.gang_size,
            partial=spec.min_member is not None,
            policy=self.placement,
            cluster=cluster,
            preference=None,
        )
        if greedy is not None or spec.min_member is not None:
            return ""
        try:
            exact = search_placement(
                groups,
                cluster.capacity,
                allowed,
                placement.max_tasks_per_node,
                budget=NEVER_FITS_SEARCH_BUDGET,
                cluster=cluster,
            )
        except SearchBudgetExceeded:
            return ""  # too large to decide exactly: keep it queued rather than guess
        if exact is None:
            return "its task groups cannot all fit together even on an empty cluster"
        return ""

    def _never_on_nodes(
        self, groups: list[GroupShape], allowed: BoolArray, placement: Placement, count: int
    ) -> str:
        """Why a gang that must use exactly ``count`` nodes could never get them ('' if
        it could): too few nodes hold one of its tasks, or no ``count`` of them hold it all."""
        cluster = self.cluster
        holding = nodes_holding(groups, cluster.capacity, allowed, cluster)
        hosts = int(holding.sum())
        if hosts < count:
            return (
                f"needs {count} nodes (-N/placement nodes) but only {hosts} "
                f"{'node' if hosts == 1 else 'nodes'} could hold one of its tasks"
            )
        request = placement.topology
        if request is not None and request.mode is TopologyMode.REQUIRED:
            rows = allowed.nonzero()[0]
            _, per_domain = domain_hosts(self.domains(request.key), rows, holding[rows])
            most = int(per_domain.max()) if len(per_domain) else 0
            if most < count:
                return (
                    f"needs {count} nodes in one {request.key} domain (-N/placement nodes) "
                    f"but at most {most} of a domain could hold one of its tasks"
                )
        found = plan_on_nodes(
            groups,
            cluster.capacity,
            allowed,
            count=count,
            max_per_node=placement.max_tasks_per_node,
            policy=self.placement,
            cluster=cluster,
            preference=None,
        )
        return "" if found is not None else f"cannot fit on {count} nodes even on an empty cluster"

    def _slots_on_empty(
        self, group: GroupShape, allowed: BoolArray, placement: Placement
    ) -> IntArray:
        """Per node row, how many tasks of ``group`` it holds on the empty cluster."""
        counts = task_slots(
            self.cluster.capacity,
            group_mask(self.cluster, group, allowed),
            group.per_task,
            placement.max_tasks_per_node,
        )
        if group.demand is not None:
            counts = np.minimum(counts, self._capacity_slots(group.demand))
        return counts

    def _capacity_slots(self, demand: DeviceDemand) -> IntArray:
        """Per node row, how many tasks of ``demand`` its devices hold when all are free."""
        size = self.cluster.size
        if not size:
            return np.zeros(0, np.int64)
        if self.ledger.size < size:  # rows added without devices
            self.ledger.add_node(size - 1, ())
        return self.ledger.capacity_slots(np.arange(size, dtype=np.int64), demand)

    @staticmethod
    def _single_column(spec: JobSpec, groups: list[GroupShape] | None) -> tuple[int, int]:
        placement = spec.placement
        if (
            groups is None
            or len(groups) != 1
            or len(groups[0].cols) != 1
            or groups[0].demand is not None  # the sum rule does not see devices
            or groups[0].placement is not None
            or spec.min_member is not None
            or placement.constrained
            or placement.preferred
            or placement.max_tasks_per_node is not None
            or placement.topology is not None
            or placement.nodes is not None
        ):
            return -1, 0
        col = int(groups[0].cols[0])
        return col, int(groups[0].per_task[col])


def _with_job(placement: Placement) -> str:
    """`` together with the job's (…)`` when the job has label filters too."""
    return f" together with the job's ({placement.describe()})" if placement.constrained else ""


def _counted(name: str) -> bool:
    """Whether a resource is one of the device or share columns a demand's aggregate gives."""
    return is_device_kind(name) or name == GPU_MILLI
