"""NVIDIA GPUs and MIG instances through NVML (the ``pynvml`` module of nvidia-ml-py).

The NVML module is passed in, so tests can hand in a fake one; ``load_nvml()`` imports the real
one. No library, no driver or no GPU means no devices, never an error: a CPU node is normal.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
from typing import Any

from fusesched.api.wire import DeviceInfo

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
_MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE
_GIB = 1024**3
_MIB = 1024**2


def load_nvml() -> Any | None:
    """Import ``pynvml``; ``None`` when nvidia-ml-py is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def model_name(name: str | bytes) -> str:
    """The label value for a GPU's marketing name: ``"NVIDIA H200"`` → ``"H200"``."""
    text = name.decode() if isinstance(name, bytes) else name
    for prefix in ("NVIDIA ", "Tesla ", "GeForce ", "Quadro "):
        text = text.removeprefix(prefix)
    return "-".join(text.split())


def mig_profile(parent_memory_bytes: int, slices: int, compute_slices: int, memory_mb: int) -> str:
    """The MIG profile name (``"1g.10gb"``) as NVIDIA's device plugin names it.

    The memory part is the instance's share of the parent's memory, rounded up to eighths,
    times the parent's memory in whole GiB; a compute instance smaller than its GPU instance
    is written ``"<c>c.<g>g.<m>gb"``.
    """
    total_gib = -(-parent_memory_bytes // _GIB)
    fraction = (memory_mb * _MIB) / parent_memory_bytes if parent_memory_bytes else 0.0
    fraction = math.ceil(fraction * 8) / 8
    gigabytes = math.floor(fraction * total_gib + 0.5)  # half away from zero, as Go rounds
    base = f"{slices}g.{gigabytes}gb"
    return f"{compute_slices}c.{base}" if 0 < compute_slices < slices else base


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _mig_devices(nvml: Any, handle: Any, index: int, parent_memory: int) -> list[DeviceInfo]:
    devices: list[DeviceInfo] = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:
            continue  # an empty slot
        attrs = nvml.nvmlDeviceGetAttributes(mig)
        profile = mig_profile(
            parent_memory,
            int(attrs.gpuInstanceSliceCount),
            int(attrs.computeInstanceSliceCount),
            int(attrs.memorySizeMB),
        )
        devices.append(
            DeviceInfo(
                kind=MIG_RESOURCE_PREFIX + profile,
                index=index,
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                model="",
                memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(mig).total),
                mig_profile=profile,
            )
        )
    return devices


def discover_gpus(nvml: Any | None) -> list[DeviceInfo]:
    """Every whole GPU not in MIG mode, and every MIG instance of those that are.

    A GPU in MIG mode is offered only as its instances (each with ``index`` = the parent's
    index, ``uuid`` = ``"MIG-…"``), like the "mixed" strategy of NVIDIA's Kubernetes plugin.
    """
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError: no driver / no library; anything else: same answer
        log.info("NVML not usable, no GPUs discovered: %s", exc)
        return []
    devices: list[DeviceInfo] = []
    try:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            model = model_name(nvml.nvmlDeviceGetName(handle))
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(handle)
            except nvml.NVMLError:  # not MIG-capable
                current = 0
            if current == _MIG_ENABLED:
                instances = _mig_devices(nvml, handle, index, memory)
                devices.extend(d.model_copy(update={"model": model}) for d in instances)
                continue
            devices.append(
                DeviceInfo(
                    kind=GPU_RESOURCE,
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    model=model,
                    memory_bytes=memory,
                )
            )
    except Exception as exc:
        log.warning("NVML query failed, no GPUs discovered: %s", exc)
        return []
    finally:
        with contextlib.suppress(Exception):  # shutdown failures change nothing
            nvml.nvmlShutdown()
    return devices
