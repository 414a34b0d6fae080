"""Runtime predictors: how long a job will really run, learned from jobs that have finished.

Users' walltime requests are upper bounds, often loose by a factor of several, so a backfilling
scheduler that trusts them reserves too far ahead and lets little through. A predictor replaces
the request by a guess learned online — only from jobs that have *finished* before the moment
of the prediction (the core tells it each exit), never from the future — and the core corrects
a guess that turns out too short (see :mod:`fusesched.core.prediction`): the job is never
killed on a prediction, its reservation is extended to its request.

Every predictor is capped by the request (a job is stopped at its walltime anyway) and falls
back to the request while it knows nothing of the job's user. Registered by name in
:data:`RUNTIME_PREDICTORS`; ``none`` keeps the request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fusesched.model.job import JobSpec

__all__ = [
    "RUNTIME_PREDICTORS",
    "RuntimePredictor",
    "UserRecent",
    "make_predictor",
]

#: A prediction is never below this (seconds): a zero estimate would make every job "short".
MIN_PREDICTION_S = 1.0


class RuntimePredictor(Protocol):
    """Predicts a job's run time at submission; learns from each job that finished."""

    def predict(self, spec: JobSpec, request: float) -> float:
        """Seconds the job is expected to run; at most ``request``."""
        ...

    def observe(self, spec: JobSpec, runtime: float) -> None:
        """A job ran ``runtime`` seconds and ended on its own (not cancelled or preempted)."""
        ...


def _history_key(spec: JobSpec, by_name: bool) -> tuple[str, str]:
    return (spec.user, spec.name if by_name else "")


class UserRecent:
    """The mean run time of the user's last ``window`` finished jobs (Tsafrir, Etsion and
    Feitelson, "Backfilling using system-generated predictions rather than user runtime
    estimates", IEEE TPDS 2007, use the last two). With ``by_name`` the history is kept per
    user and job name (the application), falling back to the user's whole history."""

    def __init__(self, window: int = 2, by_name: bool = False) -> None:
        if window < 1:
            raise ValueError("the history window must hold at least one job")
        self.window = window
        self.by_name = by_name
        self._recent: dict[tuple[str, str], deque[float]] = {}

    def predict(self, spec: JobSpec, request: float) -> float:
        if not spec.user:
            return request  # an unknown user is nobody's history (SWF's -1)
        recent = self._recent.get(_history_key(spec, self.by_name))
        if recent is None and self.by_name:
            recent = self._recent.get((spec.user, ""))
        if not recent:
            return request
        guess = sum(recent) / len(recent)
        return max(MIN_PREDICTION_S, min(request, guess))

    def observe(self, spec: JobSpec, runtime: float) -> None:
        if not spec.user:
            return
        keys = [_history_key(spec, self.by_name)]
        if self.by_name:
            keys.append((spec.user, ""))
        for key in keys:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = deque(maxlen=self.window)
            recent.append(runtime)


@dataclass(frozen=True)
class PredictorEntry:
    description: str
    make: Callable[[], RuntimePredictor] | None  # None: the request itself
    correction: str = "double"  # see fusesched.core.prediction.CORRECTIONS


RUNTIME_PREDICTORS: Mapping[str, PredictorEntry] = {
    "none": PredictorEntry("the user's walltime request (or the default estimate)", None),
    "user-last2": PredictorEntry(
        "mean run time of the user's last two finished jobs, capped by the request "
        "(Tsafrir et al. 2007; the request until the user has history); a job that outlives "
        "it is re-estimated at twice its elapsed time, up to the request",
        lambda: UserRecent(2),
    ),
    "user-last2-request": PredictorEntry(
        "as user-last2, but a job that outlives its prediction is re-estimated at its "
        "request at once (Tsafrir et al.'s correction)",
        lambda: UserRecent(2),
        correction="request",
    ),
}


def make_predictor(name: str) -> RuntimePredictor | None:
    """A fresh predictor of the registered ``name`` (None for ``none``)."""
    entry = RUNTIME_PREDICTORS[name]
    return entry.make() if entry.make is not None else None
