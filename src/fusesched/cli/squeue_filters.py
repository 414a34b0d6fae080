"""squeue's filters that ``GET /v1/jobs`` has no parameter for, applied to the jobs it
answers: ``-A/--account`` (the job's tenant), ``-q/--qos``, ``-w/--nodelist`` (a host list:
jobs that hold any of those nodes), ``-L/--licenses`` (jobs that hold any of those licenses)
and ``-R/--reservation``.

Account and QoS names are compared as Slurm compares them, case aside. A listing filtered
here reads more of the newest jobs (:data:`fusesched.cli.job_list.MAX_MEMBERS`) to find
those that match. Pure: the options in, a :class:`LocalFilters` that keeps or drops a view.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Job = dict[str, Any]


@dataclass(frozen=True)
class LocalFilters:
    """What a job must match (each empty set: anything); within a set, any value."""

    accounts: frozenset[str] = frozenset()  # lower case
    qos: frozenset[str] = frozenset()  # lower case
    nodes: frozenset[str] = frozenset()
    licenses: frozenset[str] = frozenset()
    reservations: frozenset[str] = frozenset()

    def active(self) -> bool:
        """Whether any filter is set."""
        return bool(self.accounts or self.qos or self.nodes or self.licenses or self.reservations)

    def keep(self, job: Job) -> bool:
        """Whether ``job`` (a view) matches every filter set."""
        if self.accounts and str(job.get("tenant") or "").lower() not in self.accounts:
            return False
        if self.qos and str(job.get("qos") or "").lower() not in self.qos:
            return False
        if self.nodes and not self.nodes.intersection(job.get("nodes") or ()):
            return False
        if self.licenses and not self.licenses.intersection(job.get("licenses") or {}):
            return False
        return not self.reservations or job.get("reservation") in self.reservations

    def unknown_reservations(self, jobs: Sequence[Job]) -> bool:
        """Whether ``-R`` is asked of views that do not say their reservation (a controller
        that does not show it): no job could match, and saying nothing would mislead."""
        return bool(self.reservations) and any("reservation" not in job for job in jobs)


def _names(given: Iterable[str] | None, what: str) -> list[str]:
    from fusesched.cli.id_lists import comma_list

    return comma_list(given, what)


def _hosts(given: Iterable[str] | None) -> frozenset[str]:
    """``-w n[1-4],gpu1``: the nodes named (``localhost``: this host, as Slurm's); a
    ``ValueError`` for a host list that cannot be read."""
    from fusesched.hostlist import expand_hostlist

    found: set[str] = set()
    for text in given or ():
        if not text.strip():
            raise ValueError("an empty --nodelist names no node")
        try:
            hosts = expand_hostlist(text)
        except ValueError as exc:
            raise ValueError(f"--nodelist: {exc}") from None
        here = socket.gethostname()
        found.update(here if host == "localhost" else host for host in hosts)
    return frozenset(found)


def parse(
    accounts: Iterable[str] | None = None,
    qos: Iterable[str] | None = None,
    nodelist: Iterable[str] | None = None,
    licenses: Iterable[str] | None = None,
    reservations: Iterable[str] | None = None,
) -> LocalFilters:
    """The filters from squeue's options (each may be given again, each a comma list;
    a license may be written ``name:count``, the count ignored); a ``ValueError`` for an
    empty name or a bad host list."""
    return LocalFilters(
        accounts=frozenset(a.lower() for a in _names(accounts, "account")),
        qos=frozenset(q.lower() for q in _names(qos, "QoS")),
        nodes=_hosts(nodelist),
        licenses=frozenset(n.partition(":")[0] for n in _names(licenses, "license")),
        reservations=frozenset(_names(reservations, "reservation")),
    )
