"""Demand forecast per pool: additive Holt-Winters with a daily season, over fixed-width bins.

**What is forecast**: per pool, the nodes the pool needs — busy nodes plus the node-equivalents
of the waiting jobs — sampled by the shell at every control interval; each bin (default
10 min) keeps the largest sample seen in it. The forecaster sees only this history (what a
live controller has seen so far), never future jobs.

**Why Holt-Winters** (triple exponential smoothing, additive season): cluster demand is
dominated by a level that drifts (backlog, long jobs) and a daily rhythm (people submit in
working hours); Holt-Winters models exactly these, updates in O(1) per bin with no training
step, needs only a few days of history, is deterministic and is easy to explain and tune
(three smoothing factors). Gradient boosting would need features, a training set and
periodic refits for little gain at a horizon of one or two bins; ARIMA needs a refit as the
level shifts. The forecast is used as an **upper estimate**: the largest point forecast over
the look-ahead plus ``margin`` × the standard deviation of the recent one-step errors
(exponentially weighted), floored by the largest sample of the last bin (sliding), so a rising
edge is covered at once and a falling one is followed once it has lasted a bin.

During the first season the model is plain exponential smoothing; at its end the level is
set to the season's mean and the season terms to the deviations from it (the classic
initialisation), and the full model runs from then on.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DAY = 86400.0
#: ``RiseForecaster`` margins (error standard deviations) for the ``predictive`` policy: what to
#: wake ahead for and what to keep awake; chosen on development windows (docs/ENERGY.md)
RISE_WAKE_MARGIN = -1.0
RISE_KEEP_MARGIN = 0.0


@dataclass(frozen=True, slots=True)
class HoltWintersParams:
    alpha: float = 0.5  # level: demand moves fast (a big job arrives), so follow it quickly
    beta: float = 0.02  # trend: small, a trend over hours is rare and dangerous to extrapolate
    gamma: float = 0.2  # season: learn a day's shape over a few days
    season: int = 144  # bins per season (a day of 10-minute bins)
    error_decay: float = 0.05  # weight of the newest squared error in the error variance

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma", "error_decay"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        if self.season < 1:
            raise ValueError("season must be at least 1 bin")


class HoltWinters:
    """Incremental additive Holt-Winters: :meth:`update` one value per bin, then
    :meth:`forecast` the next bins."""

    def __init__(self, params: HoltWintersParams | None = None) -> None:
        self.params = params or HoltWintersParams()
        self.level = math.nan
        self.trend = 0.0
        self.season = np.zeros(self.params.season, dtype=np.float64)
        self.count = 0  # values seen
        self.error_var = 0.0
        self.last = math.nan

    def _season_at(self, step: int) -> float:
        """Season term of the bin ``step`` bins after the last one seen (1 = next)."""
        if self.count < self.params.season:
            return 0.0
        return float(self.season[(self.count - 1 + step) % self.params.season])

    def update(self, value: float) -> None:
        p = self.params
        if self.count:
            error = value - float(self.forecast(1)[0])
            self.error_var = (1 - p.error_decay) * self.error_var + p.error_decay * error * error
        if self.count < p.season:  # the first season: plain exponential smoothing, and keep it
            self.season[self.count] = value
            self.level = value if self.count == 0 else p.alpha * value + (1 - p.alpha) * self.level
            self.count += 1
            if self.count == p.season:  # initialise: level = its mean, season = deviations
                self.level = float(self.season.mean())
                self.season -= self.level
        else:
            slot = self.count % p.season
            season = self.season[slot]
            level = p.alpha * (value - season) + (1 - p.alpha) * (self.level + self.trend)
            self.trend = p.beta * (level - self.level) + (1 - p.beta) * self.trend
            self.level = level
            self.season[slot] = p.gamma * (value - level) + (1 - p.gamma) * season
            self.count += 1
        self.last = value

    def forecast(self, steps: int) -> npt.NDArray[np.float64]:
        """Point forecasts of the next ``steps`` bins (empty before any value)."""
        if self.count == 0:
            return np.zeros(0, dtype=np.float64)
        h = np.arange(1, steps + 1, dtype=np.float64)
        season = np.array([self._season_at(k) for k in range(1, steps + 1)], dtype=np.float64)
        out: npt.NDArray[np.float64] = self.level + h * self.trend + season
        return out

    @property
    def error_std(self) -> float:
        return math.sqrt(self.error_var)


def holt_winters(
    values: npt.ArrayLike, params: HoltWintersParams, steps: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Batch form: the one-step-ahead predictions of every value (NaN for the first) and the
    forecast of the ``steps`` bins after the last."""
    model = HoltWinters(params)
    series = np.asarray(values, dtype=np.float64)
    fitted = np.full(series.shape, np.nan)
    for i, v in enumerate(series.tolist()):
        if i:
            fitted[i] = float(model.forecast(1)[0])
        model.update(v)
    return fitted, model.forecast(steps)


