"""Reference DL scheduling policies: FIFO, oracle shortest-remaining-service, plain 2D-LAS.

* ``fifo`` — first come first served, non-preemptive, strict: nothing overtakes the oldest
  waiting job (the YARN capacity-scheduler baseline of the Tiresias paper).
* ``sjf-oracle`` — the upper-bound reference: preemptive, smallest *remaining* 2D service
  first (GPUs × remaining run time), computed from the trace's true durations, which only this
  policy is given. Preemption obeys the same checkpoint and restart model as everyone else.
* ``las`` — continuous 2D-LAS (least attained GPU-seconds first, ties by arrival), preemptive;
  the undiscretised form of Tiresias' rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusesched.policies.dl_base import DlView, FloatArray, IntArray, by_keys


@dataclass
class FifoPolicy:
    name: str = "fifo"
    preemptive: bool = False
    strict: bool = True

    def order(self, now: float, view: DlView, active: IntArray) -> IntArray:
        return by_keys(active, view.submit[active])

    def finished(self, now: float, view: DlView, job: int) -> None:
        return None


@dataclass
class LasPolicy:
    name: str = "las"
    preemptive: bool = True
    strict: bool = False

    def order(self, now: float, view: DlView, active: IntArray) -> IntArray:
        return by_keys(active, view.attained[active], view.submit[active])

    def finished(self, now: float, view: DlView, job: int) -> None:
        return None


@dataclass
class OracleSrtfPolicy:
    """Shortest remaining 2D service first, from the true durations (upper bound only)."""

    durations: FloatArray  # seconds of run time per job: the oracle
    name: str = "sjf-oracle"
    preemptive: bool = True
    strict: bool = False

    def order(self, now: float, view: DlView, active: IntArray) -> IntArray:
        gpus = view.gpus[active].astype(np.float64)
        remaining = self.durations[active] * gpus - view.attained[active]
        return by_keys(active, remaining, view.submit[active])

    def finished(self, now: float, view: DlView, job: int) -> None:
        return None
