"""The live controller's ``--power FILE`` settings (docs/ENERGY.md): parsed and checked here,
so that a bad file is a clear error naming the file and the field, never a traceback.

The policy's own rules are :class:`fusesched.power.saving.SavingConfig`; the rest (commands,
interval, forecast and surge settings) are the controller's (:mod:`fusesched.controller.power`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusesched.power.forecast import DAY
from fusesched.power.saving import SAVING_POLICIES, SavingConfig
from fusesched.yamlfile import read_yaml

#: settings of the pure policy (``SavingConfig``), then the controller's own
_SAVING_FIELDS = frozenset(
    {
        "idle_threshold_s",
        "max_suspends_per_min",
        "max_resumes_per_min",
        "resume_timeout_s",
        "default_min_warm",
        "min_warm",
        "exclude_nodes",
        "exclude_pools",
        "forecast_min_idle_s",
        "predictive_min_idle_s",
        "surge_min_idle_s",
    }
)
_FIELDS = _SAVING_FIELDS | {
    "policy",
    "interval_s",
    "suspend",
    "resume",
    "command_timeout_s",
    "wake_latency_s",
    "forecast_bin_s",
    "surge_memory_days",
    "surge_warm_s",
}


#: the most bins the surge tracker may keep per pool (a year of 10-minute bins is 52,704)
MAX_SURGE_BINS = 100_000
#: the policies that read the surge tracker
SURGE_POLICIES = frozenset({"surge", "surge-room"})


@dataclass(frozen=True)
class PowerConfig:
    """The ``--power FILE`` settings (docs/ENERGY.md)."""

    suspend: tuple[str, ...]
    resume: tuple[str, ...]
    policy: str = "idle-timeout"
    interval_s: float = 10.0
    command_timeout_s: float = 60.0
    saving: SavingConfig = field(default_factory=SavingConfig)
    wake_latency_s: float = 300.0  # how long a node takes to resume: the forecast's look-ahead
    forecast_bin_s: float = 600.0  # the forecast's resolution (Holt-Winters bins)
    surge_memory_days: int = 7  # surge: how many days of rises it remembers
    surge_warm_s: float = DAY  # surge: history needed before it suspends anything

    def __post_init__(self) -> None:
        times = [self.interval_s, self.forecast_bin_s, self.wake_latency_s]
        times += [self.command_timeout_s, self.surge_warm_s]
        if not all(math.isfinite(t) for t in times):
            raise ValueError(
                "interval_s, forecast_bin_s, wake_latency_s, command_timeout_s and surge_warm_s "
                "must be finite numbers"
            )
        if self.interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if not 1.0 <= self.forecast_bin_s <= DAY:
            raise ValueError("forecast_bin_s must be between 1 s and a day (86400 s)")
        if min(self.wake_latency_s, self.command_timeout_s, self.surge_warm_s) < 0:
            raise ValueError(
                "wake_latency_s, command_timeout_s and surge_warm_s must not be negative"
            )
        days = self.surge_memory_days
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 366:
            raise ValueError("surge_memory_days must be a whole number from 1 to 366")
        if self.policy in SURGE_POLICIES and days * DAY / self.forecast_bin_s > MAX_SURGE_BINS:
            raise ValueError(
                f"surge_memory_days × 86400 / forecast_bin_s must be at most {MAX_SURGE_BINS:,} "
                "bins (the surge tracker keeps one per bin): fewer days or wider bins"
            )

    @classmethod
    def parse(cls, data: object, source: str = "<power>") -> PowerConfig:
        """From the file's YAML data; ``ValueError`` naming the file and field otherwise."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a mapping of power-saving settings")
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            known = ", ".join(sorted(_FIELDS))
            raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {known}")
        commands = {}
        for key in ("suspend", "resume"):
            argv = data.get(key)
            if not isinstance(argv, list) or not argv:
                raise ValueError(f"{source}: {key} must be a command as a list of words (argv)")
            for k, word in enumerate(argv):
                if isinstance(word, bool):  # YAML reads a bare on, off, yes, no so
                    raise ValueError(
                        f"{source}: {key}[{k}] is the boolean {word} (YAML reads a bare on, off, "
                        'yes or no so): quote the word, e.g. "on"'
                    )
                if not isinstance(word, str):
                    raise ValueError(f'{source}: {key}[{k}] is {word!r}: quote it ("{word}")')
            commands[key] = tuple(argv)
        policy = str(data.get("policy", "idle-timeout"))
        if policy not in SAVING_POLICIES:
            raise ValueError(
                f"{source}: policy: unknown {policy!r}; choose from {', '.join(SAVING_POLICIES)}"
            )
        try:
            saving = SavingConfig(
                **{k: _value(k, v) for k, v in data.items() if k in _SAVING_FIELDS}
            )
            return cls(
                commands["suspend"],
                commands["resume"],
                policy,
                _number(data, "interval_s", 10.0),
                _number(data, "command_timeout_s", 60.0),
                saving,
                _number(data, "wake_latency_s", 300.0),
                _number(data, "forecast_bin_s", 600.0),
                data.get("surge_memory_days", 7),
                _number(data, "surge_warm_s", DAY),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: Path) -> PowerConfig:
        # a YamlFileError is a ValueError: its message names the file
        return cls.parse(read_yaml(path, "power configuration"), str(path))


def _number(data: Mapping[str, Any], key: str, default: float) -> float:
    return float(_value(key, data.get(key, default)))


def _value(key: str, value: Any) -> Any:
    if key in ("exclude_nodes", "exclude_pools"):
        if not isinstance(value, list):
            raise ValueError(f"{key} must be a list of names")
        return frozenset(str(v) for v in value)
    if key == "min_warm":
        if not isinstance(value, Mapping):
            raise ValueError("min_warm must map pools to node counts")
        # numbers as written: SavingConfig rejects a fractional reserve instead of rounding it
        return {str(k): _value(f"min_warm.{k}", v) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return value
