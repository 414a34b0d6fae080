"""Topology-aware choice of nodes for a gang: keep a multi-node job inside one switch (or
NVLink domain, or rack).

Nodes carry topology labels (``topology.fusesched.io/switch`` and friends). A job may ask
that all its tasks lie in one domain of such a label, *required* (else it waits; "never" when
no domain could hold it even empty) or *preferred* (one domain if any fits now, else as few
domains as possible). The choice is array work over the candidate rows: domain codes, then
per-domain task slots by ``np.bincount``.

The module chooses *domains*; which nodes inside them take the tasks is still the placement
policy's choice: the caller restricts its candidates to :attr:`DomainChoice.rows`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from fusesched.model.node import LABEL_SWITCH

IntArray = npt.NDArray[np.int64]


class TopologyMode(StrEnum):
    REQUIRED = "required"  # all tasks in one domain, or wait
    PREFERRED = "preferred"  # one domain if possible, else as few as possible


class TopologyStatus(StrEnum):
    FITS = "fits"  # place the gang on DomainChoice.rows
    WAIT = "wait"  # unschedulable now
    NEVER = "never"  # no domain could hold the gang even on an empty cluster


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Keep a job's tasks within one domain of the node label ``key``."""

    key: str = LABEL_SWITCH
    mode: TopologyMode = TopologyMode.REQUIRED


@dataclass(frozen=True, slots=True, eq=False)
class DomainCodes:
    """Per node row, the code of its domain under one label key (-1: the node has no label).

    Build it once per key (and again when nodes are added); ``names[code]`` is the label value.
    """

    key: str
    codes: IntArray
    names: tuple[str, ...]

    @classmethod
    def from_labels(cls, labels: Sequence[Mapping[str, str]], key: str) -> DomainCodes:
        values = [node.get(key) for node in labels]
        names = tuple(sorted({v for v in values if v is not None}))
        code_of = {name: code for code, name in enumerate(names)}
        codes = np.fromiter(
            (-1 if v is None else code_of[v] for v in values), dtype=np.int64, count=len(values)
        )
        return cls(key, codes, names)


@dataclass(frozen=True, slots=True, eq=False)
class DomainChoice:
    """Where the gang may go: ``rows`` (a subset of the candidate rows, in their order).

    ``codes`` are the chosen domains (a node without the label is a domain of its own, code
    ``-1 - row``); ``single`` says whether they are one domain. Empty unless ``status`` is FITS.
    """

    status: TopologyStatus
    rows: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    codes: tuple[int, ...] = ()
    single: bool = False
    reason: str = ""

    def names(self, domains: DomainCodes) -> tuple[str, ...]:
        """The chosen domains' label values ("" for a node without the label)."""
        return tuple(domains.names[c] if c >= 0 else "" for c in self.codes)


