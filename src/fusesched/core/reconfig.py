"""Reconfiguration: a running core takes a new tenancy policy and new license counts between
cycles (``fusesched reconfigure`` and SIGHUP to the controller, as Slurm's ``scontrol
reconfigure``; Kueue applies changed ClusterQueue quotas live the same way).

Two steps, so that a change is all or nothing. :func:`prepare` checks it against the jobs
the core holds (and those the shell accepted but has not handed over yet) and refuses, with
every reason, a change that would orphan work: removing a queue or QoS tier that waiting or
running jobs use, removing a license running jobs hold or waiting jobs ask for, or a license
count below what one waiting job asks for by itself (it could never start). :func:`apply`
then swaps the core's tenancy gate and license pool for new ones that take over what the old
ones knew (:meth:`TenantGate.take_over`):

* running jobs keep running: they are charged to the new quotas — above a quota that shrank,
  in which case that queue admits nothing new until enough of them has ended — and keep the
  licenses they hold (a smaller count leaves the excess in use until they end);
* decayed fair-share usage is kept for every account that still exists;
* every waiting job, parked by its quota or blocked by licenses, is looked at again in the
  next cycle, without the node labels of the flavours it was admitted in before;
* reclaims and priority preemptions under way go on: their preemptors wait for the victims
  already asked to stop (no others are chosen) and take the room they free.

All or nothing: :func:`apply` builds the new gate and pool before the core takes them.

Pure, like the rest of the core: the shell passes the time and the new settings; nothing
here reads a file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from types import MethodType
from typing import TYPE_CHECKING

from fusesched.core import reservations
from fusesched.core.licenses import LicensePool, licensed_try_place
from fusesched.core.quota_verdicts import FlavorAssignment
from fusesched.core.records import JobRecord
from fusesched.core.tenants import TenantGate
from fusesched.model.job import JobSpec
from fusesched.model.licenses import Licenses, normalize
from fusesched.model.phases import JobPhase
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig, PolicyError
from fusesched.policies.tenancy_policy import TenancyPolicy

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore


class ReconfigureRefused(ValueError):
    """The change would orphan work (or cannot apply to this core); ``reasons`` says why,
    one reason per queue, tier or license."""

    def __init__(self, reasons: Sequence[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = tuple(reasons)


@dataclass(frozen=True)
class Reconfiguration:
    """A checked change for :func:`apply`: the core's new configuration, and which parts of
    it change (``None``: that part stays as it is)."""

    config: CoreConfig
    tenancy: TenancyPolicy | None
    licenses: Licenses | None


def prepare(
    core: SchedulerCore,
    tenancy: TenancyPolicy | None = None,
    licenses: Licenses | None = None,
    pending: Iterable[JobSpec] = (),
) -> Reconfiguration:
    """Check that ``core`` may take ``tenancy`` and ``licenses`` (``None``: keep it) now;
    :class:`ReconfigureRefused` with every reason if not (``LicenseError`` for a malformed
    license list). ``pending``: jobs the shell has accepted that the core does not hold yet
    (they count as waiting). Changes nothing."""
    if licenses is not None:
        licenses = normalize(licenses)  # (LicenseError for a bad name or count)
    if tenancy is not None and core.tenants is None:
        raise ReconfigureRefused(
            ["this core runs without tenancy: a tenancy policy takes effect at a restart"]
        )
    jobs = _live_jobs(core, pending)
    reasons: list[str] = []
    if tenancy is not None:
        reasons.extend(_tenancy_orphans(core, tenancy, jobs))
    if licenses is not None:
        reasons.extend(_license_orphans(licenses, jobs))
    if reasons:
        raise ReconfigureRefused(reasons)
    changes: dict[str, object] = {}
    if tenancy is not None:
        changes["tenancy"] = tenancy
    if licenses is not None:
        changes["licenses"] = licenses
    try:
        config = replace(core.config, **changes)  # type: ignore[arg-type]
    except PolicyError as exc:
        raise ReconfigureRefused([str(exc)]) from None
    return Reconfiguration(config, tenancy, config.licenses if licenses is not None else None)


def apply(core: SchedulerCore, change: Reconfiguration, now: float) -> None:
    """Swap ``core``'s tenancy gate and license pool for ``change``'s (checked by
    :func:`prepare` against the same state: call both under one lock, between cycles).

    All or nothing: the new gate and pool are built first, from what the old ones know,
    without changing them or the jobs; only then does the core take them, in steps that
    cannot fail. An exception on the way leaves the old configuration fully in place."""
    gate = admissions = None
    if change.tenancy is not None:
        old = core.tenants
        assert old is not None  # (prepare refuses a core without tenancy)
        gate = TenantGate(change.tenancy)
        held = old.ledger.jobs
        assignments = {
            job_id: _carried_assignment(gate, core, core.jobs[job_id], held.get(job_id))
            for job_id in core.running.ids()
        }
        admissions = gate.take_over(old, core, now, assignments, _known_accounts(gate.config))
    pool = core.licenses
    if change.licenses is not None:
        pool = LicensePool.of(change.licenses)
        if pool is not None and core.licenses is not None:
            for job_id, wanted in core.licenses.held.items():
                pool.take(job_id, wanted)  # (even above a smaller count: they keep running)
    # ---- commit: nothing below fails
    if gate is not None and admissions is not None:
        core.tenants = gate
        for job_id, admission in admissions.items():
            core.jobs[job_id].admission = admission
        _unpin(core)
    if change.licenses is not None:
        core.licenses = pool
        if pool is None:
            vars(core).pop("try_place", None)  # the plain placement again
        else:
            core.try_place = MethodType(licensed_try_place, core)  # type: ignore[method-assign]
    core.config = change.config
    core._changed = True  # every waiting job is looked at again under the new settings
    core.reservation = None


def _unpin(core: SchedulerCore) -> None:
    """Drop the node labels of the old configuration's flavours from every job that has not
    ended (:func:`fusesched.core.admission.pin_flavours` added them): a waiting job is
    checked against the new quotas with its own constraints, and pinned again to the
    flavours it is admitted in; a running job is so if it is requeued."""
    for rec in core.jobs.values():
        base = rec.base_spec
        if base is None or rec.phase.terminal or rec.spec is base:
            continue
        shape = rec.shape_id
        core.reshape(rec, base)
        rec.flavour_key = ()
        if rec.booked is not None:
            reservations.fits_anyway(core, rec)
        if rec.phase is JobPhase.QUEUED and rec.shape_id != shape:
            pos = core.queue.position(rec)
            if pos is not None:
                core.queue.rows[pos, 1] = rec.shape_id  # (backfilling skips failed shapes by it)


# ----------------------------------------------------------------------------- take-over


def _carried_assignment(
    gate: TenantGate, core: SchedulerCore, rec: JobRecord, held: FlavorAssignment | None
) -> FlavorAssignment | None:
    """What a running job is charged under ``gate``'s configuration: what it held, when its
    queue still has quota in those flavours and no flavour would cover other resources of
    it now (none that would take it at all, too: a flavour's labels changed under it; what
    it uses is still charged); else the first flavour of its queue that one of its nodes
    stands for (None: its queue has no quota, or none for it)."""
    spec = rec.spec
    if spec.queue not in {q.name for q in gate.config.queues}:
        return None
    ledger = gate.ledger
    base = rec.base_spec if rec.base_spec is not None else spec
    rows = sorted(set(rec.allocation.nodes.tolist())) if rec.allocation is not None else []
    labels = [core.cluster.specs[row].labels for row in rows]
    fresh = ledger.flavor_of(spec.queue, spec.total, base.placement, labels)
    if fresh is None:
        fresh = ledger.flavor_of(spec.queue, spec.total, base.placement)
    if held is not None and held.queue == spec.queue:
        defined = ledger.nominal(spec.queue)
        same = fresh is None or {r for _, r in fresh.amounts} == {r for _, r in held.amounts}
        if same and all(column in defined for column in held.amounts):
            return held
    return fresh


def _known_accounts(config: TenancyConfig) -> Callable[[tuple[str, ...]], bool]:
    """Whether a fair-share account (a path) still exists in ``config``: the root, an
    organisation, tenant or queue of it and their users, or (outside the configured tree)
    the users of a queue it does not configure."""
    queues = {q.name for q in config.queues}
    known: set[tuple[str, ...]] = {(o.name,) for o in config.organisations}
    known |= {(t.organisation, t.name) for t in config.tenants}
    known |= {config.account_path(q) for q in queues}

    def exists(account: tuple[str, ...]) -> bool:
        if not account:
            return True
        if account[0] == "":
            return len(account) < 3 or account[2] not in queues
        return account[:3] in known

    return exists


# ----------------------------------------------------------------------------- checks


def _live_jobs(core: SchedulerCore, pending: Iterable[JobSpec]) -> list[tuple[JobSpec, bool]]:
    """(spec, running) of every job that has not ended, the shell's ``pending`` included."""
    out = [
        (rec.spec, rec.phase is JobPhase.RUNNING)
        for rec in core.jobs.values()
        if not rec.phase.terminal
    ]
    out.extend((spec, False) for spec in pending if spec.id not in core.jobs)
    return out


