"""Which waiting jobs' stored reasons are the core's to write (:mod:`~fusesched.core.
pending_reasons`: ``Resources``, ``Priority``…), so that the controller writes a reason
only when it changed, clears it when the core no longer explains the job, and leaves
alone the reasons written otherwise (a hold, a begin time) until the core explains the
job again. Kept by :class:`~fusesched.controller.persist.Persistence`, which writes the
changes."""

from __future__ import annotations

from collections.abc import Mapping

from fusesched.store.records import JobChange


class WaitReasons:
    """The reasons last written from the core's explanation, by job (a job's entry goes
    when anything else writes its reason); why the waiting jobs that were requeued were
    (said after the core's reason until they start); and the waiting jobs recovered after a
    restart with a reason the core gave them (theirs too is cleared when they start)."""

    def __init__(self) -> None:
        self._shown: dict[str, str] = {}
        self._requeued: dict[str, str] = {}
        self._recovered: set[str] = set()

    def changes(self, reasons: Mapping[str, str]) -> list[JobChange]:
        """The reason changes to write for the core's ``reasons`` (by job) now: those that
        changed since the last call, and a clear (or the requeue's reason alone) for those
        it no longer explains. A requeued job's reason follows the core's
        (``Resources; requeued (preempted for job 12 …)``) until it starts."""
        said = dict(reasons)
        for job_id, why in self._requeued.items():
            if job_id in said:
                said[job_id] = f"{said[job_id]}; {why}" if said[job_id] else why
        out = [
            JobChange(job_id, reason=reason)
            for job_id, reason in said.items()
            if self._shown.get(job_id) != reason
        ]
        out.extend(
            JobChange(job_id, reason=self._requeued.get(job_id, ""))
            for job_id in self._shown.keys() - said.keys()
        )
        self._shown = said
        return out

    def requeued(self, job_id: str, reason: str) -> None:
        """``job_id`` waits again, requeued for ``reason`` (its reason is written as that)."""
        self._shown.pop(job_id, None)
        # (said after the core's reason once back in the queue: its back-off is over then)
        self._requeued[job_id] = reason.partition("; eligible at ")[0]

    def recovered(self, job_id: str) -> None:
        """A waiting job recovered after a restart with a reason the core gave it."""
        self._recovered.add(job_id)

    def forget(self, job_id: str) -> bool:
        """Forget what was written of ``job_id`` from the core and why it was requeued (its
        reason is written otherwise now); True if some was (or a recovered job came with
        some)."""
        self._requeued.pop(job_id, None)
        recovered = job_id in self._recovered
        self._recovered.discard(job_id)
        return self._shown.pop(job_id, None) is not None or recovered
