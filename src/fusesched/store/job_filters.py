"""Which jobs a listing asks for: the filters of ``GET /v1/jobs`` (squeue's ``-u``, ``-p``,
``-t``, ``-j``, ``-n``; sacct's ``-S``/``-E``) as one typed object.

The route builds it from its query parameters (api/job_routes.py), and it goes unchanged
through :meth:`Persistence.list_jobs <fusesched.controller.persist.Persistence.list_jobs>`
and :meth:`Store.list_jobs <fusesched.store.store.Store.list_jobs>` /
:meth:`Store.list_job_rows <fusesched.store.store.Store.list_job_rows>` to the SQL that reads
it (:mod:`.job_list`, :mod:`.array_rows`): a new filter is a field here and a test there,
not a keyword in every layer. Paging (``limit``, ``before_seq``) and what a row shows
(``detail``, ``steps``, ``combine_arrays``) are not filters: they stay arguments.

Every filter left at ``None`` matches every job; the filters given all hold (AND), and a
collection matches any of its values (an empty one matches no job).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from fusesched.store.records import JobState

#: The fields that hold a collection of text values (normalised to a sorted tuple).
_TEXT_SETS: Final = ("users", "queues", "phases", "ids", "names", "also")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFilters:
    """The filters of a job listing. Collections are kept as sorted tuples without repeats
    (so that equal filters compare and hash equal, and build the same statement); one bare
    string for a collection is a :class:`TypeError` (it would match its characters), an
    unknown state a :class:`ValueError`."""

    users: Collection[str] | None = None
    """Any of these users' jobs (squeue ``-u a,b``, ``--me``)."""

    tenant: str | None = None
    """Only this tenant's jobs (a caller who is not a cluster-admin sees only its own)."""

    states: Collection[JobState | str] | None = None
    """Jobs in any of these states (``Pending``, ``Running``, …; squeue ``-t``). With
    ``phases`` or ``also``: a job in any of the states, or of the phases, or among ``also``."""

    queues: Collection[str] | None = None
    """Any of these queues' jobs (squeue ``-p``)."""

    array_parent: str | None = None
    """Only the members of this array (its id: ``1009``)."""

    phases: Collection[str] | None = None
    """Also the jobs in any of these phases (``timeout``, ``preempted``, ``held``…): the
    finer states that ``states`` cannot name (squeue ``-t TO``)."""

    ids: Collection[str] | None = None
    """These jobs, and the members of the arrays among them (squeue ``-j 5,6_2,7``)."""

    names: Collection[str] | None = None
    """Jobs with any of these names (squeue ``-n``)."""

    since: float | None = None
    """Jobs not ended before this Unix time: waiting or running at it or after (sacct
    ``-S``; see :mod:`~fusesched.store.job_window`)."""

    until: float | None = None
    """Jobs submitted by this Unix time (sacct ``-E``)."""

    also: Collection[str] | None = None
    """Also these jobs, to the state filter: those the controller shows in a state of its
    own, COMPLETING (squeue ``-t CG``). Alone, only these jobs."""

    def __post_init__(self) -> None:
        for name in _TEXT_SETS:
            given = getattr(self, name)
            if isinstance(given, str):
                raise TypeError(f"job filter {name}: a collection of values, not {given!r}")
            if given is not None:
                object.__setattr__(self, name, tuple(sorted(set(given))))
        if isinstance(self.states, str):
            raise TypeError(f"job filter states: a collection of states, not {self.states!r}")
        if self.states is not None:
            parsed = {JobState.parse(s) for s in self.states}  # (ValueError: which, and why)
            object.__setattr__(self, "states", tuple(sorted(parsed, key=lambda s: s.value)))


#: No filter: every job.
ALL_JOBS: Final = JobFilters()
