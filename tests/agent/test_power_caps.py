"""Power caps of QoS tiers: the node's hooks run as argv templates, per GPU, and are reset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fusesched.agent.config import AgentConfig, PowerHookConfig
from fusesched.agent.power_caps import PowerCaps
from fusesched.api.wire import TaskLaunch
from fusesched.model.tenancy import QoSTier, TenancyError

RECORD = "import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')"


def hook(path: Path, *words: str) -> list[str]:
    return [sys.executable, "-c", RECORD, str(path), *words]


def launch(**caps: float) -> TaskLaunch:
    return TaskLaunch(
        task_id="7.main.0",
        job_id="7",
        argv=["true"],
        gpu_indices=[0, 2],
        cpu_ids=[4, 5],
        power_cap=caps,
    )


def test_apply_runs_once_per_gpu_and_reset_after(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    caps = PowerCaps(
        {
            "gpu_watts": PowerHookConfig(
                apply=hook(calls, "pl", "-i", "{gpu}", "{value}"),
                reset=hook(calls, "reset", "-i", "{gpu}"),
            ),
            "cpu_mhz": PowerHookConfig(apply=hook(calls, "freq", "{cpus}", "{value}MHz")),
        }
    )
    assert caps.apply(launch(gpu_watts=250, cpu_mhz=1800.0)) == []
    assert sorted(calls.read_text().splitlines()) == [
        "freq 4,5 1800MHz",
        "pl -i 0 250",
        "pl -i 2 250",
    ]
    calls.unlink()
    assert caps.reset(launch(gpu_watts=250, cpu_mhz=1800.0)) == []
    assert sorted(calls.read_text().splitlines()) == ["reset -i 0", "reset -i 2"]  # no cpu reset


def test_no_cap_or_no_hook_runs_nothing(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    caps = PowerCaps({"gpu_watts": PowerHookConfig(apply=hook(calls, "{value}"))})
    assert caps.apply(launch()) == []
    assert PowerCaps({}).apply(launch(gpu_watts=100)) == []
    assert not calls.exists()


def test_a_failing_hook_is_a_note_not_a_failure(tmp_path: Path) -> None:
    caps = PowerCaps(
        {
            "gpu_watts": PowerHookConfig(apply=[sys.executable, "-c", "import sys; sys.exit(3)"]),
            "cpu_mhz": PowerHookConfig(apply=["/nonexistent/cpupower", "{value}"]),
        }
    )
    notes = caps.apply(launch(gpu_watts=100, cpu_mhz=2000))
    assert len(notes) == 2  # once each: neither template names {gpu}
    assert any("exited 3" in n for n in notes) and any("/nonexistent" in n for n in notes)


def test_metacharacters_stay_literal(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    caps = PowerCaps({"gpu_watts": PowerHookConfig(apply=hook(calls, "$(id)", "{value};ls"))})
    caps.apply(launch(gpu_watts=1))
    assert calls.read_text().splitlines() == ["$(id) 1;ls"]


def test_config_and_tier_validation() -> None:
    config = AgentConfig.model_validate(
        {"power_hooks": {"gpu_watts": {"apply": ["nvidia-smi", "-i", "{gpu}", "-pl", "{value}"]}}}
    )
    assert config.power_hooks["gpu_watts"].apply[-1] == "{value}"
    assert QoSTier("eco", 5, power_cap={"gpu_watts": 200}).power_cap["gpu_watts"] == 200
    with pytest.raises(TenancyError, match="unknown power_cap 'gpu_amps'"):
        QoSTier("eco", 5, power_cap={"gpu_amps": 2})
    with pytest.raises(TenancyError, match="must be a positive number"):
        QoSTier("eco", 5, power_cap={"gpu_watts": 0})


def test_hooks_run_together_so_the_agent_waits_one_timeout(tmp_path: Path) -> None:
    import time

    slow = [sys.executable, "-c", "import time; time.sleep(5)", "{gpu}"]
    caps = PowerCaps({"gpu_watts": PowerHookConfig(apply=slow, timeout_s=0.5)})
    many = TaskLaunch(task_id="7.main.0", job_id="7", argv=["true"], gpu_indices=list(range(8)))
    many = many.model_copy(update={"power_cap": {"gpu_watts": 100.0}})
    began = time.monotonic()
    notes = caps.apply(many)
    assert len(notes) == 8 and all("timed out after 0.5 s" in n for n in notes)
    assert time.monotonic() - began < 3.0  # not 8 x 0.5 s one after another (nor 8 x 5 s)


def test_a_batch_script_caps_every_gpu_it_sees(tmp_path: Path) -> None:
    """A batch script sees all of its job's GPUs on its node (BATCH_GPUS_ENV), not only its
    own task's: a tier's cap holds for each of them ({gpu} and {gpus})."""
    from fusesched.api.wire import BATCH_GPUS_ENV

    calls = tmp_path / "calls"
    caps = PowerCaps(
        {
            "gpu_watts": PowerHookConfig(apply=hook(calls, "pl", "-i", "{gpu}", "{value}")),
            "all": PowerHookConfig(apply=hook(calls, "all", "{gpus}")),
        }
    )
    script = launch(gpu_watts=200, all=1).model_copy(update={"env": {BATCH_GPUS_ENV: "0,1,2,3"}})
    assert caps.apply(script) == []
    assert sorted(calls.read_text().splitlines()) == [
        "all 0,1,2,3",
        "pl -i 0 200",
        "pl -i 1 200",
        "pl -i 2 200",
        "pl -i 3 200",
    ]
