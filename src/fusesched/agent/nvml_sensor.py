"""Per-GPU samples through NVML: the GPU sensor of real nodes (:mod:`fusesched.agent.sensors`
holds the samples, the task sensor and the back end that combines them).

:class:`NvmlGpuSensor` reads utilisation, memory used, power, temperature and volatile
uncorrectable ECC counts per GPU, marks a GPU *lost* when NVML says so
(``NVML_ERROR_GPU_IS_LOST``) or it disappears from the device list, and collects XID errors
through NVML's event API (``nvmlEventSetCreate`` / ``nvmlDeviceRegisterEvents`` with
``nvmlEventTypeXidCriticalError`` / ``nvmlEventSetWait_v2`` with a zero timeout). XIDs that
happened before the sensor registered (e.g. before the agent started) are not delivered by
NVML; they are only in the kernel log (``NVRM: Xid``). Where events are not supported
(``xid_supported`` is False) XIDs are not reported, and lost GPUs and ECC counts still are.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from fusesched.agent.sensors import GpuSample, TaskSample, TaskWatch

log = logging.getLogger("fusesched.agent.sensors")  # the sensors' logger

# NVML constants (as in pynvml), so a fake module need not define them.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_XID_CRITICAL_ERROR = 0x8


def _nvml_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class NvmlGpuSensor:
    """GPU samples through NVML; ``nvml`` is the ``pynvml`` module or a fake one.

    The devices are those present at the first sample; one that later fails with
    ``GPU_IS_LOST``, or cannot be found any more, is reported with ``lost=True``.
    """

    def __init__(self, nvml: Any | None) -> None:
        self.nvml: Any = nvml  # None: no NVML
        self._handles: dict[int, Any] = {}
        self._uuids: dict[int, str] = {}
        self._events: Any | None = None
        self._started = False
        self.available = False
        self.xid_supported = False

    def _start(self) -> None:
        self._started = True
        nvml = self.nvml
        if nvml is None:
            return
        try:
            nvml.nvmlInit()
            for index in range(int(nvml.nvmlDeviceGetCount())):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                self._handles[index] = handle
                uuid = nvml.nvmlDeviceGetUUID(handle)
                self._uuids[index] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        except Exception as exc:  # no library, no driver: a CPU node
            log.info("NVML not usable, no GPU samples: %s", exc)
            return
        self.available = True
        self._register_events()

    def _register_events(self) -> None:
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except Exception as exc:
            log.info("NVML events unavailable, XID errors not reported: %s", exc)
            return
        registered = 0
        for handle in self._handles.values():
            try:
                nvml.nvmlDeviceRegisterEvents(handle, NVML_EVENT_XID_CRITICAL_ERROR, events)
                registered += 1
            except Exception as exc:
                log.info("XID events not supported on a GPU: %s", exc)
        self._events = events
        self.xid_supported = registered > 0

    def _drain_xids(self) -> dict[int, list[int]]:
        xids: dict[int, list[int]] = {}
        if self._events is None:
            return xids
        nvml = self.nvml
        index_of = {id(h): i for i, h in self._handles.items()}
        for _ in range(10_000):  # bounded: a storm of events cannot stall the agent
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception as exc:
                if _nvml_code(exc) not in (NVML_ERROR_TIMEOUT, None):
                    log.info("NVML event wait failed: %s", exc)
                break
            index = index_of.get(id(data.device))
            if index is None:
                with contextlib.suppress(Exception):
                    index = int(nvml.nvmlDeviceGetIndex(data.device))
            if index is not None:
                xids.setdefault(index, []).append(int(data.eventData))
        return xids

    def sample_tasks(self, watches: Sequence[TaskWatch], now: float) -> list[TaskSample]:
        return []

    def sample_gpus(self, now: float) -> list[GpuSample]:
        if not self._started:
            self._start()
        if not self.available:
            return []
        xids = self._drain_xids()
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except Exception:
            count = len(self._handles)
        return [
            self._one(i, h, now, tuple(xids.get(i, ())), present=i < count)
            for i, h in sorted(self._handles.items())
        ]

    def _one(
        self, index: int, handle: Any, now: float, xids: tuple[int, ...], *, present: bool
    ) -> GpuSample:
        nvml, uuid = self.nvml, self._uuids[index]
        lost = GpuSample(index, uuid, now, xid_errors=xids, lost=True)
        if not present:
            return lost
        values: dict[str, Any] = {}

        def read(key: str, call: Any) -> bool:
            try:
                values[key] = call()
            except Exception as exc:
                if _nvml_code(exc) == NVML_ERROR_GPU_IS_LOST:
                    return False
                # not supported on this GPU, or a transient error: leave the default
            return True

        reads = (
            ("util", lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            ("mem", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used)),
            ("power", lambda: float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0),
            ("temp", lambda: float(nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU))),
            (
                "ecc",
                lambda: int(
                    nvml.nvmlDeviceGetTotalEccErrors(
                        handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
                    )
                ),
            ),
        )
        for key, call in reads:
            if not read(key, call):
                return lost
        return GpuSample(
            index=index,
            uuid=uuid,
            time=now,
            utilization_pct=values.get("util", float("nan")),
            memory_used_bytes=values.get("mem", -1),
            power_w=values.get("power", float("nan")),
            temperature_c=values.get("temp", float("nan")),
            ecc_uncorrected=values.get("ecc", 0),
            xid_errors=xids,
        )

    def close(self) -> None:
        if self.nvml is None or not self.available:
            return
        if self._events is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()
        self.available = False
