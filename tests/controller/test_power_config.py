"""The power-saving settings file (``--power FILE``): clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.controller.power import PowerConfig

GOOD = {
    "suspend": ["ipmitool", "-H", "{node}-bmc", "chassis", "power", "soft"],
    "resume": ["ipmitool", "-H", "{node}-bmc", "chassis", "power", "on"],
    "policy": "forecast",
    "idle_threshold_s": 600,
    "max_resumes_per_min": 20,
    "min_warm": {"gpu": 1},
    "exclude_nodes": ["login-1"],
}


def test_a_full_file_parses(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "power.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    config = PowerConfig.load(path)
    assert config.policy == "forecast" and config.suspend[2] == "{node}-bmc"
    assert config.saving.idle_threshold_s == 600 and config.saving.reserve("gpu") == 1
    assert "login-1" in config.saving.exclude_nodes


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"suspend": "ipmitool power soft"}, "suspend must be a command as a list of words"),
        ({"resume": []}, "resume must be a command"),
        ({"resume": ["ipmitool", "power", True]}, "resume[2] is the boolean True (YAML reads"),
        ({"suspend": ["sleep", 5]}, 'suspend[1] is 5: quote it ("5")'),
        ({"policy": "sometimes"}, "policy: unknown 'sometimes'; choose from"),
        ({"idle_treshold_s": 5}, "unknown setting(s) idle_treshold_s"),
        ({"idle_threshold_s": "soon"}, "idle_threshold_s must be a number"),
        ({"idle_threshold_s": -1}, "must not be negative"),
        ({"exclude_pools": "gpu"}, "exclude_pools must be a list"),
        ({"min_warm": [1]}, "min_warm must map pools to node counts"),
        ({"min_warm": {"gpu": 2.5}}, "warm reserves must be whole numbers"),
        ({"min_warm": {"gpu": "two"}}, "min_warm.gpu must be a number"),
        ({"min_warm": {"gpu": True}}, "min_warm.gpu must be a number"),
        ({"min_warm": {"gpu": -1}}, "must not be negative"),
    ],
)
def test_bad_settings_are_named(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        PowerConfig.parse(GOOD | change, "power.yaml")
    assert str(error.value).startswith("power.yaml: ") and message in str(error.value)


def test_unreadable_or_not_yaml(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the power configuration"):
        PowerConfig.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("suspend: [a\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        PowerConfig.load(bad)
    binary = tmp_path / "power.bin"
    binary.write_bytes(b"\xa5\x00\xff" * 100)
    with pytest.raises(ValueError, match=f"power configuration {binary}: not UTF-8 text"):
        PowerConfig.load(binary)


def test_a_whole_float_reserve_is_taken_as_a_count() -> None:
    config = PowerConfig.parse(GOOD | {"min_warm": {"gpu": 2.0}}, "power.yaml")
    assert config.saving.reserve("gpu") == 2 and isinstance(config.saving.reserve("gpu"), int)
