"""Tiresias-style discretised two-dimensional least-attained-service (2D-LAS).

After Tiresias (Gu et al., NSDI'19), written from the paper's description:

* a job's *attained service* is two-dimensional: GPUs × time it has run (GPU-seconds);
* there are K priority queues Q0 (highest) … Q(K-1), separated by K-1 thresholds on attained
  service; a job enters Q0 and is *demoted* to the next queue each time its service (counted
  since its last promotion) crosses a threshold;
* within a queue jobs are served first-come first-served (by arrival), so a job is not
  preempted by others of its own queue — only by a job in a higher queue;
* *starvation prevention*: a job that has run before and has now been waiting for at least
  ``promote_knob`` × its executed time is *promoted* back to Q0 (its service count restarts).

The rules are pure functions (:func:`queue_level`, :func:`should_promote`) so they can be
tested table by table; :class:`TiresiasPolicy` applies them to the DL protocol's job arrays.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fusesched.policies.dl_base import WAITING, DlView, FloatArray, IntArray, by_keys

#: Default thresholds (GPU-seconds): two queues split at 1 GPU-hour. Tiresias' paper finds two
#: queues sufficient on its trace; the threshold is a configuration choice (docs/DL_SCHEDULING.md).
DEFAULT_THRESHOLDS: tuple[float, ...] = (3600.0,)
DEFAULT_PROMOTE_KNOB = 8.0
#: Seven queues, thresholds ×4 apart from half a GPU-hour: the strongest setting of a small grid
#: tried on the development trace (docs/DL_SCHEDULING.md), registered as ``tiresias``.
MANY_QUEUES: tuple[float, ...] = tuple(1800.0 * 4**k for k in range(6))


def queue_level(service: float, thresholds: Sequence[float]) -> int:
    """The queue (0 = highest) of a job with ``service`` GPU-seconds since its last promotion.

    A job is demoted once its service *reaches* a threshold: thresholds (3600,) put 3599.9 in
    Q0 and 3600 in Q1.
    """
    if service < 0:
        raise ValueError("attained service cannot be negative")
    return int(np.searchsorted(np.asarray(thresholds, dtype=np.float64), service, side="right"))


def should_promote(waiting_s: float, executed_s: float, knob: float) -> bool:
    """Starvation prevention: promote a job that has waited ``knob`` × its executed time.

    A job that never ran (``executed_s == 0``) is already in the top queue and is not promoted.
    """
    return executed_s > 0 and waiting_s >= knob * executed_s


def check_thresholds(thresholds: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(t) for t in thresholds)
    if any(t <= 0 for t in values) or any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"queue thresholds must be positive and increasing: {values}")
    return values


@dataclass
class TiresiasPolicy:
    """Discretised 2D-LAS with K queues, FIFO within a queue, and starvation promotion.
    ``consolidate``: the protocol runner re-consolidates spread jobs at checkpoints, as for
    ``gittins`` (the ``tiresias-mig`` baseline)."""

    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    promote_knob: float = DEFAULT_PROMOTE_KNOB
    name: str = "tiresias"
    preemptive: bool = True
    strict: bool = False
    consolidate: bool = False
    promotions: int = 0
    # attained service at the job's last promotion (grown on demand to the workload's size)
    _base: FloatArray = field(default_factory=lambda: np.zeros(0))
    _edges: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        self.thresholds = check_thresholds(self.thresholds)
        if self.promote_knob <= 0:
            raise ValueError("promote_knob must be positive")
        self._edges = np.asarray(self.thresholds, dtype=np.float64)

    def levels(self, view: DlView, jobs: IntArray) -> IntArray:
        """Queue level of each of ``jobs`` (vector form of :func:`queue_level`)."""
        self._grow(len(view.submit))
        service = view.attained[jobs] - self._base[jobs]
        return np.searchsorted(self._edges, service, side="right").astype(np.int64)

    def order(self, now: float, view: DlView, active: IntArray) -> IntArray:
        self._grow(len(view.submit))
        if len(active) == 0:
            return active
        waiting = active[view.state[active] == WAITING]
        if len(waiting):
            starving = (view.executed[waiting] > 0) & (
                now - view.wait_since[waiting] >= self.promote_knob * view.executed[waiting]
            )
            promoted = waiting[starving]
            if len(promoted):
                already = self._base[promoted] == view.attained[promoted]
                self.promotions += int(np.count_nonzero(~already))
                self._base[promoted] = view.attained[promoted]
        return by_keys(active, self.levels(view, active), view.submit[active])

    def finished(self, now: float, view: DlView, job: int) -> None:
        return None

    def _grow(self, n: int) -> None:
        if len(self._base) < n:
            self._base = np.concatenate([self._base, np.zeros(n - len(self._base))])
