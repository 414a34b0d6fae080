"""The live controller feeds the ``predictive`` policy its rise forecast (no processes)."""

from __future__ import annotations

from fusesched.controller.power import PowerConfig, PowerManager
from fusesched.power.saving import NodeView, PoolDemand, PowerState


def views(busy: int, total: int = 6) -> list[NodeView]:
    return [NodeView(f"n{i}", "gpu", PowerState.ON, busy=i < busy, since=0.0) for i in range(total)]


def config(policy: str) -> PowerConfig:
    return PowerConfig.parse(
        {
            "policy": policy,
            "suspend": ["true"],
            "resume": ["true"],
            "interval_s": 60,
            "forecast_bin_s": 600,
            "predictive_min_idle_s": 90,
        }
    )


def test_predictive_is_a_live_policy_with_its_own_threshold() -> None:
    cfg = config("predictive")
    assert cfg.policy == "predictive"
    assert cfg.saving.predictive_min_idle_s == 90


def test_the_controller_feeds_the_rise_forecast() -> None:
    manager = PowerManager(config("predictive"))
    t = 0.0
    demand: dict[str, PoolDemand] = {}
    out: dict[str, PoolDemand] = {}
    for step in range(30):  # one more busy node every other minute, over three bins
        out = manager._forecast(views(min(step // 2, 6)), demand, t)
        t += 60.0
    rise = out["gpu"]
    assert rise.forecast_nodes is None  # the level forecast is the forecast policy's
    assert rise.rise_nodes is not None and rise.rise_keep_nodes is not None
    assert rise.rise_keep_nodes >= rise.rise_nodes >= 0.0
    # idle-timeout gets no forecast at all
    plain = PowerManager(config("idle-timeout"))
    assert plain._forecast(views(2), demand, 0.0) == demand
