"""The resources a task may request, by name: what a job file's, a batch script's or a
Kubernetes pod's resource names become (:func:`resource_name`), with a hint for a name that
is none of them."""

from __future__ import annotations

import difflib
from typing import Final

from fusesched.model.resources import (
    ALIASES,
    CPU,
    FPGA,
    GPU,
    GPU_MILLI,
    MEMORY,
    RDMA,
    QuantityError,
    canonical_name,
)

_PLAIN_NAMES: Final = frozenset({CPU, MEMORY, "ephemeral-storage", FPGA, RDMA})


def resource_name(name: str) -> str:
    """The canonical name of a resource a task may request, or ``ValueError`` with a hint.

    Known: ``cpu``, ``memory``, ``ephemeral-storage``, ``fpga``, ``rdma``, ``hugepages-*``,
    the aliases of :data:`~fusesched.model.resources.ALIASES`, ``nvidia.com/gpu``,
    ``nvidia.com/mig-<profile>``, ``fusesched.io/gpu-milli`` and any other vendor's
    domain-qualified name (``amd.com/gpu``, ``xilinx.com/fpga``).
    """
    try:
        canon = canonical_name(name)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    if "/" in canon:
        domain, short = canon.split("/", 1)
        if domain == "nvidia.com" and not (short == "gpu" or short.startswith("mig-")):
            raise ValueError(_unknown_resource(name))
        if domain == "fusesched.io" and canon != GPU_MILLI:
            raise ValueError(_unknown_resource(name))
        return canon
    if canon in _PLAIN_NAMES or canon.startswith("hugepages-"):
        return canon
    raise ValueError(_unknown_resource(name))


def _unknown_resource(name: str) -> str:
    candidates = sorted({*_PLAIN_NAMES, *ALIASES, GPU, GPU_MILLI})
    close = difflib.get_close_matches(name.strip().lower(), candidates, n=1, cutoff=0.6)
    hint = ""
    if close:
        alias = close[0]
        target = ALIASES.get(alias, alias)
        hint = f"; did you mean {alias!r}" + (f" ({target})" if target != alias else "") + "?"
    return (
        f"unknown resource {name!r}{hint or '.'} Known: cpu, memory, ephemeral-storage, "
        f"{GPU} (gpu), nvidia.com/mig-<profile>, {GPU_MILLI}, fpga, rdma, hugepages-<size>, "
        "or a vendor's domain-qualified name such as amd.com/gpu"
    )
