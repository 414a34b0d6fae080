"""Discovery: psutil facts, NVML through a fake pynvml module, and config overrides."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from fusesched.agent.config import AgentConfig
from fusesched.agent.discovery import discover, kubernetes_arch
from fusesched.agent.gpus import discover_gpus, mig_profile, model_name
from fusesched.api.wire import DeviceInfo

GIB = 1024**3
H200_BYTES = 150_754_820_096  # 140.4 GiB, as NVML reports an H200
A100_BYTES = 42_949_672_960  # 40 GiB


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    name: str
    uuid: str
    memory: int
    mig: list[tuple[str, int, int, int]] | None = None  # (uuid, g slices, c slices, MB)
    handles: list[Any] = field(default_factory=list)


def fake_pynvml(gpus: list[FakeGpu], *, init_error: bool = False) -> SimpleNamespace:
    """Just the pynvml calls discovery makes, with pynvml's names and return shapes."""
    state = {"shutdown": 0}

    def init() -> None:
        if init_error:
            raise NVMLError("NVML Shared Library Not Found")

    def handle(index: int) -> Any:
        return ("gpu", index)

    def lookup(h: Any) -> Any:
        kind, index, *rest = h
        gpu = gpus[index]
        return gpu if kind == "gpu" else (gpu, (gpu.mig or [])[rest[0]])

    def memory_info(h: Any) -> Any:
        item = lookup(h)
        total = item.memory if h[0] == "gpu" else item[1][3] * 1024 * 1024
        return SimpleNamespace(total=total, free=total, used=0)

    def mig_mode(h: Any) -> tuple[int, int]:
        gpu = lookup(h)
        if gpu.mig is None:
            raise NVMLError("Not Supported")
        return (1, 1) if gpu.mig else (0, 0)

    def mig_handle(h: Any, slot: int) -> Any:
        gpu = lookup(h)
        if slot >= len(gpu.mig):
            raise NVMLError("Not Found")
        return ("mig", h[1], slot)

    def attributes(h: Any) -> Any:
        _, (_, g, c, mb) = lookup(h)
        return SimpleNamespace(
            gpuInstanceSliceCount=g, computeInstanceSliceCount=c, memorySizeMB=mb
        )

    def uuid(h: Any) -> str:
        item = lookup(h)
        return str(item.uuid if h[0] == "gpu" else item[1][0])

    def shutdown() -> None:
        state["shutdown"] += 1

    return SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=init,
        nvmlShutdown=shutdown,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: lookup(h).name.encode(),  # old pynvml returns bytes
        nvmlDeviceGetUUID=uuid,
        nvmlDeviceGetMemoryInfo=memory_info,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetMaxMigDeviceCount=lambda h: 7,
        nvmlDeviceGetMigDeviceHandleByIndex=mig_handle,
        nvmlDeviceGetAttributes=attributes,
        state=state,
    )


def two_h200_one_in_mig_mode() -> SimpleNamespace:
    return fake_pynvml(
        [
            FakeGpu("NVIDIA H200", "GPU-aaaa", H200_BYTES, mig=[]),  # MIG-capable, MIG off
            FakeGpu(
                "NVIDIA H200",
                "GPU-bbbb",
                H200_BYTES,
                mig=[
                    ("MIG-1111", 1, 1, 16_384),
                    ("MIG-2222", 1, 1, 16_384),
                    ("MIG-3333", 3, 3, 69_632),
                ],
            ),
        ]
    )


def test_gpus_and_mig_instances() -> None:
    nvml = two_h200_one_in_mig_mode()
    inventory = discover(AgentConfig(name="n1", address="10.0.0.1"), nvml=nvml)
    assert nvml.state["shutdown"] == 1
    assert inventory.resources["nvidia.com/gpu"] == "1"
    assert inventory.resources["nvidia.com/mig-1g.18gb"] == "2"
    assert inventory.resources["nvidia.com/mig-3g.71gb"] == "1"
    assert inventory.labels["fusesched.io/gpu-model"] == "H200"
    whole, *migs = inventory.devices
    assert whole == DeviceInfo(
        kind="nvidia.com/gpu", index=0, uuid="GPU-aaaa", model="H200", memory_bytes=H200_BYTES
    )
    assert [(d.kind, d.index, d.uuid, d.mig_profile, d.model) for d in migs] == [
        ("nvidia.com/mig-1g.18gb", 1, "MIG-1111", "1g.18gb", "H200"),
        ("nvidia.com/mig-1g.18gb", 1, "MIG-2222", "1g.18gb", "H200"),
        ("nvidia.com/mig-3g.71gb", 1, "MIG-3333", "3g.71gb", "H200"),
    ]
    assert migs[0].memory_bytes == 16_384 * 1024 * 1024


