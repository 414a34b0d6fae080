"""Quota admission with borrowing and lending in cohorts (the Kueue ClusterQueue model).

The :class:`QuotaLedger` holds, per queue and per (flavour, resource) column, the quota limits
of :mod:`fusesched.model.tenancy` and the usage of admitted jobs, as int64 matrices
(queues × columns). For a queue ``q`` in a cohort ``C`` and one column:

* ``guaranteed_q = nominal_q − lendable_q`` (``lendable_q`` is the lending limit, or nominal);
* the cohort lends from a pool of ``Σ_C lendable``; a member draws on it by whatever it uses
  above its guaranteed part: ``drawn_C = Σ_C max(0, usage − guaranteed)``;
* ``available_q = min(nominal_q + borrowing_limit_q − usage_q,
  max(0, guaranteed_q − usage_q) + Σ_C lendable − drawn_C)``.

A queue outside any cohort is a cohort of one (``available = nominal − usage``). A job fits when
its demand is at most ``available`` in every column it needs. The amount above nominal is
*borrowed* and may be reclaimed: :meth:`QuotaLedger.reclaim_candidates` picks running jobs of
borrowing queues whose removal gives a lender back what it needs within its nominal quota
(:mod:`fusesched.core.quota_reclaim`). What the ledger answers (:class:`FlavorAssignment`,
:class:`Admission`) is in :mod:`fusesched.core.quota_verdicts`.

Pure: no clock, no I/O; the caller passes ``now`` where time matters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from fusesched.core import quota_reclaim
from fusesched.core.quota_verdicts import (
    USER_GPUS_LIMIT,
    USER_JOBS_LIMIT,
    Admission,
    Column,
    FlavorAssignment,
    QuotaError,
)
from fusesched.model.job import NO_PLACEMENT, Placement
from fusesched.model.resources import GPU, Resources, format_quantity
from fusesched.model.tenancy import Flavor, QoSTier, TenancyConfig

IntArray = npt.NDArray[np.int64]

#: The cap of a queue that may borrow without limit (far above any quota, still int64-safe).
UNLIMITED: Final = 2**62


@dataclass(frozen=True, slots=True)
class _Held:
    queue: int
    cols: IntArray
    amounts: IntArray
    assignment: FlavorAssignment
    user: str | None
    qos: str | None
    gpus: int


def _fmt(resource: str, amount: int) -> str:
    return format_quantity(resource, int(amount)) if amount < UNLIMITED // 2 else "unlimited"


class QuotaLedger:
    """Quota limits and usage of every queue; admission, release, reclaim, invariants."""

    def __init__(self, config: TenancyConfig) -> None:
        self.config = config
        queues = config.queues
        self._queue_names = [q.name for q in queues]
        self._qidx = {name: i for i, name in enumerate(self._queue_names)}
        cols = sorted({(qq.flavor, r) for q in queues for qq in q.quotas for r in qq.resources})
        self._cols: list[Column] = cols
        self._cidx = {c: i for i, c in enumerate(cols)}
        shape = (len(queues), len(cols))
        self._nominal = np.zeros(shape, np.int64)
        self._lendable = np.zeros(shape, np.int64)
        self._cap = np.zeros(shape, np.int64)
        self._defined = np.zeros(shape, bool)
        for qi, q in enumerate(queues):
            for qq in q.quotas:
                for res, rq in qq.resources.items():
                    ci = self._cidx[(qq.flavor, res)]
                    self._defined[qi, ci] = True
                    self._nominal[qi, ci] = rq.nominal
                    if q.cohort is None:
                        self._lendable[qi, ci] = rq.nominal
                        self._cap[qi, ci] = rq.nominal
                    else:
                        self._lendable[qi, ci] = rq.lendable
                        limit = UNLIMITED if rq.borrowing_limit is None else rq.borrowing_limit
                        self._cap[qi, ci] = min(UNLIMITED, rq.nominal + limit)
        self._guaranteed = self._nominal - self._lendable
        cohort_ids: dict[str, int] = {}
        cohort_of: list[int] = []
        for q in queues:  # a queue outside a cohort is a cohort of its own
            key = f"cohort:{q.cohort}" if q.cohort is not None else f"queue:{q.name}"
            cohort_of.append(cohort_ids.setdefault(key, len(cohort_ids)))
        self._cohort_of = np.asarray(cohort_of, np.int64)
        self._members = [
            np.flatnonzero(self._cohort_of == c).astype(np.int64) for c in range(len(cohort_ids))
        ]
        self._flavors: dict[str, Flavor] = {f.name: f for f in config.flavors}
        # per queue: resource groups (covered resources, flavour names in preference order)
        self._groups: list[list[tuple[frozenset[str], list[str]]]] = []
        for q in queues:
            groups: dict[frozenset[str], list[str]] = {}
            for qq in q.quotas:
                groups.setdefault(self._flavors[qq.flavor].resources, []).append(qq.flavor)
            self._groups.append(list(groups.items()))
        self._usage = np.zeros(shape, np.int64)
        self.version = 0  # grows with every admit and release: a verdict holds until it does
        self._jobs: dict[str, _Held] = {}
        self._user_jobs: dict[tuple[str, str], int] = {}
        self._user_gpus: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------------ reading

    @property
    def columns(self) -> tuple[Column, ...]:
        return tuple(self._cols)

    @property
    def jobs(self) -> Mapping[str, FlavorAssignment]:
        """Admitted jobs and what each holds."""
        return {job: held.assignment for job, held in self._jobs.items()}

    def _q(self, queue: str) -> int:
        try:
            return self._qidx[queue]
        except KeyError:
            raise QuotaError(f"unknown queue {queue!r}") from None

    def _row(self, matrix: IntArray, queue: str) -> dict[Column, int]:
        qi = self._q(queue)
        return {c: int(matrix[qi, i]) for i, c in enumerate(self._cols) if self._defined[qi, i]}

    def usage(self, queue: str) -> dict[Column, int]:
        return self._row(self._usage, queue)

    def nominal(self, queue: str) -> dict[Column, int]:
        return self._row(self._nominal, queue)

    def borrowed(self, queue: str) -> dict[Column, int]:
        """What the queue currently uses above its nominal quota."""
        over = np.maximum(self._usage - self._nominal, 0)
        return {c: v for c, v in self._row(over, queue).items() if v}

    def available(self, queue: str) -> dict[Column, int]:
        """How much more the queue could take now, per column (borrowing included)."""
        qi = self._q(queue)
        avail = self._available(qi, self._usage)
        return {c: int(avail[i]) for i, c in enumerate(self._cols) if self._defined[qi, i]}

    def _available(self, qi: int, usage: IntArray) -> IntArray:
        members = self._members[int(self._cohort_of[qi])]
        drawn = np.maximum(usage[members] - self._guaranteed[members], 0).sum(axis=0)
        pool = self._lendable[members].sum(axis=0) - drawn
        own = np.maximum(self._guaranteed[qi] - usage[qi], 0)
        avail = np.minimum(self._cap[qi] - usage[qi], own + pool)
        return np.where(self._defined[qi], np.maximum(avail, 0), 0)

    # ------------------------------------------------------------------ admission

    def flavor_of(
        self,
        queue: str,
        demand: Resources,
        placement: Placement = NO_PLACEMENT,
        node_labels: Iterable[Mapping[str, str]] | None = None,
    ) -> FlavorAssignment | None:
        """The preferred assignment ignoring usage: per resource group, the first flavour in
        the queue's order that the job's constraints (and, when given, some candidate node)
        allow. ``None`` when some needed group has no such flavour."""
        qi = self._q(queue)
        labels = None if node_labels is None else list(node_labels)
        amounts: dict[Column, int] = {}
        covered: set[str] = set()
        for resources, names in self._groups[qi]:
            covered |= resources
            need = {r: demand.get(r) for r in sorted(resources) if demand.get(r)}
            if not need:
                continue
            usable = [n for n in names if not self._excluded(n, placement, labels)]
            if not usable:
                return None
            amounts.update({(usable[0], r): a for r, a in need.items()})
        unmanaged = Resources({r: a for r, a in demand.items() if r not in covered})
        return FlavorAssignment(queue, amounts, unmanaged)

    def _excluded(
        self, name: str, placement: Placement, labels: list[Mapping[str, str]] | None
    ) -> str:
        flavor = self._flavors[name]
        if not flavor.compatible_with(placement):
            return "excluded by the job's node constraints"
        if labels is not None and not any(
            flavor.matches_node(node) and placement.allows(node) for node in labels
        ):
            return "no candidate node has this flavor"
        return ""

    def check(
        self,
        queue: str,
        demand: Resources | FlavorAssignment,
        *,
        placement: Placement = NO_PLACEMENT,
        node_labels: Iterable[Mapping[str, str]] | None = None,
        may_borrow: bool = True,
        user: str | None = None,
        qos: str | QoSTier | None = None,
    ) -> Admission:
        """Would ``demand`` fit in ``queue`` now?

        A plain :class:`Resources` demand is assigned flavours first: per resource group, the
        first flavour in the queue's order that the job may use and where the demand fits
        (borrowing allowed unless ``may_borrow`` is false — pass the QoS tier's
        ``preemptible``: only reclaimable work should borrow). ``user`` and ``qos`` add the
        tier's per-user limits (jobs and GPUs).
        """
        qi = self._q(queue)
        avail = self._available(qi, self._usage)
        if not may_borrow:
            avail = np.minimum(avail, np.maximum(self._nominal[qi] - self._usage[qi], 0))
        if isinstance(demand, FlavorAssignment):
            if demand.queue != queue:
                raise QuotaError(f"assignment is for queue {demand.queue!r}, not {queue!r}")
            result = self._check_assignment(demand, avail)
        else:
            labels = None if node_labels is None else list(node_labels)
            result = self._assign(qi, queue, demand, placement, labels, avail)
        if result.ok and qos is not None and user:
            kind, limit = self._user_limit(user, qos, result.assignment)
            if limit:
                return Admission(False, queue, result.assignment, {}, limit, kind)
        return result

    def _borrowed(self, qi: int, amounts: Mapping[Column, int]) -> dict[Column, int]:
        out: dict[Column, int] = {}
        for col, amount in amounts.items():
            ci = self._cidx[col]
            used, nominal = int(self._usage[qi, ci]), int(self._nominal[qi, ci])
            extra = max(0, used + amount - nominal) - max(0, used - nominal)
            if extra:
                out[col] = extra
        return out

    def _check_assignment(self, assignment: FlavorAssignment, avail: IntArray) -> Admission:
        qi = self._q(assignment.queue)
        short: list[str] = []
        for (flavor, res), amount in assignment.amounts.items():
            ci = self._cidx.get((flavor, res))
            if ci is None or not self._defined[qi, ci]:
                return Admission(
                    False, assignment.queue, None, {}, f"no quota for {res} in flavor {flavor!r}"
                )
            if amount > avail[ci]:
                short.append(
                    f"{flavor}/{res} needs {_fmt(res, amount)}, {_fmt(res, int(avail[ci]))} free"
                )
        if short:
            return Admission(False, assignment.queue, assignment, {}, "; ".join(short))
        return Admission(True, assignment.queue, assignment, self._borrowed(qi, assignment.amounts))

    def _assign(
        self,
        qi: int,
        queue: str,
        demand: Resources,
        placement: Placement,
        labels: list[Mapping[str, str]] | None,
        avail: IntArray,
    ) -> Admission:
        amounts: dict[Column, int] = {}
        target: dict[Column, int] = {}  # first usable flavour per group, for reclaim
        failures: list[str] = []
        covered: set[str] = set()
        complete = True  # every needed group has a flavour the job may use
        for resources, names in self._groups[qi]:
            covered |= resources
            need = {r: demand.get(r) for r in sorted(resources) if demand.get(r)}
            if not need:
                continue
            tried: list[str] = []
            chosen: str | None = None
            first: str | None = None
            for name in names:
                why = self._excluded(name, placement, labels)
                if why:
                    tried.append(f"{name}: {why}")
                    continue
                first = first or name
                short = [
                    f"{r} needs {_fmt(r, a)}, {_fmt(r, int(avail[self._cidx[(name, r)]]))} free"
                    for r, a in need.items()
                    if a > avail[self._cidx[(name, r)]]
                ]
                if short:
                    tried.append(f"{name}: {', '.join(short)}")
                    continue
                chosen = name
                break
            pick = chosen or first
            if pick is None:
                complete = False
            else:
                target.update({(pick, r): a for r, a in need.items()})
            if chosen is None:
                failures.append("; ".join(tried) or "no flavor")
            else:
                amounts.update({(chosen, r): a for r, a in need.items()})
        unmanaged = {r: a for r, a in demand.items() if r not in covered}
        if unmanaged and self.config.strict_resources:
            listed = ", ".join(sorted(unmanaged))
            return Admission(False, queue, None, {}, f"queue {queue!r} has no quota for {listed}")
        if failures:
            assignment = FlavorAssignment(queue, target, Resources(unmanaged)) if complete else None
            return Admission(False, queue, assignment, {}, " | ".join(failures))
        assignment = FlavorAssignment(queue, amounts, Resources(unmanaged))
        return Admission(True, queue, assignment, self._borrowed(qi, amounts))

    def _user_limit(
        self, user: str, qos: str | QoSTier, assignment: FlavorAssignment | None
    ) -> tuple[str, str]:
        """The per-user limit of the tier that ``assignment`` would pass, as (Slurm's name
        for it, why), or ``("", "")``."""
        tier = qos if isinstance(qos, QoSTier) else self.config.tier(qos)
        key = (user, tier.name)
        jobs = self._user_jobs.get(key, 0)
        if tier.max_jobs_per_user is not None and jobs + 1 > tier.max_jobs_per_user:
            limit = tier.max_jobs_per_user
            why = f"user {user!r} has {jobs} {tier.name} jobs running (limit {limit})"
            return USER_JOBS_LIMIT, why
        gpus = _gpus(assignment)
        held = self._user_gpus.get(key, 0)
        if tier.max_gpus_per_user is not None and held + gpus > tier.max_gpus_per_user:
            return USER_GPUS_LIMIT, (
                f"user {user!r} holds {held} GPUs in {tier.name}; {gpus} more exceed the limit "
                f"of {tier.max_gpus_per_user}"
            )
        return "", ""

    def admit(
        self,
        job_id: str,
        assignment: FlavorAssignment,
        *,
        user: str | None = None,
        qos: str | None = None,
        check: bool = True,
    ) -> None:
        """Charge ``assignment`` to its queue for ``job_id``. With ``check`` (the default) an
        assignment that does not fit raises :class:`QuotaError` and nothing changes."""
        if job_id in self._jobs:
            raise QuotaError(f"job {job_id} is already admitted")
        qi = self._q(assignment.queue)
        if check:
            verdict = self.check(assignment.queue, assignment)
            if not verdict.ok:
                raise QuotaError(
                    f"job {job_id} does not fit queue {assignment.queue!r}: {verdict.reason}"
                )
        cols = np.fromiter((self._cidx[c] for c in assignment.amounts), np.int64)
        amounts = np.fromiter(assignment.amounts.values(), np.int64)
        gpus = _gpus(assignment)
        self._usage[qi, cols] += amounts
        self.version += 1
        self._jobs[job_id] = _Held(qi, cols, amounts, assignment, user, qos, gpus)
        if user and qos:
            key = (user, qos)
            self._user_jobs[key] = self._user_jobs.get(key, 0) + 1
            self._user_gpus[key] = self._user_gpus.get(key, 0) + gpus

    def release(self, job_id: str) -> bool:
        """Give back what ``job_id`` holds; ``False`` when it holds nothing (idempotent)."""
        held = self._jobs.pop(job_id, None)
        if held is None:
            return False
        self._usage[held.queue, held.cols] -= held.amounts
        self.version += 1
        if held.user and held.qos:
            key = (held.user, held.qos)
            self._user_jobs[key] -= 1
            self._user_gpus[key] -= held.gpus
        return True

    # ------------------------------------------------------------------ reclaim

    # reclaim (in :mod:`fusesched.core.quota_reclaim`; methods of the ledger all the same)
    within_nominal = quota_reclaim.within_nominal
    reclaim_candidates = quota_reclaim.reclaim_candidates

    # ------------------------------------------------------------------ invariants

    def violations(self) -> list[str]:
        """Every broken invariant, in words (empty when the ledger is consistent)."""
        out: list[str] = []
        expected = np.zeros_like(self._usage)
        for held in self._jobs.values():
            expected[held.queue, held.cols] += held.amounts
        if not np.array_equal(expected, self._usage):
            out.append("usage differs from the sum of admitted jobs")
        if np.any(self._usage < 0):
            out.append("negative usage")
        if np.any(self._usage[~self._defined] != 0):
            out.append("usage in a column the queue has no quota for")
        for qi, ci in zip(*np.nonzero(self._usage > self._cap), strict=True):
            col = self._cols[ci]
            out.append(
                f"queue {self._queue_names[qi]!r} uses {self._usage[qi, ci]} of {col} above "
                f"nominal + borrowing limit {self._cap[qi, ci]}"
            )
        for members in self._members:
            drawn = np.maximum(self._usage[members] - self._guaranteed[members], 0).sum(axis=0)
            pool = self._lendable[members].sum(axis=0)
            for ci in np.flatnonzero(drawn > pool):
                names = ", ".join(self._queue_names[m] for m in members)
                out.append(f"cohort of {names} draws {drawn[ci]} of {self._cols[ci]} > {pool[ci]}")
        return out

    def check_invariants(self) -> None:
        problems = self.violations()
        if problems:
            raise QuotaError("quota invariants broken: " + "; ".join(problems))


def _gpus(assignment: FlavorAssignment | None) -> int:
    if assignment is None:
        return 0
    return sum(
        a for (_, r), a in assignment.amounts.items() if r == GPU
    ) + assignment.unmanaged.get(GPU)
