"""Predicted run times inside the core: predict at submission and again while a job waits,
learn at exit, correct overruns.

The core asks :class:`Predictions` for each new job's estimate (what backfilling reserves and
what shortest-first orders by) and tells it every job that ended on its own. When that teaches
the predictor something, the estimates of the user's jobs that have not started yet are
predicted again (:meth:`Predictions.repredict`): a waiting job's estimate is always what a fresh
prediction would give now, from the jobs finished so far (still no look-ahead). At each cycle
the core lets it correct running jobs that have outlived their prediction: the estimated end moves
later — to twice the time run so far, or straight to the job's request (start + walltime),
as the predictor says — and nothing is killed: the job runs until it exits or reaches its
walltime, as without prediction. Corrections are due at known times;
:meth:`Predictions.next_due` tells the shell when to run a cycle for them.
"""

from __future__ import annotations

import heapq

from fusesched.core.records import JobRecord
from fusesched.core.running import RunningSet
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase
from fusesched.policies.runtime_prediction import RuntimePredictor

#: Phases in which a job's run time says how long it really runs (not cut short by anyone).
LEARN_FROM = frozenset({JobPhase.COMPLETED, JobPhase.FAILED})

#: Phases of a job whose estimate is re-predicted when its user's history grows (not started).
WAITING = frozenset({JobPhase.PENDING, JobPhase.QUEUED})

#: How a prediction that turned out too short is corrected (see Predictions._corrected_end).
CORRECTIONS = ("request", "double")


class Predictions:
    """The predictor, and the running jobs whose estimate is a prediction below the request."""

    def __init__(
        self, predictor: RuntimePredictor, correction: str, default_estimate_s: float
    ) -> None:
        if correction not in CORRECTIONS:
            raise ValueError(f"unknown correction {correction!r}; choose from {CORRECTIONS}")
        self.predictor = predictor
        self.correction = correction
        self.default_estimate_s = default_estimate_s
        self._due: list[tuple[float, int, str]] = []  # (predicted end, start seq, job id)
        self._starts = 0
        self.corrected = 0  # predictions that turned out too short
        self.repredicted = 0  # waiting jobs whose estimate changed with their user's history
        # per user, the jobs not known to be over (waiting ones are re-predicted); a job that
        # ran is dropped when it ends, one cancelled before it started when its user's jobs
        # are next looked at
        self._by_user: dict[str, dict[str, JobRecord]] = {}

    def request(self, spec: JobSpec) -> float:
        return spec.walltime_s if spec.walltime_s is not None else self.default_estimate_s

    def estimate(self, spec: JobSpec) -> float:
        """The job's estimate now: the prediction, at most its request."""
        request = self.request(spec)
        return min(request, self.predictor.predict(spec, request))

    def watch(self, rec: JobRecord) -> None:
        """``rec`` is new: re-predict it while it waits (jobs of no known user learn nothing,
        so their estimate never changes)."""
        user = rec.spec.user
        if user:
            jobs = self._by_user.get(user)
            if jobs is None:
                jobs = self._by_user[user] = {}
            jobs[rec.id] = rec

    def repredict(self, user: str) -> list[JobRecord]:
        """Predict again the estimates of ``user``'s jobs that have not started (pending or
        queued); returns those whose estimate changed (their ``estimate`` and ``facts`` are
        updated; the caller moves them in the queue). Jobs that are over are forgotten."""
        jobs = self._by_user.get(user)
        if not jobs:
            return []
        changed: list[JobRecord] = []
        over: list[str] = []
        for job_id, rec in jobs.items():
            phase = rec.phase
            if phase in WAITING:
                estimate = self.estimate(rec.spec)
                if estimate != rec.estimate:
                    rec.estimate = estimate
                    rec.facts = rec.facts._replace(estimate=estimate)
                    changed.append(rec)
            elif phase.terminal:
                over.append(job_id)
        for job_id in over:
            del jobs[job_id]
        if not jobs:
            del self._by_user[user]
        self.repredicted += len(changed)
        return changed

    def started(self, rec: JobRecord) -> None:
        """``rec`` was bound; watch its predicted end if the request lies beyond it."""
        assert rec.start_time is not None and rec.est_end is not None
        if rec.start_time + self.request(rec.spec) > rec.est_end:
            self._starts += 1
            heapq.heappush(self._due, (rec.est_end, self._starts, rec.id))

    def ended(self, rec: JobRecord) -> bool:
        """``rec`` left the running set; learn its run time if it ended on its own (a job
        stopped at its walltime needed at least that: learned as its request). Returns
        whether something was learned (then its user's waiting jobs are due a re-prediction,
        see :meth:`repredict`)."""
        jobs = self._by_user.get(rec.spec.user)
        if jobs is not None:
            jobs.pop(rec.id, None)  # over: never re-predicted again
        if rec.start_time is None or rec.end_time is None:
            return False
        if rec.phase in LEARN_FROM:
            self.predictor.observe(rec.spec, rec.end_time - rec.start_time)
        elif rec.phase is JobPhase.TIMEOUT:
            self.predictor.observe(rec.spec, self.request(rec.spec))
        else:
            return False
        return True

    def correct(self, jobs: dict[str, JobRecord], running: RunningSet, now: float) -> bool:
        """Move every running job whose predicted end has passed later (see
        :meth:`_corrected_end`).

        Returns whether any estimate changed (the head's reservation must be recomputed)."""
        due = self._due
        changed = False
        while due and due[0][0] <= now:
            end, _, job_id = heapq.heappop(due)
            rec = jobs.get(job_id)
            if rec is None or rec.phase is not JobPhase.RUNNING or rec.est_end != end:
                continue  # ended, or a newer run of a requeued job
            assert rec.start_time is not None
            new_end = self._corrected_end(rec, now)
            if new_end < rec.start_time + self.request(rec.spec):
                self._starts += 1
                heapq.heappush(due, (new_end, self._starts, job_id))  # may be wrong again
            rec.est_end = new_end
            rec.estimate = new_end - rec.start_time
            running.reestimate(job_id, new_end)
            self.corrected += 1
            changed = True
        return changed

    def _corrected_end(self, rec: JobRecord, now: float) -> float:
        """The new estimated end of a running job that outlived its prediction: its request's
        end (``request``), or twice the time it has run so far, at most the request's end
        (``double``; a doubling that would not pass ``now`` goes to the request's end)."""
        assert rec.start_time is not None
        request_end = rec.start_time + self.request(rec.spec)
        if self.correction == "request":
            return request_end
        doubled = rec.start_time + 2.0 * (now - rec.start_time)
        return doubled if now < doubled < request_end else request_end

    def next_due(self, jobs: dict[str, JobRecord]) -> float | None:
        """When the next correction is due (stale entries dropped), or None."""
        due = self._due
        while due:
            end, _, job_id = due[0]
            rec = jobs.get(job_id)
            if rec is not None and rec.phase is JobPhase.RUNNING and rec.est_end == end:
                return end
            heapq.heappop(due)
        return None
