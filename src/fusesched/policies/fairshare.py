"""Hierarchical fair share: decayed historical usage and Slurm-style Fair Tree ranking.

Accounts are paths ``(organisation, tenant, queue, user)``. :class:`UsageTracker` keeps each
account's usage decayed with a half-life ``h`` — a unit charged at time ``t0`` counts
``2 ** (-(t - t0) / h)`` at time ``t`` — and charges every ancestor too, so an account's usage is
the sum of its children's.

:func:`fair_tree` ranks the leaves. Among siblings, an account's *level fair share* is
``LF = S / U`` with ``S`` its shares over its siblings' shares and ``U`` its usage over its
siblings' usage (``∞`` without usage). Siblings are visited in decreasing ``LF``, depth first,
so every user of a better-behaved account ranks above every user of a worse one; leaves are
numbered in visiting order and get the factor ``(n − position + 1) / n`` in ``(0, 1]``. Equal
``LF`` is a tie: tied leaves share a position, tied accounts have their children merged and
sorted together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fusesched.model.tenancy import TenancyConfig

Account = tuple[str, ...]

_LN2 = math.log(2.0)

#: Billing units per GPU-hour; a CPU core-hour is one (as Slurm's ``TRESBillingWeights``).
GPU_BILLING_WEIGHT = 10.0


def billing_units(
    cpu_hours: float, gpu_hours: float, gpu_weight: float = GPU_BILLING_WEIGHT
) -> float:
    """What an account is charged: ``CPU-hours + gpu_weight × GPU-hours``. The core charges
    fair share at this rate while jobs run (``core/tenants.py``) and ``fusesched usage``
    reports it from the stored job records, so both rest on the same arithmetic."""
    return cpu_hours + gpu_weight * gpu_hours


class UsageTracker:
    """Decayed usage per account path, charged incrementally. Time must not go backwards."""

    def __init__(self, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError("half_life_s must be positive (math.inf: no decay)")
        self.half_life_s = float(half_life_s)
        self._usage: dict[Account, tuple[float, float]] = {}  # account -> (value, as of time)
        self._clock = -math.inf

    def _decay(self, dt: float) -> float:
        return 1.0 if math.isinf(self.half_life_s) else 0.5 ** (dt / self.half_life_s)

    def _advance(self, now: float) -> None:
        if now < self._clock:
            raise ValueError(f"time went backwards: {now} < {self._clock}")
        self._clock = now

    def charge(self, account: Sequence[str], amount: float, now: float) -> None:
        """Add ``amount`` (e.g. GPU-seconds, billing units) at time ``now`` to ``account`` and
        each of its ancestors (the root ``()`` included)."""
        if amount < 0 or not math.isfinite(amount):
            raise ValueError(f"usage must be a non-negative finite amount, got {amount!r}")
        self._advance(now)
        path = tuple(account)
        for depth in range(len(path) + 1):
            key = path[:depth]
            value, since = self._usage.get(key, (0.0, now))
            self._usage[key] = (value * self._decay(now - since) + amount, now)

    def charge_interval(
        self, account: Sequence[str], rate: float, start: float, end: float
    ) -> None:
        """Charge a job that used ``rate`` units per second from ``start`` to ``end``, exactly
        decayed within the interval: ``rate · h/ln 2 · (1 − 2^(−(end − start)/h))``, booked at
        ``end``. Call it per scheduling cycle for running jobs, or once when a job ends."""
        if end < start:
            raise ValueError("interval ends before it starts")
        self.charge(account, self._used(rate, end - start), end)

    def charge_ended(
        self,
        account: Sequence[str],
        runs: Iterable[tuple[float, Iterable[tuple[float, float]]]],
        now: float,
    ) -> None:
        """Charge runs that ended by ``now``: for each ``(rate, spans)``, runs of ``rate``
        units per second from ``start`` to ``end`` (``spans``), as :meth:`charge_interval`
        at each ``end`` would have. Their usage decayed to ``now`` is booked at ``now``, in
        one charge (a restarted shell's runs of before: :mod:`fusesched.core.past_usage`).
        An end after ``now`` (a clock set back) counts as ``now``; a run that did not last
        counts nothing, and when none did ``account`` is not charged at all (nor was it while
        they ran). Nor does a run no clock made (stored data: a start or end not finite, a
        usage too large for a float), which :meth:`charge` would refuse."""
        total = 0.0
        ran = False
        for rate, spans in runs:
            for start, end in spans:
                stop = min(end, now)
                if stop > start and math.isfinite(start) and math.isfinite(end):
                    used = self._used(rate, stop - start) * self._decay(now - stop)
                    if math.isfinite(used):
                        ran = True
                        total += used
        if ran and math.isfinite(total):
            self.charge(account, total, now)

    def _used(self, rate: float, span: float) -> float:
        """Usage of ``rate`` for ``span`` seconds as of its end, decayed within the span."""
        if math.isinf(self.half_life_s):
            return rate * span
        return rate * self.half_life_s / _LN2 * -math.expm1(-_LN2 * span / self.half_life_s)

    def usage_at(self, account: Sequence[str], now: float) -> float:
        """The decayed usage of ``account`` at ``now`` (0 for an account never charged)."""
        entry = self._usage.get(tuple(account))
        if entry is None:
            return 0.0
        value, since = entry
        if now < since:
            raise ValueError(f"usage of {account} is known as of {since}, not earlier ({now})")
        return value * self._decay(now - since)

    def accounts(self) -> list[Account]:
        """Every account charged so far (ancestors included), sorted."""
        return sorted(self._usage)

    def snapshot(self, now: float) -> dict[Account, float]:
        return {a: self.usage_at(a, now) for a in self.accounts()}

    def carried(
        self, half_life_s: float, now: float, keep: Callable[[Account], bool]
    ) -> UsageTracker:
        """A tracker decaying with ``half_life_s`` that starts from this one's usage at
        ``now`` of every account ``keep`` accepts (a reconfigured core keeps the usage of
        the accounts that still exist: ``core/tenants.py``)."""
        at = max(now, self._clock)
        out = UsageTracker(half_life_s)
        out._advance(at)
        out._usage = {a: (self.usage_at(a, at), at) for a in sorted(self._usage) if keep(a)}
        return out


# ----------------------------------------------------------------------------- Fair Tree


@dataclass(frozen=True, slots=True)
class FairShareEntry:
    """One account's numbers, as ``sshare -l`` would show them."""

    account: Account
    shares: float
    norm_shares: float  # among siblings
    usage: float
    norm_usage: float  # among siblings
    level_fs: float  # norm_shares / norm_usage, inf without usage
    position: int | None = None  # 1 = ranked first (ranked leaves only)
    factor: float | None = None  # in (0, 1] (ranked leaves only)


@dataclass(frozen=True)
class FairShareResult:
    entries: Mapping[Account, FairShareEntry]
    ranked: int  # number of ranked leaves

    def factor(self, account: Sequence[str]) -> float:
        """The fair-share factor of a ranked leaf account."""
        entry = self.entries.get(tuple(account))
        if entry is None or entry.factor is None:
            raise KeyError(f"{'/'.join(account)} is not a ranked account")
        return entry.factor

    def order(self) -> list[Account]:
        """Ranked leaves, best first."""
        ranked = [e for e in self.entries.values() if e.position is not None]
        return [e.account for e in sorted(ranked, key=lambda e: (e.position, e.account))]


def _tied(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def fair_tree(
    shares: Mapping[Account, float],
    usage: Mapping[Account, float] | Callable[[Account], float],
    *,
    leaf_depth: int | None = None,
) -> FairShareResult:
    """Rank the leaves of the account tree given by ``shares`` (missing ancestors get one
    share). ``usage`` is a mapping or a function of the account. With ``leaf_depth`` only
    leaves at that depth are ranked (e.g. 4 for users)."""
    use: Callable[[Account], float]
    if callable(usage):
        use = usage
    else:
        table = usage
        use = lambda a: table.get(a, 0.0)  # noqa: E731
    raw: dict[Account, float] = {}
    for account, value in shares.items():
        if not value > 0:
            raise ValueError(f"account {'/'.join(account)}: shares must be positive")
        raw[tuple(account)] = float(value)
    for account in list(raw):
        for depth in range(1, len(account)):
            raw.setdefault(account[:depth], 1.0)
    children: dict[Account, list[Account]] = {}
    for account in sorted(raw):
        if account:
            children.setdefault(account[:-1], []).append(account)
    entries: dict[Account, FairShareEntry] = {}
    for siblings in children.values():
        total_s = sum(raw[a] for a in siblings)
        used = {a: max(0.0, use(a)) for a in siblings}
        total_u = sum(used.values())
        for a in siblings:
            s = raw[a] / total_s
            u = used[a] / total_u if total_u > 0 else 0.0
            lf = s / u if u > 0 else math.inf
            entries[a] = FairShareEntry(a, raw[a], s, used[a], u, lf)

    def rankable(a: Account) -> bool:
        return a not in children and (leaf_depth is None or len(a) == leaf_depth)

    positions: dict[Account, int] = {}
    next_position = 1

    def visit(group: list[Account]) -> None:
        nonlocal next_position
        ordered = sorted(group, key=lambda a: (-entries[a].level_fs, a))
        i = 0
        while i < len(ordered):
            j = i + 1
            while j < len(ordered) and _tied(
                entries[ordered[i]].level_fs, entries[ordered[j]].level_fs
            ):
                j += 1
            tie = ordered[i:j]
            leaves = [a for a in tie if rankable(a)]
            for a in leaves:
                positions[a] = next_position
            next_position += len(leaves)
            merged = [c for a in tie if a in children for c in children[a]]
            if merged:
                visit(merged)
            i = j

    visit(children.get((), []))
    n = next_position - 1
    for account, pos in positions.items():
        entries[account] = replace(entries[account], position=pos, factor=(n - pos + 1) / n)
    return FairShareResult(entries, n)


def account_shares(
    config: TenancyConfig, users: Iterable[tuple[str, str]] = ()
) -> dict[Account, float]:
    """The share tree of ``config``: organisations, tenants, queues and the users named in a
    queue's ``user_shares`` or in ``users`` (``(queue, user)`` pairs; one share by default)."""
    out: dict[Account, float] = {}
    for org in config.organisations:
        out[(org.name,)] = org.shares
    for tenant in config.tenants:
        out[(tenant.organisation, tenant.name)] = tenant.shares
    for queue in config.queues:
        path = config.account_path(queue.name)
        out[path] = queue.shares
        for user, share in queue.user_shares.items():
            out[(*path, user)] = share
    for queue_name, user in users:
        queue = config.queue(queue_name)
        out.setdefault((*config.account_path(queue_name), user), queue.user_share(user))
    return out


def fairshare_factors(
    config: TenancyConfig,
    tracker: UsageTracker,
    now: float,
    users: Iterable[tuple[str, str]] = (),
) -> FairShareResult:
    """Fair Tree over ``config``'s hierarchy with ``tracker``'s usage at ``now``. Ranked are
    users (depth 4): those configured, those in ``users`` and those the tracker has seen."""
    known = {q.name for q in config.queues}
    seen = [
        (a[2], a[3]) for a in tracker.accounts() if len(a) == 4 and a[2] in known
    ]  # (queue, user)
    tree = account_shares(config, [*users, *seen])
    return fair_tree(tree, lambda a: tracker.usage_at(a, now), leaf_depth=4)