def test_mig_profile_names_match_nvidia() -> None:
    assert mig_profile(A100_BYTES, 1, 1, 4_864) == "1g.5gb"
    assert mig_profile(A100_BYTES, 3, 3, 19_968) == "3g.20gb"
    assert mig_profile(A100_BYTES, 7, 7, 40_192) == "7g.40gb"
    assert mig_profile(80 * GIB, 1, 1, 9_856) == "1g.10gb"
    assert mig_profile(H200_BYTES, 1, 1, 16_384) == "1g.18gb"
    assert mig_profile(A100_BYTES, 2, 1, 9_856) == "1c.2g.10gb"


def test_model_names() -> None:
    assert model_name("NVIDIA H200") == "H200"
    assert model_name(b"NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    assert model_name("Tesla V100-SXM2-16GB") == "V100-SXM2-16GB"
    assert model_name("NVIDIA GeForce RTX 4090") == "RTX-4090"


def test_no_nvml_no_gpus_no_error() -> None:
    assert discover_gpus(None) == []
    assert discover_gpus(fake_pynvml([], init_error=True)) == []
    inventory = discover(AgentConfig(nvml=False))
    assert "nvidia.com/gpu" not in inventory.resources
    assert inventory.devices == []
    assert "fusesched.io/gpu-model" not in inventory.labels


def test_host_facts() -> None:
    inventory = discover(AgentConfig(nvml=False))
    allowed = sorted(os.sched_getaffinity(0))
    assert inventory.cpu_ids == allowed
    assert inventory.resources["cpu"] == str(len(allowed))
    assert (psutil.cpu_count(logical=True) or 0) >= len(allowed)
    assert inventory.labels["kubernetes.io/arch"] in ("amd64", "arm64", "ppc64le", "s390x")
    assert inventory.labels["kubernetes.io/hostname"] == inventory.name
    assert inventory.address


@pytest.mark.parametrize(
    ("machine", "arch"),
    [("x86_64", "amd64"), ("aarch64", "arm64"), ("arm64", "arm64"), ("ppc64le", "ppc64le")],
)
def test_kubernetes_arch_names(machine: str, arch: str) -> None:
    assert kubernetes_arch(machine) == arch


def test_config_overrides_and_fake_devices() -> None:
    config = AgentConfig(
        name="fake-1",
        address="10.1.2.3",
        cpu=64,
        memory="512Gi",
        resources={"fpga": 1, "rdma": "4"},
        labels={"fusesched.io/pool": "gpu", "kubernetes.io/arch": "arm64"},
        fake_devices=[
            DeviceInfo(index=0, uuid="GPU-f0", model="V100"),
            DeviceInfo(index=1, uuid="GPU-f1", model="V100"),
        ],
    )
    inventory = discover(config, nvml=two_h200_one_in_mig_mode())
    assert inventory.name == "fake-1" and inventory.address == "10.1.2.3"
    assert inventory.resources["cpu"] == "64"
    assert inventory.resources["memory"] == "512Gi"
    assert inventory.resources["fpga"] == "1" and inventory.resources["rdma"] == "4"
    assert inventory.resources["nvidia.com/gpu"] == "3"  # one real + two fake
    assert inventory.labels["fusesched.io/pool"] == "gpu"
    assert inventory.labels["kubernetes.io/arch"] == "arm64"
    # more CPUs than the machine has: advertised, but tasks are not pinned
    if len(os.sched_getaffinity(0)) < 64:
        assert inventory.cpu_ids == []
    small = discover(AgentConfig(cpu=1, nvml=False))
    assert small.resources["cpu"] == "1" and len(small.cpu_ids) == 1
    split = discover(AgentConfig(cpu_ids=[0], nvml=False))
    assert (split.resources["cpu"], split.cpu_ids) == ("1", [0])
