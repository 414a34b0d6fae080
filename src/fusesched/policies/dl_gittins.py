"""``gittins``: fusesched's DL policy — an online-learned Gittins index on 2D attained service.

Durations of DL jobs are unknown, but their *distribution* can be learned as the cluster runs.
For a job that has attained ``a`` GPU-seconds, the Gittins index is the best achievable rate of
finishing per unit of further service::

    G(a) = max over b > a of  P(a < S <= b) / E[min(S, b) - a ; S > a]

with S the (2D) service a job needs. Serving the highest index first minimises mean response
time in a single-server queue with unknown sizes (Gittins; Aalto, Ayesta and Righter); it
becomes LAS for heavy tails and FIFO for light ones, and it picks the right order between the
two without thresholds. Tiresias has a discretised, offline variant; here it is online:

* **learning without look-ahead**: S's survival function is a Kaplan-Meier estimate from the
  total service of the jobs that *finished before now* (events) and the attained service of the
  jobs still active (right-censored observations: a job that has run 10 GPU-hours so far needs
  at least that); it is refitted after every ``refit_fraction`` growth of the finished set;
* **table form**: S is evaluated on a log-spaced grid of service values, the index once per
  grid point (an O(m²) vector operation), and a job's index is read at the grid point just
  below its attained service;
* **fewer costly preemptions**: a running job's index is multiplied by ``keep_factor`` when
  compared with waiting jobs, so a waiting job must be clearly better to take its GPUs (each
  preemption costs a restart); the protocol only preempts at checkpoint boundaries anyway;
* **re-consolidation** (``consolidate``): a job that had to start on a spread placement (more
  nodes than it needs, so it runs slower) moves to a consolidated one at its next checkpoint
  boundary as soon as one is free, paying the restart cost once (the protocol runner carries
  the move out: :meth:`fusesched.sim.dl.runner._Run.plan_moves`);
* **cold start**: until ``min_samples`` jobs have finished, order by plain 2D-LAS; jobs
  beyond the largest service ever observed (index 0) are ordered among themselves by LAS;
* **siblings** (``siblings``, the ``gittins-burst`` policy): jobs submitted in one *burst* —
  each within ``burst_gap_s`` of the previous submission, to the same virtual cluster and with
  the same GPU count, as a sweep of trials is — tend to need similar service (on the ITP traces
  a sibling's log service explains 58–83 % of a job's). Once a sibling has finished, a job that
  has not yet attained the median service of its finished siblings, Ŝ, is treated as one of
  that size: its index is the Gittins index of a known size, 1 / (Ŝ − attained) (at least one
  restart's worth of service left); beyond Ŝ the prediction was wrong and the class index
  applies again. A burst is formed from a job and the one submitted before it, so nothing is
  read before it arrives.

Ties go to the earlier arrival. The policy never reads a job's duration; only the attained
service at completion of jobs that have completed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fusesched.policies.dl_base import (
    RUNNING,
    DlView,
    FloatArray,
    IntArray,
    by_keys,
)

GRID_POINTS = 160
GRID_MIN = 1.0  # GPU-seconds
GRID_MAX = 1e10


def service_grid(points: int = GRID_POINTS) -> FloatArray:
    """0 followed by log-spaced service values (GPU-seconds)."""
    return np.concatenate([[0.0], np.geomspace(GRID_MIN, GRID_MAX, points - 1)])


def kaplan_meier(done: FloatArray, censored: FloatArray, grid: FloatArray) -> FloatArray:
    """Survival P(S > x) at each grid point from completed sizes and right-censored ones.

    At equal values completions are taken before censorings (the usual convention).
    """
    values = np.concatenate([done, censored])
    if len(values) == 0:
        return np.ones(len(grid))
    events = np.concatenate([np.ones(len(done)), np.zeros(len(censored))])
    order = np.lexsort((1.0 - events, values))
    values, events = values[order], events[order]
    at_risk = len(values) - np.arange(len(values), dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_factor = np.log1p(-events / at_risk)
    log_surv = np.cumsum(log_factor)
    # S(x) = product over completions with value <= x
    idx = np.searchsorted(values, grid, side="right") - 1
    surv = np.where(idx >= 0, np.exp(log_surv[np.maximum(idx, 0)]), 1.0)
    return np.asarray(surv, dtype=np.float64)


def gittins_table(grid: FloatArray, surv: FloatArray) -> FloatArray:
    """Gittins index at each grid point a, with quanta ending at later grid points b.

    numerator S(a) - S(b); denominator the integral of S from a to b (trapezoid rule on the
    grid). Both omit the common factor 1 / S(a). Points where nothing survives get 0.
    """
    steps = np.diff(grid) * (surv[1:] + surv[:-1]) / 2.0
    integral = np.concatenate([[0.0], np.cumsum(steps)])
    num = surv[:, None] - surv[None, :]
    den = integral[None, :] - integral[:, None]
    valid = np.triu(np.ones((len(grid), len(grid)), dtype=bool), k=1) & (den > 0)
    ratio = np.where(valid, num / np.where(valid, den, 1.0), 0.0)
    table = ratio.max(axis=1)
    table[surv <= 0] = 0.0
    return np.asarray(table, dtype=np.float64)


def gpu_bucket(gpus: IntArray) -> IntArray:
    """Size class of a job: 0 = 1 GPU, 1 = 2-4, 2 = 5-8, 3 = more than 8."""
    return np.searchsorted(np.array([1, 4, 8]), gpus, side="left").astype(np.int64)


BUCKETS = 4
#: A job predicted from its siblings is given at least this much service left per GPU (the
#: protocol's restart cost), so that a prediction about to run out does not dominate.
RESTART_FLOOR_S = 60.0


@dataclass
class GittinsPolicy:
    """Online Gittins index on 2D service, learned from finished and censored jobs.

    With ``by_class``, the service distribution is conditioned on what is known of a job at
    submission — its virtual cluster (``view.group``) and its GPU-count class — whenever that
    class has at least ``min_class_samples`` finished jobs; otherwise on the GPU-count class
    alone, otherwise on all jobs. With ``consolidate``, the protocol runner moves a job that runs
    on a spread placement to a consolidated one at its next checkpoint when one is free.
    """

    keep_factor: float = 1.5
    min_samples: int = 20
    min_class_samples: int = 50
    refit_fraction: float = 0.02
    by_class: bool = True
    consolidate: bool = True
    name: str = "gittins"
    preemptive: bool = True
    strict: bool = False
    siblings: bool = False
    burst_gap_s: float = 60.0
    refits: int = 0
    _burst: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _bursts_seen: int = 0  # jobs (in submit order) assigned a burst so far
    _burst_done: dict[int, list[float]] = field(default_factory=dict)
    _burst_size: FloatArray = field(default_factory=lambda: np.zeros(0))  # median, NaN if none
    _grid: FloatArray = field(default_factory=service_grid)
    _tables: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    _row_of_class: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _row_of_bucket: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _done: list[float] = field(default_factory=list)
    _done_class: list[int] = field(default_factory=list)
    _fitted_at: int = 0

    def __post_init__(self) -> None:
        if self.keep_factor < 1.0:
            raise ValueError("keep_factor must be at least 1")
        if self.min_samples < 1 or not 0 < self.refit_fraction < 1:
            raise ValueError("min_samples must be ≥ 1 and refit_fraction in (0, 1)")

    def _classes(self, view: DlView, jobs: IntArray) -> IntArray:
        return np.asarray(view.group[jobs] * BUCKETS + gpu_bucket(view.gpus[jobs]), np.int64)

    def finished(self, now: float, view: DlView, job: int) -> None:
        self._done.append(float(view.attained[job]))
        self._done_class.append(int(self._classes(view, np.array([job]))[0]))
        if self.siblings:
            self._assign_bursts(view, job)
            burst = int(self._burst[job])
            done = self._burst_done.setdefault(burst, [])
            done.append(float(view.attained[job]))
            if burst >= len(self._burst_size):
                grown = np.full(max(2 * len(self._burst_size), burst + 1), np.nan)
                grown[: len(self._burst_size)] = self._burst_size
                self._burst_size = grown
            self._burst_size[burst] = float(np.median(done))

    def _assign_bursts(self, view: DlView, upto: int) -> None:
        """Give jobs ``_bursts_seen`` … ``upto`` (arrived, in submit order) their burst."""
        if len(self._burst) == 0:
            self._burst = np.full(len(view.submit), -1, dtype=np.int64)
        for i in range(self._bursts_seen, upto + 1):
            same = (
                i > 0
                and view.submit[i] - view.submit[i - 1] <= self.burst_gap_s
                and view.gpus[i] == view.gpus[i - 1]
                and view.group[i] == view.group[i - 1]
            )
            self._burst[i] = self._burst[i - 1] if same else (self._burst[i - 1] + 1 if i else 0)
        self._bursts_seen = max(self._bursts_seen, upto + 1)

    def _sibling_index(self, view: DlView, jobs: IntArray, idx: FloatArray) -> FloatArray:
        """``idx`` with the index of a known size for jobs whose siblings have finished."""
        if len(jobs) == 0 or len(self._burst_size) == 0:
            return idx
        self._assign_bursts(view, int(jobs.max()))
        burst = self._burst[jobs]
        size = np.full(len(jobs), np.nan)
        known = burst < len(self._burst_size)
        size[known] = self._burst_size[burst[known]]
        left = size - view.attained[jobs]
        use = np.isfinite(left) & (left > 0)
        floor = RESTART_FLOOR_S * view.gpus[jobs].astype(np.float64)
        out: FloatArray = np.where(use, 1.0 / np.maximum(np.where(use, left, 1.0), floor), idx)
        return out

    def index(self, view: DlView, jobs: IntArray) -> FloatArray:
        """The current Gittins index of ``jobs`` at their attained service."""
        if len(self._tables) == 0:
            return np.zeros(len(jobs))
        at = np.searchsorted(self._grid, view.attained[jobs], side="right") - 1
        at = np.clip(at, 0, len(self._grid) - 1)
        classes = self._classes(view, jobs)
        known = classes < len(self._row_of_class)
        row = np.where(known, self._row_of_class[np.where(known, classes, 0)], -1)
        by_bucket = self._row_of_bucket[classes % BUCKETS]
        row = np.where(row >= 0, row, np.where(by_bucket >= 0, by_bucket, 0))
        return np.asarray(self._tables[row, at], dtype=np.float64)

    def refit(self, view: DlView, active: IntArray) -> None:
        done = np.asarray(self._done, dtype=np.float64)
        done_class = np.asarray(self._done_class, dtype=np.int64)
        censored = view.attained[active]
        keep = censored > 0
        cens, cens_class = censored[keep], self._classes(view, active[keep])
        tables = [gittins_table(self._grid, kaplan_meier(done, cens, self._grid))]
        n_classes = (int(view.group.max()) + 1) * BUCKETS
        self._row_of_class = np.full(n_classes, -1, dtype=np.int64)
        self._row_of_bucket = np.full(BUCKETS, -1, dtype=np.int64)
        if self.by_class:
            for bucket in range(BUCKETS):
                sel, csel = done_class % BUCKETS == bucket, cens_class % BUCKETS == bucket
                if np.count_nonzero(sel) >= self.min_class_samples:
                    surv = kaplan_meier(done[sel], cens[csel], self._grid)
                    self._row_of_bucket[bucket] = len(tables)
                    tables.append(gittins_table(self._grid, surv))
            counts = np.bincount(done_class, minlength=n_classes)
            for cls in np.flatnonzero(counts >= self.min_class_samples).tolist():
                surv = kaplan_meier(done[done_class == cls], cens[cens_class == cls], self._grid)
                self._row_of_class[cls] = len(tables)
                tables.append(gittins_table(self._grid, surv))
        self._tables = np.stack(tables)
        self._fitted_at = len(self._done)
        self.refits += 1

    def order(self, now: float, view: DlView, active: IntArray) -> IntArray:
        attained = view.attained[active]
        if len(self._done) < self.min_samples:
            return by_keys(active, attained, view.submit[active])
        grown = len(self._done) - self._fitted_at
        if len(self._tables) == 0 or grown >= max(1.0, self.refit_fraction * len(self._done)):
            self.refit(view, active)
        idx = self.index(view, active)
        if self.siblings:
            idx = self._sibling_index(view, active, idx)
        idx = np.where(view.state[active] == RUNNING, idx * self.keep_factor, idx)
        return by_keys(active, -idx, attained, view.submit[active])
