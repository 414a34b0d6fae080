"""The node agent's configuration file (YAML), validated with pydantic.

Every field is optional; an empty file (or none at all) describes the machine as discovered.
Unknown keys are errors, so a typo never passes silently::

    name: gpu-node-7            # default: the host name
    address: 10.0.0.7           # how peers reach this node (MASTER_ADDR, mpirun)
    cpu: 16                     # advertise 16 CPUs instead of the discovered count
    memory: 64Gi
    resources: {fpga: 1, rdma: 4}
    labels: {fusesched.io/pool: gpu}
    fake_devices:               # pretend GPUs, for testing on GPU-less machines
      - {index: 0, model: H200, memory_bytes: 150754820096}
    work_dir: /var/lib/fusesched/work
    image_cache_dir: /var/lib/fusesched/images
    sample_interval_s: 10       # task samples and node health every 10 s (0: no sensing)
    health_check:               # as Slurm's HealthCheckProgram: exit 0 = healthy
      argv: [/usr/local/sbin/node-check, --quick]
      interval_s: 300
      timeout_s: 60
    data_cache:                 # node-local copies of jobs' datasets (agent/datasets.py)
      dir: /var/lib/fusesched/data
      capacity: 500Gi
      stager: rsync             # copy (default) or rsync
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fusesched.agent.users import UID_COUNT, UID_MIN
from fusesched.api.wire import DeviceInfo
from fusesched.model.resources import QuantityError, canonical_name, parse_quantity
from fusesched.yamlfile import YamlFileError, read_yaml

_DEFAULT_ROOT = Path(tempfile.gettempdir()) / "fusesched"


class ConfigError(ValueError):
    """The agent's configuration file cannot be read or is invalid (the message says where)."""


class BindMount(BaseModel):
    """A host path made visible inside every container task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    src: Path
    dst: str  # absolute path inside the container; must exist in the image (read-only root)
    read_only: bool = True

    @field_validator("dst")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path inside the container, not {value!r}")
        return value


class HealthCheckConfig(BaseModel):
    """The node's health-check program (an argv list, never a shell line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] = Field(min_length=1)
    interval_s: float = Field(default=300.0, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)


class PowerHookConfig(BaseModel):
    """How this node applies one kind of power cap (see docs/ENERGY.md): argv templates run
    before a capped task starts (``apply``) and after it ends (``reset``), never through a
    shell. Placeholders: ``{value}`` (the cap), ``{gpu}`` (one GPU index: the command runs once
    per GPU of the task), ``{gpus}`` and ``{cpus}`` (comma-separated lists), ``{task}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    apply: list[str] = Field(min_length=1)
    reset: list[str] | None = None
    timeout_s: float = Field(default=10.0, gt=0)


class DataCacheConfig(BaseModel):
    """The node-local dataset cache: a folder, its capacity, how datasets are copied in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path
    capacity: str | int  # bytes, or a quantity such as "50Gi"
    stager: Literal["copy", "rsync"] = "copy"

    @field_validator("dir")
    @classmethod
    def _dir(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError(f"must be an absolute path, not {str(value)!r}")
        if value == Path("/"):
            raise ValueError("must not be the root folder")
        return value

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, value: str | int) -> str | int:
        try:
            amount = parse_quantity("memory", value)
        except QuantityError as exc:
            raise ValueError(str(exc).removeprefix("memory: ")) from None
        if amount <= 0:
            raise ValueError(f"must be more than 0 bytes, not {value!r}")
        return value

    @field_validator("stager")
    @classmethod
    def _stager(cls, value: str) -> str:
        if value == "rsync" and shutil.which("rsync") is None:
            raise ValueError("rsync is not installed on this node; install it or use 'copy'")
        return value

    def capacity_bytes(self) -> int:
        return parse_quantity("memory", self.capacity)


class AgentConfig(BaseModel):
    """What a node agent advertises and where it keeps its files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None  # node name; default: the host name
    address: str | None = None  # default: the address of the interface with the default route
    cpu: int | None = Field(default=None, ge=1)  # override of the discovered logical CPU count
    cpu_ids: list[int] | None = None  # CPUs tasks may be pinned to; default: discovered
    memory: str | int | None = None  # override, e.g. "64Gi"
    resources: dict[str, str | int] = Field(default_factory=dict)  # extra, e.g. {fpga: 1}
    labels: dict[str, str] = Field(default_factory=dict)  # added to (and override) discovered
    fake_devices: list[DeviceInfo] = Field(default_factory=list)  # appended to NVML's devices
    nvml: bool = True  # probe NVIDIA GPUs through NVML
    work_dir: Path = _DEFAULT_ROOT / "work"  # per-task folders: logs, scripts
    image_cache_dir: Path = _DEFAULT_ROOT / "images"  # unpacked images, by content hash
    # TMPDIR of bare-metal tasks: a node-local /tmp (sticky and world-writable, like /tmp);
    # several agents on one machine each need their own, or MPI daemons of "different nodes"
    # race for the same session folders (``fusesched up --agents N`` gives each one). Made
    # sticky and world-writable if missing. Default: unset (the system's /tmp).
    tmp_dir: Path | None = None
    memory_cgroup: bool = True  # enforce memory limits with a cgroup v1 memory cgroup
    container_binds: list[BindMount] = Field(default_factory=list)  # e.g. GPU driver libraries
    # an agent running as root starts tasks under the job user's unprivileged uid (never root):
    run_as_users: bool = True
    uid_map: dict[str, int] = Field(default_factory=dict)  # user -> uid, ahead of accounts
    uid_min: int = Field(default=UID_MIN, ge=1)  # users without an account get a derived uid
    uid_count: int = Field(default=UID_COUNT, ge=1)
    sample_interval_s: float = Field(default=10.0, ge=0)  # task samples, node health; 0: off
    health_check: HealthCheckConfig | None = None
    # power caps of QoS tiers, by kind (gpu_watts: e.g. nvidia-smi -i {gpu} -pl {value})
    power_hooks: dict[str, PowerHookConfig] = Field(default_factory=dict)
    data_cache: DataCacheConfig | None = None  # node-local copies of jobs' datasets

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            parse_quantity("memory", value)
        return value

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for key, amount in value.items():
            name = canonical_name(key)
            if name in ("cpu", "memory"):
                raise ValueError(f"set {name} with the top-level '{name}' key, not in resources")
            parse_quantity(name, amount)
        return value

    @field_validator("cpu_ids")
    @classmethod
    def _cpu_ids(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            if any(cpu < 0 for cpu in value):
                raise ValueError("CPU ids must not be negative")
            if len(set(value)) != len(value):
                raise ValueError("CPU ids must not repeat")
        return value

    def memory_bytes(self) -> int | None:
        """The memory override in bytes, if any."""
        return None if self.memory is None else parse_quantity("memory", self.memory)


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def parse_config(data: Any, source: str = "<config>") -> AgentConfig:
    """Validate already-loaded YAML data; errors name the source and each bad field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"  {_location(err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        ]
        raise ConfigError(f"{source}: invalid agent configuration\n" + "\n".join(lines)) from None
    except QuantityError as exc:  # pragma: no cover - validators wrap these as ValueError
        raise ConfigError(f"{source}: {exc}") from None


def load_config(path: Path | str | None) -> AgentConfig:
    """Read the YAML configuration file at ``path`` (``None``: all defaults)."""
    if path is None:
        return AgentConfig()
    try:
        data = read_yaml(path, "agent configuration")
    except YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(data, str(path))