def choose_domains(
    request: TopologyRequest,
    domains: DomainCodes,
    rows: IntArray,
    slots: IntArray,
    wanted: int | Sequence[int],
    *,
    capacity: IntArray | None = None,
    skip: Collection[int] = (),
) -> DomainChoice:
    """Choose the domain(s) for a gang among candidate ``rows``.

    ``slots`` holds, per candidate row, how many tasks it can take now: shape ``(n,)`` for one
    task group, or ``(groups, n)`` with ``wanted`` per group (a domain fits when it has room
    for every group; that is necessary, and the caller's placement decides). ``capacity``
    (same shape) is what the rows could take on an empty cluster: when given, a request that
    no domain could ever satisfy gets NEVER (so pass every row the job's labels allow, in
    any state, with 0 slots for those not up). ``skip`` lists domain codes already tried, so a
    caller whose placement failed in the chosen domain can ask for the next one.

    One domain: among those that fit, the one with the fewest free slots (best fit keeps big
    domains whole for big gangs), ties to the domain met first among ``rows``. Preferred mode
    with no single domain: the fewest domains, taking the largest ones and then the smallest
    that covers the rest.
    """
    rows = np.asarray(rows, dtype=np.int64)
    need = np.atleast_1d(np.asarray(wanted, dtype=np.int64))
    per_group = np.atleast_2d(np.asarray(slots, dtype=np.int64))
    if (need < 1).any():
        raise ValueError("a gang needs at least one task per group")
    if per_group.shape != (len(need), len(rows)):
        raise ValueError(f"slots {per_group.shape} do not match {len(need)} groups × {len(rows)}")
    codes = domains.codes[rows]
    codes = np.where(codes >= 0, codes, -1 - rows)  # an unlabelled node: a domain of its own
    uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    sums = _domain_sums(per_group, inverse, len(uniq))
    fits = (sums >= need[:, None]).all(axis=0)
    tried = np.isin(uniq, np.fromiter(skip, dtype=np.int64, count=len(skip)))
    single = fits & ~tried
    total = sums.sum(axis=0)
    if single.any():
        pick = np.flatnonzero(single)
        best = pick[np.lexsort((first[pick], total[pick]))[0]]
        return DomainChoice(
            TopologyStatus.FITS, rows[inverse == best], (int(uniq[best]),), single=True
        )
    if capacity is not None:
        caps = _domain_sums(np.atleast_2d(np.asarray(capacity, np.int64)), inverse, len(uniq))
        never = _never(request, caps, need)
        if never:
            return DomainChoice(TopologyStatus.NEVER, reason=never)
    if request.mode is TopologyMode.REQUIRED:
        return DomainChoice(
            TopologyStatus.WAIT, reason=f"no single {request.key} domain has room now"
        )
    if not (sums.sum(axis=1) >= need).all():
        return DomainChoice(TopologyStatus.WAIT, reason="not enough room in all domains now")
    chosen = _fewest_domains(sums, total, first, need)
    return DomainChoice(
        TopologyStatus.FITS,
        rows[np.isin(inverse, chosen)],
        tuple(int(uniq[k]) for k in chosen),
        single=len(chosen) == 1,
    )


def _never(request: TopologyRequest, caps: IntArray, need: IntArray) -> str:
    """Why the gang could not be placed even on an empty cluster ("" if it could), from
    the per-group, per-domain capacity ``caps``."""
    if request.mode is TopologyMode.PREFERRED:
        if (caps.sum(axis=1) >= need).all():
            return ""
        return f"the candidate nodes hold at most {int(caps.sum())} of {int(need.sum())} tasks"
    if (caps >= need[:, None]).all(axis=0).any():
        return ""
    largest = int(caps.sum(axis=0).max()) if caps.size else 0
    return (
        f"no {request.key} domain can hold {int(need.sum())} tasks even when empty "
        f"(the largest holds {largest})"
    )


def _domain_sums(per_group: IntArray, inverse: IntArray, count: int) -> IntArray:
    """Per group and domain, the summed slots: ``(groups, domains)``."""
    out = np.zeros((len(per_group), count), dtype=np.int64)
    for g, row_slots in enumerate(per_group):
        out[g] = np.bincount(inverse, weights=row_slots, minlength=count).astype(np.int64)
    return out


def _fewest_domains(sums: IntArray, total: IntArray, first: IntArray, need: IntArray) -> list[int]:
    """Domains (positions in the domain list) covering ``need``: the largest first until one more
    would do, then the smallest domain left that covers the remainder."""
    order = np.lexsort((first, -total))
    covered = np.cumsum(sums[:, order], axis=1) >= need[:, None]
    count = int(np.flatnonzero(covered.all(axis=0))[0]) + 1  # domains needed
    head = order[: count - 1]
    rest = np.maximum(need - sums[:, head].sum(axis=1), 0)
    tail = order[count - 1 :]
    cover = tail[(sums[:, tail] >= rest[:, None]).all(axis=0)]
    last = cover[np.lexsort((first[cover], total[cover]))[0]]
    return [int(k) for k in head] + [int(last)]
