"""Tenancy inside the scheduling core: quota admission with borrowing, fair share (which the
multifactor priority reads: :mod:`fusesched.core.multifactor`) and preemption (quota reclaim
and QoS). Pure: the core calls it with the time; see docs/TENANCY.md ("Wiring into the
scheduling core").

The core asks, per job it considers: :meth:`TenantGate.admission` (does its queue's quota
allow it now?), then on start :meth:`bind` and on exit :meth:`release`. When a job is blocked
by quota it may reclaim lent capacity; when it is blocked by room and its QoS tier may
preempt, jobs of lower tiers are stopped (:mod:`fusesched.core.victim_choice` picks whom; the
gate records the preemptions under way). Preempted jobs are requeued by the core.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from fusesched.core.borrow_backoff import BorrowBackoff
from fusesched.core.quota import QuotaLedger
from fusesched.core.quota_verdicts import Admission, FlavorAssignment
from fusesched.core.records import JobRecord
from fusesched.model.job import JobSpec, Placement
from fusesched.model.resources import CPU, GPU, GPU_MILLI, Resources
from fusesched.model.tenancy import QoSTier
from fusesched.policies.fairshare import (
    FairShareResult,
    UsageTracker,
    billing_units,
    fairshare_factors,
)
from fusesched.policies.priority import MultifactorPriority
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.policies.victims import VICTIM_ORDERS

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

#: Fair-share factor of an account the configuration does not know (neither favoured nor not).
NEUTRAL_FAIRSHARE = 0.5


def billing_rate(spec: JobSpec, gpu_weight: float) -> float:
    """Usage units per second a running job is charged (:func:`holding_rate` of its total)."""
    return holding_rate(spec.total, gpu_weight)


def holding_rate(total: Resources, gpu_weight: float) -> float:
    """Usage units per second holding ``total`` is charged: CPU cores + ``gpu_weight`` ×
    GPUs (GPU shares count their fraction). The same rate drives fair share and accounting."""
    gpus = total.get(GPU) + total.get(GPU_MILLI) / 1000.0
    return billing_units(total.get(CPU) / 1000.0, gpus, gpu_weight)


def quota_placement(spec: JobSpec) -> Placement:
    """The placement a flavour must allow for ``spec``: the job's with every task group's own
    label filters joined (a flavour's labels join the whole job's placement, so each group
    must be able to run on its nodes)."""
    placement = spec.placement
    for group in spec.task_groups:
        if group.placement is not None:
            placement = placement.joined(group.placement)
    return placement


class TenantGate:
    """The core's tenancy state: the quota ledger, decayed usage and pending preemptions."""

    def __init__(self, policy: TenancyPolicy) -> None:
        self.policy = policy
        self.config = policy.config
        self.ledger = QuotaLedger(policy.config)
        self.tracker = UsageTracker(policy.half_life_s)
        self.priority = MultifactorPriority(
            policy.weights, qos=policy.config.qos, max_age_s=policy.max_age_s
        )
        self.victim_order = VICTIM_ORDERS[policy.victim_order]
        self._queues = {q.name: q for q in policy.config.queues}
        self._flavour_labels = {f.name: dict(f.node_labels) for f in policy.config.flavors}
        self._dedicated = {
            f.name: next(iter(f.node_labels.items())) for f in policy.config.flavors if f.dedicated
        }
        self._charged: dict[str, float] = {}  # running job -> charged up to this time
        self._factors: FairShareResult | None = None
        self._charged_at = -math.inf  # running jobs were last charged then
        # preemptor job -> victims still running; and when the set emptied (cycle number)
        self._pending: dict[str, set[str]] = {}
        self._drained: dict[str, int] = {}
        self._queue_of: dict[str, str] = {}  # preemptor -> its queue
        # preemptor -> the tiers it preempted for priority: their jobs wait until it starts,
        # so that what its victims free goes to it (and not back to a victim)
        self._yield_tiers: dict[str, frozenset[str]] = {}
        self._lifted = False
        self._rates: dict[str, float] = {}  # running job -> billing units per second
        self._tier_running: dict[str, int] = {}  # running jobs per QoS tier
        self._lenders: frozenset[str] | None = None  # cached until quota usage changes
        self.preempted = 0  # victims asked to stop so far
        # waiting job -> (its spec, the spec's total, its placement for flavours: see
        # quota_placement): quota is checked every cycle
        self._totals: dict[str, tuple[JobSpec, Resources, Placement]] = {}
        # verdicts of plain jobs (no label constraints) for the ledger's current version
        self._verdicts: dict[tuple[object, ...], Admission] = {}
        self._verdicts_at = -1
        # quota given back since the last cycle: cohorts (a queue alone is its own) and users
        self._freed_groups: set[str] = set()
        self._freed_users: set[str] = set()
        # job preempted while its queue borrowed -> (times so, may borrow again from then)
        self._backoff = BorrowBackoff(policy.borrow_backoff_s)
        self._now = -math.inf  # the current cycle's time

    # ------------------------------------------------------------------ configuration

    def tier(self, spec: JobSpec) -> QoSTier:
        tiers = self.config.qos
        return tiers.get(str(spec.qos)) or tiers[self.config.default_qos]

    def account(self, spec: JobSpec) -> tuple[str, ...]:
        return self.account_of(spec.tenant, spec.queue, spec.user)

    def account_of(self, tenant: str, queue: str, user: str) -> tuple[str, ...]:
        """The fair-share account of a job of ``tenant``, ``queue`` and ``user``."""
        if queue in self._queues:
            return self.config.account_path(queue, user or None)
        return ("", tenant, queue, user)  # outside the configured tree

    def refuse(self, spec: JobSpec) -> str:
        """Why a job cannot be accepted at all (its queue is unknown), or ``""``."""
        if self._queues and spec.queue not in self._queues:
            known = ", ".join(sorted(self._queues))
            return f"unknown queue {spec.queue!r}; queues: {known}"
        if str(spec.qos) not in self.config.qos:
            return f"unknown qos {spec.qos!s}; tiers: {', '.join(self.config.qos)}"
        return ""

    # ------------------------------------------------------------------ quota

    def admission(self, rec: JobRecord) -> Admission | None:
        """The quota verdict for starting ``rec`` now; ``None`` when its queue has no quota."""
        spec = rec.spec
        why = self._yielding(spec)
        if why:  # (Slurm's word for a job that waits for one ahead of it: Priority)
            return Admission(False, spec.queue, None, {}, why, "Priority")
        if spec.queue not in self._queues:
            return None
        tier = self.tier(spec)
        may_borrow = tier.preemptible and not self._reclaiming(spec.queue)
        if may_borrow and self._backoff and self._backoff.active(spec.id, self._now):
            # backing off: it may borrow only to top up what is left of its queue's
            # guarantee (a wait there would be a guarantee withheld)
            may_borrow = self._nominal_left(spec.queue)
        return self._verdict(rec, tier, may_borrow)

    def _yielding(self, spec: JobSpec) -> str:
        """Why ``spec`` waits for a priority preemptor to take its room, or ``""``."""
        if self._yield_tiers:
            mine = self.tier(spec).name
            for preemptor, tiers in self._yield_tiers.items():
                if mine in tiers and preemptor != spec.id:
                    return f"waits while job {preemptor} takes the room it preempted for"
        return ""

    def _verdict(self, rec: JobRecord, tier: QoSTier, may_borrow: bool) -> Admission:
        """The ledger's verdict, shared by jobs alike until the ledger changes (parked jobs
        are checked again every time quota is freed: hundreds of them, of a few shapes)."""
        spec = rec.spec
        known = self._totals.get(spec.id)
        if known is None or known[0] is not spec:
            known = self._totals[spec.id] = (spec, spec.total, quota_placement(spec))
        placement = known[2]
        plain = not (placement.node_selector or placement.required or placement.anti_affinity)
        key = (spec.queue, spec.user, tier.name, may_borrow, known[1])
        if plain:
            if self._verdicts_at != self.ledger.version:
                self._verdicts.clear()
                self._verdicts_at = self.ledger.version
            hit = self._verdicts.get(key)
            if hit is not None:
                return hit
        verdict = self.ledger.check(
            spec.queue,
            known[1],
            placement=placement,
            may_borrow=may_borrow,
            user=spec.user or None,
            qos=tier.name,
        )
        if plain:
            self._verdicts[key] = verdict
        return verdict

    def _nominal_left(self, queue: str) -> bool:
        """Whether ``queue`` uses less than its nominal quota of some resource."""
        usage = self.ledger.usage(queue)
        return any(v > usage.get(c, 0) for c, v in self.ledger.nominal(queue).items())

    def node_terms(self, verdict: Admission | None) -> tuple[tuple[str, str, str], ...]:
        """Where the job may run for the quota it is charged to be the right one: ``("=",
        key, value)`` for the labels of the flavours ``verdict`` assigned, ``("!", key,
        value)`` for the nodes of dedicated flavours it is not charged to; sorted."""
        used = (
            set()
            if verdict is None or verdict.assignment is None
            else set(verdict.assignment.flavors.values())
        )
        terms: set[tuple[str, str, str]] = set()
        for flavour in used:
            terms.update(("=", k, v) for k, v in self._flavour_labels.get(flavour, {}).items())
        for flavour, (key, value) in self._dedicated.items():
            if flavour not in used:
                terms.add(("!", key, value))
        return tuple(sorted(terms))

    def _reclaiming(self, queue: str) -> bool:
        """Another queue of ``queue``'s cohort is taking lent capacity back: no borrowing
        meanwhile, so what the victims free goes to the lender."""
        cohort = self._queues[queue].cohort
        if cohort is None or not self._pending:
            return False
        for preemptor in self._pending:
            other = self._queue_of.get(preemptor)
            if other is not None and other != queue and self._queues[other].cohort == cohort:
                return True
        return False

    def bind(self, rec: JobRecord, now: float) -> None:
        """``rec`` starts: charge its quota and start its usage clock."""
        self._bind(rec.spec, rec.admission, now)

    def _bind(self, spec: JobSpec, verdict: Admission | None, now: float) -> None:
        if verdict is not None and verdict.assignment is not None:
            self.ledger.admit(
                spec.id,
                verdict.assignment,
                user=spec.user or None,
                qos=self.tier(spec).name,
                check=False,  # checked in this cycle, nothing bound since
            )
        self._charged[spec.id] = now
        self._rates[spec.id] = billing_rate(spec, self.policy.gpu_weight)
        tier = self.tier(spec).name
        self._tier_running[tier] = self._tier_running.get(tier, 0) + 1
        self._lenders = None
        self._forget_preemptor(spec.id)
        self._totals.pop(spec.id, None)

    def release(self, rec: JobRecord, now: float, held: bool = False) -> None:
        """``rec`` stopped: give back its quota and charge its last stretch of usage. A
        victim whose run still ``held`` nodes (core/completing.py) has freed its room only
        once :meth:`victim_gone` says so."""
        spec = rec.spec
        self.ledger.release(spec.id)
        self._lenders = None
        self._freed_groups.add(self._group(spec.queue))
        self._freed_users.add(spec.user)
        since = self._charged.pop(spec.id, None)
        rate = self._rates.pop(spec.id, 0.0)
        if since is not None:
            tier = self.tier(spec).name
            self._tier_running[tier] -= 1
            if now > since and rate > 0:
                self.tracker.charge_interval(self.account(spec), rate, since, now)
        rec.admission = None
        if rec.preempt_reason is None:
            self._backoff.drop(spec.id)  # it ended of itself: nothing to back off from
        if not held:
            self.victim_gone(spec.id)

    def victim_gone(self, job_id: str) -> None:
        """The room ``job_id`` held is free: the preemptors waiting for it wait no more."""
        for preemptor, victims in self._pending.items():
            if job_id in victims:
                victims.discard(job_id)
                if not victims:
                    self._drained.setdefault(preemptor, -1)

    def preempting(self) -> bool:
        """Whether some job waits for victims to stop (the room they free is its)."""
        return bool(self._pending)

    def preempting_for(self, job_id: str) -> bool:
        """Whether victims are (or were just) stopping so that ``job_id`` can start."""
        return job_id in self._pending

    def ready(self) -> list[str]:
        """Preemptors whose victims have all stopped: they should be tried first."""
        return [job for job, victims in self._pending.items() if not victims]

    def choose_again(self, job_id: str) -> None:
        """A preemptor whose victims have all stopped still does not fit (what they freed was
        not where its gang needs room): its reclaim starts over, so new victims can be chosen
        (see :meth:`hold` when there are none)."""
        self._pending.pop(job_id, None)
        self._drained.pop(job_id, None)

    def hold(self, rec: JobRecord) -> None:
        """Keep ``rec``'s reclaim open without victims: no queue of its cohort may borrow until
        it starts, so the room its victims freed is not handed back to them (who would be
        preempted again) while it waits for the rest of its place."""
        self._pending.setdefault(rec.id, set())
        self._queue_of[rec.id] = rec.spec.queue

    def dequeued(self, job_id: str) -> None:
        """A waiting job left the queue (cancelled): it reclaims nothing any more."""
        self._forget_preemptor(job_id)
        self._totals.pop(job_id, None)
        self._backoff.drop(job_id)

    def held(self, job_id: str) -> None:
        """A waiting job was held: while held it cannot take what a reclaim frees, so its
        reclaim ends (the queues of its cohort may borrow again); its borrowing back-off
        goes on (a hold and a release do not lift it)."""
        self._forget_preemptor(job_id)

    def _forget_preemptor(self, job_id: str) -> None:
        if self._yield_tiers.pop(job_id, None):
            self._lifted = True  # jobs that yielded to it may start again
        if self._pending.pop(job_id, None) is not None:
            self._lifted = True  # its cohort may borrow again
        self._drained.pop(job_id, None)
        self._queue_of.pop(job_id, None)

    def _group(self, queue: str) -> str:
        """The quota pool a queue draws from: its cohort, else the queue alone."""
        spec = self._queues.get(queue)
        return f"cohort:{spec.cohort}" if spec is not None and spec.cohort else f"queue:{queue}"

    def freed(self, parked: Iterable[JobRecord], everything: bool) -> list[JobRecord]:
        """Of the jobs their quota blocked, those that may be admitted now: quota came back to
        their queue's pool or to their user (QoS limits count per user) since the last call,
        or ``everything`` (borrowing or yielding rules changed). Resets what it remembers."""
        groups, users = self._freed_groups, self._freed_users
        self._freed_groups, self._freed_users = set(), set()
        if everything:
            return list(parked)
        if not groups and not users:
            return []
        return [r for r in parked if self._group(r.spec.queue) in groups or r.spec.user in users]

    # ------------------------------------------------------------------ cycle

    def start_cycle(self, core: SchedulerCore, now: float) -> bool:
        """Once per cycle: end reclaims whose victims are gone (they had one cycle to use
        what was freed), and every ``recalc_s`` charge running jobs and recompute fair share.
        True when a reclaim ended (borrowing is allowed again)."""
        cycle = core.stats.cycles
        lifted, self._lifted = self._lifted, False
        self._now = now
        if self._backoff.due(now):
            # back-offs that ended: their queues' parked jobs are checked again, as when
            # quota is freed
            self._freed_groups.update(self._group(q) for q in self._backoff.ended(now))
        for preemptor, drained in list(self._drained.items()):
            if drained < 0:
                self._drained[preemptor] = cycle
            elif drained < cycle:
                self._forget_preemptor(preemptor)
                lifted = True
        if now - self._charged_at >= self.policy.recalc_s:
            self._charge_running(core, now)
            self._charged_at = now
            self._factors = None
        return lifted

    def next_wakeup(self) -> float | None:
        """When a borrowing back-off ends (a shell should run a cycle then), or None."""
        return self._backoff.next_wakeup()

    def _charge_running(self, core: SchedulerCore, now: float) -> None:
        for job_id, since in self._charged.items():
            if now > since:
                rate = self._rates[job_id]
                if rate > 0:
                    spec = core.jobs[job_id].spec
                    self.tracker.charge_interval(self.account(spec), rate, since, now)
                self._charged[job_id] = now

    def factors(self, records: Sequence[JobRecord], now: float) -> FairShareResult:
        if self._factors is None:
            users = {(r.spec.queue, r.spec.user) for r in records if r.spec.queue in self._queues}
            self._factors = fairshare_factors(self.config, self.tracker, now, users=users)
        return self._factors

    def fairshare(self, spec: JobSpec, result: FairShareResult) -> float:
        if spec.queue not in self._queues:
            return NEUTRAL_FAIRSHARE
        try:
            return result.factor(self.account(spec))
        except KeyError:
            return NEUTRAL_FAIRSHARE

    # ------------------------------------------------------------------ preemption

    def lenders(self) -> frozenset[str]:
        """Queues whose jobs may reclaim: members of a cohort where another queue borrows."""
        if self._lenders is None:
            borrowing = {q for q in self._queues if self.ledger.borrowed(q)}
            out: set[str] = set()
            for name, queue in self._queues.items():
                if queue.cohort is None:
                    continue
                if any(b != name and self._queues[b].cohort == queue.cohort for b in borrowing):
                    out.add(name)
            self._lenders = frozenset(out)
        return self._lenders

    def cohort_mates(self, queue: str) -> frozenset[str]:
        """The other queues of ``queue``'s cohort."""
        cohort = self._queues[queue].cohort
        return frozenset(
            q for q, spec in self._queues.items() if spec.cohort == cohort and q != queue
        )

    def rate(self, job_id: str) -> float:
        """Usage units per second running ``job_id`` is charged (0 when it does not run)."""
        return self._rates.get(job_id, 0.0)

    def running_in(self, tiers: Iterable[str]) -> bool:
        """Whether some job of these QoS tiers runs."""
        return any(self._tier_running.get(t) for t in tiers)

    def preempt(
        self, rec: JobRecord, victims: Iterable[JobRecord], tiers: frozenset[str] = frozenset()
    ) -> list[JobRecord]:
        """Record that ``victims`` are asked to stop for ``rec`` (for priority over these
        ``tiers``, whose jobs then wait until it starts); ``victims`` as a list
        (:mod:`fusesched.core.victim_choice` chose them)."""
        out = list(victims)
        if not out:
            return out
        self._pending[rec.id] = {v.id for v in out}
        self._yield_tiers[rec.id] = tiers
        self._queue_of[rec.id] = rec.spec.queue
        backoff_s = self.policy.borrow_backoff_s
        for victim in out:
            victim.preempt_reason = f"preempted for job {rec.id} ({rec.spec.queue}, {rec.spec.qos})"
            if backoff_s and self.ledger.borrowed(victim.spec.queue):
                self._backoff.preempted(victim.id, victim.spec.queue, self._now)
        self.preempted += len(out)
        return out

    def grace(self, rec: JobRecord) -> float:
        return self.tier(rec.spec).grace_s

    # ------------------------------------------------------------------ reconfiguration

    def take_over(
        self,
        old: TenantGate,
        core: SchedulerCore,
        now: float,
        assignments: Mapping[str, FlavorAssignment | None],
        keep: Callable[[tuple[str, ...]], bool],
    ) -> dict[str, Admission | None]:
        """Take over what ``old`` (the previous configuration's gate) knows, between cycles
        (:mod:`fusesched.core.reconfig`, which chose ``assignments``: what each running job
        is charged here, and ``keep``: the fair-share accounts that still exist); the
        admission of every running job here, for the caller to set once the whole change
        has been built. Changes neither ``old`` nor the core's records, so a failure on the
        way leaves the old configuration whole.

        Running jobs are charged up to ``now`` under the old accounts and rates, then to
        this configuration's quotas, above a quota that shrank (they keep running; new
        admissions wait). Every parked job is looked at again. Reclaims and priority
        preemptions under way go on (their preemptors still wait for the victims already
        asked to stop, and are not given more), and so do borrowing back-offs."""
        usage = old.tracker.carried(old.tracker.half_life_s, now, lambda _: True)
        for job_id, since in old._charged.items():
            rate = old._rates[job_id]
            if now > since and rate > 0:
                usage.charge_interval(old.account(core.jobs[job_id].spec), rate, since, now)
        self.tracker = usage.carried(self.policy.half_life_s, now, keep)
        self._charged_at = now
        self._now = old._now
        self.preempted = old.preempted
        if self.policy.borrow_backoff_s:
            self._backoff = copy.deepcopy(old._backoff)
            self._backoff.backoff_s = self.policy.borrow_backoff_s
        admissions: dict[str, Admission | None] = {}
        for job_id in core.running.ids():
            spec = core.jobs[job_id].spec
            assignment = assignments.get(job_id)
            verdict = None if assignment is None else Admission(True, spec.queue, assignment)
            self._bind(spec, verdict, now)
            admissions[job_id] = verdict
        # reclaims under way (their preemptors wait, so their queues remain: prepare says so)
        gone = {p for p, q in old._queue_of.items() if self._queues and q not in self._queues}
        self._pending = {p: set(v) for p, v in old._pending.items() if p not in gone}
        self._drained = {p: c for p, c in old._drained.items() if p not in gone}
        self._queue_of = {p: q for p, q in old._queue_of.items() if p not in gone}
        self._yield_tiers = {p: t for p, t in old._yield_tiers.items() if p not in gone}
        self._lifted = True  # parked jobs come back: the new quotas may admit them
        return admissions