def _jobs(waiting: int, running: int) -> str:
    """``3 waiting and 1 running jobs``, ``1 waiting job``."""
    parts = [f"{n} {what}" for n, what in ((waiting, "waiting"), (running, "running")) if n]
    return f"{' and '.join(parts)} job{'' if waiting + running == 1 else 's'}"


def _count(table: dict[str, list[int]], key: str, running: bool) -> None:
    table.setdefault(key, [0, 0])[1 if running else 0] += 1


def _tenancy_orphans(
    core: SchedulerCore, policy: TenancyPolicy, jobs: list[tuple[JobSpec, bool]]
) -> list[str]:
    """A reason for every queue and QoS tier the new policy drops that jobs still use (the
    rule :meth:`TenantGate.refuse` applies to a submission)."""
    config = policy.config
    queues = {q.name for q in config.queues}
    by_queue: dict[str, list[int]] = {}
    by_tier: dict[str, list[int]] = {}
    for spec, running in jobs:
        if queues and spec.queue not in queues:
            _count(by_queue, spec.queue, running)
        if str(spec.qos) not in config.qos:
            _count(by_tier, str(spec.qos), running)
    assert core.tenants is not None
    tenant_of = {q.name: q.tenant for q in core.tenants.config.queues}
    tenants = {t.name for t in config.tenants}
    reasons: list[str] = []
    for name, (waits, runs) in sorted(by_queue.items()):
        tenant = tenant_of.get(name)
        what = f"queue {name}"
        if tenant is not None and tenant not in tenants:
            what = f"tenant {tenant} (its queue {name})"
        reasons.append(
            f"{what} has {_jobs(waits, runs)}: drain it first (let them end or cancel "
            "them), then remove it"
        )
    for name, (waits, runs) in sorted(by_tier.items()):
        reasons.append(
            f"qos {name} has {_jobs(waits, runs)}: let them end or move them to another "
            "tier (fusesched update --qos) first, then remove it"
        )
    return reasons