class _BinnedForecaster:
    """Per-pool Holt-Winters models over bins of ``bin_s`` seconds with a season of
    ``season_s``: what :class:`DemandForecaster` and :class:`RiseForecaster` share."""

    def __init__(
        self, bin_s: float, season_s: float, margin: float, params: HoltWintersParams | None
    ) -> None:
        if bin_s <= 0 or season_s < bin_s:
            raise ValueError("bin_s must be positive and at most season_s")
        season = max(1, round(season_s / bin_s))
        base = params or HoltWintersParams()
        self.params = HoltWintersParams(base.alpha, base.beta, base.gamma, season, base.error_decay)
        self.bin_s = bin_s
        self.margin = margin
        self._models: dict[str, HoltWinters] = {}
        self._bins: dict[str, tuple[int, float]] = {}  # pool → (open bin, its value so far)

    def _model(self, pool: str) -> HoltWinters:
        model = self._models.get(pool)
        if model is None:
            model = self._models[pool] = HoltWinters(self.params)
        return model

    def _bin(
        self,
        pool: str,
        now: float,
        value: float,
        combine: Callable[[float, float], float],
        empty: Callable[[float], float],
    ) -> None:
        """Put ``value`` in the pool's bin at ``now``: ``combine``-d into the open bin if it is
        that one; else the open bin closes into the pool's model, followed by one ``empty(its
        value)`` for each bin without samples in between (at most a season), and this bin
        opens."""
        current = int(now // self.bin_s)
        model = self._model(pool)
        open_bin = self._bins.get(pool)
        if open_bin is None:
            self._bins[pool] = (current, value)
            return
        index, held = open_bin
        if current == index:
            self._bins[pool] = (index, combine(held, value))
            return
        model.update(held)
        for _ in range(min(current - index - 1, self.params.season)):
            model.update(empty(held))
        self._bins[pool] = (current, value)

    def _peak(self, pool: str, now: float, horizon_s: float) -> tuple[float, float] | None:
        """(the largest point forecast over the bins from ``now`` to ``now + horizon_s``, the
        open bin included; the model's error standard deviation); None before any bin has
        closed."""
        model = self._models.get(pool)
        open_bin = self._bins.get(pool)
        if model is None or model.count == 0 or open_bin is None:
            return None
        steps = max(1, int((now + horizon_s) // self.bin_s) - open_bin[0] + 1)
        return float(model.forecast(steps).max()), model.error_std


class DemandForecaster(_BinnedForecaster):
    """Per-pool demand forecast from samples ``(time, nodes needed)``, binned by maximum."""

    def __init__(
        self,
        bin_s: float = 600.0,
        season_s: float = DAY,
        margin: float = 1.0,
        params: HoltWintersParams | None = None,
    ) -> None:
        super().__init__(bin_s, season_s, margin, params)  # bins hold their maximum
        # pool → the samples of the last ``bin_s`` seconds (time, value), for the floor
        self._recent: dict[str, deque[tuple[float, float]]] = {}

    def observe(self, now: float, needed: dict[str, float]) -> None:
        """Record each pool's nodes needed at ``now`` (times must not go backwards)."""
        for pool, value in needed.items():
            recent = self._recent.setdefault(pool, deque())
            recent.append((now, value))
            while recent[0][0] <= now - self.bin_s:
                recent.popleft()
            # bins without samples: the demand stayed as it was
            self._bin(pool, now, value, max, lambda peak: peak)

    def upper(self, pool: str, now: float, horizon_s: float) -> float | None:
        """An upper estimate of the pool's nodes needed from ``now`` to ``now + horizon_s``:
        the largest point forecast over the bins that span touches (the open bin included) +
        ``margin`` × the error standard deviation, and at least the largest sample of the last
        ``bin_s`` seconds (a sliding window, so the floor does not drop at a bin boundary).
        None before any bin has closed."""
        peak = self._peak(pool, now, horizon_s)
        if peak is None:
            return None
        point, error_std = peak
        floor = max(v for _, v in self._recent[pool])
        return max(point + self.margin * error_std, floor)


class RiseForecaster(_BinnedForecaster):
    """Per-pool forecast of how much the nodes needed **rise** within a horizon: the arrivals
    a booted headroom must absorb while a suspended node wakes.

    From samples ``(time, nodes needed)`` each rise between consecutive samples (never a
    fall) is summed per bin; a Holt-Winters model with a daily season forecasts the bins'
    sums. :meth:`upper` scales the largest point forecast over the bins a horizon touches
    (+ ``margin`` × the error standard deviation, at least 0) to the horizon's length. The
    ``predictive`` policy wakes for the rise over the wake look-ahead with a negative margin
    (:data:`RISE_WAKE_MARGIN`: only the part of the arrivals the forecast is sure of, as an
    unused wake costs a boot and a shut-down) and keeps awake the rise over the keep look-ahead
    at the point forecast (:data:`RISE_KEEP_MARGIN`).
    """

    def __init__(
        self,
        bin_s: float = 600.0,
        season_s: float = DAY,
        margin: float = RISE_WAKE_MARGIN,
        params: HoltWintersParams | None = None,
    ) -> None:
        super().__init__(bin_s, season_s, margin, params)  # bins hold the rises summed
        self._last: dict[str, float] = {}  # pool → the last sample

    def observe(self, now: float, needed: dict[str, float]) -> None:
        """Record each pool's nodes needed at ``now`` (times must not go backwards)."""
        for pool, value in needed.items():
            previous = self._last.get(pool)
            self._last[pool] = value
            rise = 0.0 if previous is None else max(0.0, value - previous)
            # rises summed; bins without samples: nothing rose
            self._bin(pool, now, rise, operator.add, lambda _: 0.0)

    def upper(
        self, pool: str, now: float, horizon_s: float, margin: float | None = None
    ) -> float | None:
        """An upper estimate of the rise of the pool's nodes needed from ``now`` to
        ``now + horizon_s`` (``margin``: this one instead of the forecaster's); None before any
        bin has closed."""
        peak = self._peak(pool, now, horizon_s)
        if peak is None:
            return None
        point, error_std = peak
        spread = self.margin if margin is None else margin
        per_bin = max(0.0, point + spread * error_std)
        return per_bin * horizon_s / self.bin_s


class SurgeTracker:
    """Per pool, the largest **surge** seen recently: the most the nodes needed (busy +
    waiting) rose within any span of ``horizon_s`` (the wake look-ahead) over the last
    ``memory_days`` days.

    Not a forecast of the mean but a record of the worst case: a booted headroom of that size
    absorbs any burst of arrivals no larger than the largest seen, so the ``surge`` policy
    suspends idle nodes without making the next jobs wait for a boot. From samples ``(time,
    nodes needed)``: each sample's rise is its value minus the smallest sample of the
    ``horizon_s`` before it (a sliding minimum, amortised O(1)); the rises are kept as the
    largest per bin of ``bin_s`` in a ring of ``memory_days`` days, and :meth:`upper` is the
    largest of the ring. It is None until ``warm_s`` of samples have been seen (too little
    history to know the worst case: the policy suspends nothing).
    """

    def __init__(
        self, horizon_s: float, memory_days: int = 7, bin_s: float = 600.0, warm_s: float = DAY
    ) -> None:
        if horizon_s <= 0 or bin_s <= 0 or warm_s < 0:
            raise ValueError("horizon_s and bin_s must be positive, warm_s not negative")
        if memory_days < 1:
            raise ValueError("memory_days must be at least 1")
        self.horizon_s = horizon_s
        self.bin_s = bin_s
        self.warm_s = warm_s
        self.size = max(1, math.ceil(memory_days * DAY / bin_s))
        self._first: dict[str, float] = {}
        # pool → samples (time, value) of the last horizon_s, values increasing (sliding minimum)
        self._lows: dict[str, deque[tuple[float, float]]] = {}
        # pool → ring of (absolute bin index, -1: empty) and the largest rise in each bin
        self._bins: dict[str, npt.NDArray[np.int64]] = {}
        self._rises: dict[str, npt.NDArray[np.float64]] = {}

    def observe(self, now: float, needed: dict[str, float]) -> None:
        """Record each pool's nodes needed at ``now`` (times must not go backwards)."""
        current = int(now // self.bin_s)
        slot = current % self.size
        for pool, value in needed.items():
            self._first.setdefault(pool, now)
            lows = self._lows.setdefault(pool, deque())
            while lows and lows[-1][1] >= value:
                lows.pop()
            lows.append((now, value))
            while lows[0][0] < now - self.horizon_s:
                lows.popleft()
            rise = value - lows[0][1]
            bins = self._bins.get(pool)
            if bins is None:
                bins = self._bins[pool] = np.full(self.size, -1, np.int64)
                self._rises[pool] = np.zeros(self.size)
            rises = self._rises[pool]
            if bins[slot] != current:
                bins[slot] = current
                rises[slot] = rise
            elif rise > rises[slot]:
                rises[slot] = rise

    def upper(self, pool: str, now: float) -> float | None:
        """The largest rise within ``horizon_s`` of the pool's nodes needed over the last
        ``memory_days`` days; None before ``warm_s`` of samples."""
        first = self._first.get(pool)
        if first is None or now - first < self.warm_s:
            return None
        bins = self._bins[pool]
        kept = (bins >= 0) & (bins > int(now // self.bin_s) - self.size)
        return float(self._rises[pool][kept].max()) if kept.any() else 0.0
