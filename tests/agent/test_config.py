"""The agent's YAML configuration: what it accepts and how it says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.agent.config import AgentConfig, ConfigError, load_config
from fusesched.agent.runtime import ProcessRuntime
from fusesched.cli.local import LocalCluster

GOOD = """\
name: gpu-7
address: 10.0.0.7
cpu: 16
memory: 64Gi
resources: {fpga: 1, rdma: "4"}
labels: {fusesched.io/pool: gpu}
fake_devices:
  - {index: 0, model: H200, memory_bytes: 150754820096}
  - {kind: nvidia.com/mig-1g.18gb, index: 1, uuid: MIG-1, mig_profile: 1g.18gb}
work_dir: /var/tmp/fs/work
image_cache_dir: /var/tmp/fs/images
memory_cgroup: false
container_binds:
  - {src: /data, dst: /data, read_only: false}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return path


def test_a_full_config_loads(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, GOOD))
    assert config.name == "gpu-7" and config.cpu == 16
    assert config.memory_bytes() == 64 * 1024**3
    assert config.fake_devices[1].mig_profile == "1g.18gb"
    assert config.container_binds[0].read_only is False
    runtime = ProcessRuntime.from_config(config)
    assert runtime.work_dir == Path("/var/tmp/fs/work")
    assert not runtime.memory_cgroups.available
    assert runtime.image_cache is not None
    assert runtime.image_cache.cache_dir == Path("/var/tmp/fs/images")


def test_empty_or_no_file_means_defaults(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path, "")) == AgentConfig()
    assert load_config(None) == AgentConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nmae: x\n", "nmae: Extra inputs are not permitted"),
        ("memory: lots\n", "memory: memory: cannot parse quantity 'lots'"),
        ("resources: {fpga: -1}\n", "resources: fpga: quantity must not be negative"),
        ("resources: {cpu: 4}\n", "set cpu with the top-level 'cpu' key"),
        ("cpu: 0\n", "cpu: Input should be greater than or equal to 1"),
        ("cpu_ids: [0, 0]\n", "cpu_ids: CPU ids must not repeat"),
        ("fake_devices: [{model: H200}]\n", "fake_devices.0.index: Field required"),
        ("container_binds: [{src: /a, dst: rel}]\n", "container_binds.0.dst: must be an absolute"),
        ("- just\n- a list\n", "expected a mapping of settings, got list"),
        ("name: [unclosed\n", ":2: not valid YAML: expected ',' or ']'"),
    ],
)
def test_errors_say_where_and_what(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value)


def test_a_missing_file(tmp_path: Path) -> None:
    missing = r"cannot read the agent configuration .*nope\.yaml: No such file"
    with pytest.raises(ConfigError, match=missing):
        load_config(tmp_path / "nope.yaml")


def test_a_binary_file_is_named(tmp_path: Path) -> None:
    binary = tmp_path / "agent.bin"
    binary.write_bytes(b"\xa5\x00\xff" * 100)
    message = f"cannot read the agent configuration {binary}: not UTF-8"
    with pytest.raises(ConfigError, match=message):
        load_config(binary)


def test_local_agents_on_one_machine_get_a_tmp_dir_each(tmp_path: Path) -> None:
    """``fusesched up --agents N``: each agent's tasks get their own TMPDIR (OpenMPI daemons of
    two "nodes" on one host otherwise race for the same session folders); one agent keeps the
    system's."""
    many = LocalCluster(tmp_path / "many", port=0, agents=2).agent_configs
    tmps = [c.tmp_dir for c in many]
    assert None not in tmps and len(set(tmps)) == 2
    assert all(str(t).startswith(str(tmp_path / "many")) for t in tmps)
    (one,) = LocalCluster(tmp_path / "one", port=0, agents=1).agent_configs
    assert one.tmp_dir is None


def test_a_configured_tmp_dir_is_split_between_local_agents(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(f"tmp_dir: {tmp_path / 'scratch'}\n")
    many = LocalCluster(tmp_path / "many", port=0, agents=2, agent_config=config).agent_configs
    assert len({c.tmp_dir for c in many}) == 2
    (one,) = LocalCluster(tmp_path / "one", port=0, agents=1, agent_config=config).agent_configs
    assert one.tmp_dir == tmp_path / "scratch"


def test_a_relative_tmp_dir_is_made_absolute_and_like_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rt = ProcessRuntime(tmp_path / "work", None, tmp_dir=Path("scratch"))
    try:
        assert rt._spawner.tmp_dir == tmp_path / "scratch"
        assert (tmp_path / "scratch").stat().st_mode & 0o7777 == 0o1777
    finally:
        rt.shutdown(grace_s=0.2)