def _license_orphans(licenses: Licenses, jobs: list[tuple[JobSpec, bool]]) -> list[str]:
    """A reason for every license the new counts drop that jobs hold or ask for, and every
    count below what one waiting job asks for (running jobs may hold more than a smaller
    count: they keep it until they end)."""
    totals = dict(licenses)
    removed: dict[str, list[int]] = {}
    biggest: dict[str, tuple[int, str]] = {}  # license -> (most a waiting job asks, which)
    for spec, running in jobs:
        for name, count in spec.licenses:
            if name not in totals:
                _count(removed, name, running)
            elif not running and count > max(totals[name], biggest.get(name, (0, ""))[0]):
                biggest[name] = (count, spec.id)
    reasons: list[str] = []
    for name, (waits, runs) in sorted(removed.items()):
        uses = []
        if runs:
            uses.append(f"held by {runs} running job{'' if runs == 1 else 's'}")
        if waits:
            uses.append(f"asked for by {waits} waiting job{'' if waits == 1 else 's'}")
        reasons.append(
            f"license {name} is {' and '.join(uses)}: it cannot be removed while in use "
            "(give it a count instead: running jobs keep what they hold)"
        )
    for name, (count, job_id) in sorted(biggest.items()):
        reasons.append(
            f"license {name}: job {job_id} waits for {count} and the new count {totals[name]} "
            f"could never start it: keep at least {count}, or cancel the job first"
        )
    return reasons
