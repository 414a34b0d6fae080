"""Holt-Winters demand forecast on synthetic seasonal series."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusesched.power.forecast import (
    DemandForecaster,
    HoltWinters,
    HoltWintersParams,
    holt_winters,
)

SEASON = 24


def seasonal(days: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    t = np.arange(days * SEASON)
    rng = np.random.default_rng(seed)
    return 50 + 0.01 * t + 20 * np.sin(2 * np.pi * t / SEASON) + noise * rng.normal(size=t.size)


def test_learns_the_season() -> None:
    series = seasonal(10)
    params = HoltWintersParams(alpha=0.3, beta=0.01, gamma=0.3, season=SEASON)
    fitted, ahead = holt_winters(series, params, SEASON)
    truth = (
        50
        + 0.01 * np.arange(10 * SEASON, 11 * SEASON)
        + 20 * np.sin(2 * np.pi * np.arange(10 * SEASON, 11 * SEASON) / SEASON)
    )
    assert np.abs(ahead - truth).max() < 2.0  # a day ahead, within 2 of a 40-wide swing
    # one-step errors in the last day are small, far below a naive "no season" forecast
    err = np.abs(fitted[-SEASON:] - series[-SEASON:]).mean()
    naive = np.abs(np.diff(series)[-SEASON:]).mean()
    assert err < naive / 3
    assert math.isnan(fitted[0])


def test_deterministic_and_incremental_equals_batch() -> None:
    series = seasonal(5, noise=3.0, seed=4)
    params = HoltWintersParams(season=SEASON)
    model = HoltWinters(params)
    for v in series.tolist():
        model.update(v)
    _, ahead = holt_winters(series, params, 6)
    assert model.forecast(6).tolist() == ahead.tolist()
    assert holt_winters(series, params, 6)[1].tolist() == ahead.tolist()


def test_empty_model_and_bad_params() -> None:
    assert HoltWinters().forecast(3).size == 0
    with pytest.raises(ValueError):
        HoltWintersParams(alpha=1.5)
    with pytest.raises(ValueError):
        HoltWintersParams(season=0)
    with pytest.raises(ValueError):
        DemandForecaster(bin_s=0)


def test_demand_forecaster_bins_by_max_and_anticipates_the_daily_peak() -> None:
    bin_s = 3600.0
    f = DemandForecaster(bin_s=bin_s, season_s=24 * bin_s, margin=0.0)
    assert f.upper("p", 0.0, 600) is None
    # five days: 10 nodes needed, 40 from 09:00 to 17:00, sampled every 10 min
    for day in range(5):
        for k in range(24 * 6):
            t = day * 86400 + k * 600
            hour = (t % 86400) / 3600
            f.observe(t, {"p": 40.0 if 9 <= hour < 17 else 10.0})
    # now 08:10 on day 6 (last sample 08:00 is 10): the forecast for the next hour says 40
    f.observe(5 * 86400 + 8 * 3600, {"p": 10.0})
    f.observe(5 * 86400 + 8 * 3600 + 600, {"p": 10.0})
    up = f.upper("p", 5 * 86400 + 8 * 3600 + 600, 3600)
    assert up is not None and up > 30
    # at 20:00 the next hour is quiet again
    g = DemandForecaster(bin_s=bin_s, season_s=24 * bin_s, margin=0.0)
    for day in range(5):
        for k in range(24 * 6):
            t = day * 86400 + k * 600
            hour = (t % 86400) / 3600
            g.observe(t, {"p": 40.0 if 9 <= hour < 17 else 10.0})
    for k in range(20 * 6 + 1):
        t = 5 * 86400 + k * 600
        hour = (t % 86400) / 3600
        g.observe(t, {"p": 40.0 if 9 <= hour < 17 else 10.0})
    quiet = g.upper("p", 5 * 86400 + 20 * 3600, 3600)
    assert quiet is not None and quiet < 15


def test_margin_adds_error_spread() -> None:
    a = DemandForecaster(bin_s=60, season_s=600, margin=0.0)
    b = DemandForecaster(bin_s=60, season_s=600, margin=2.0)
    rng = np.random.default_rng(1)
    for k, v in enumerate((10 + 5 * rng.random(100)).tolist()):
        a.observe(k * 60.0, {"p": v})
        b.observe(k * 60.0, {"p": v})
    ua, ub = a.upper("p", 6000.0, 60), b.upper("p", 6000.0, 60)
    assert ua is not None and ub is not None and ub > ua
