"""What one job holds, for accounting: its cores and GPUs (whole-GPU equivalents).

Read from the job's stored request (the sum over its task groups of ``replicas × resources``):
cores from ``cpu``; GPUs from ``nvidia.com/gpu`` (and any vendor's ``*/gpu``),
``fusesched.io/gpu-milli`` / 1000 and MIG instances (``nvidia.com/mig-3g.40gb`` counts 3/7).
:func:`fusesched.store.usage.usage_report` reads each distinct shape once (few jobs differ in
it): :func:`shape_key` picks what decides it out of a request's text, :func:`job_shape` reads
it (cached).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from fusesched.model.resources import CPU, GPU, GPU_MILLI, QuantityError, parse_quantity

#: Compute slices of a whole GPU (MIG profiles are named ``<slices>g.<memory>``).
MIG_SLICES: Final = 7

_MIG_RE: Final = re.compile(r"^nvidia\.com/mig-(\d+)g\.")


@dataclass(frozen=True, slots=True)
class Shape:
    """What one job holds: cores and GPUs (whole-GPU equivalents)."""

    cores: float
    gpus: float


#: One task group in a stored request's JSON text (the controller stores ``model_dump``
#: output, whose group fields start ``name, replicas, resources``). A quoted key cannot match
#: inside a JSON string, where its quotes would be escaped.
_GROUP_RE: Final = re.compile(r'"replicas": (\d+), "resources": (\{[^{}]*\})')
_REPLICAS: Final = '"replicas": '


def shape_key(text: str | None) -> str | None:
    """What decides a job's shape, short: for a request of one group written the usual way,
    that group's ``"replicas": N, "resources": {...}`` (which few jobs differ in, so
    :func:`job_shape` reads each once); else the whole text."""
    if text and text[0] == "{":
        at = text.find(_REPLICAS)
        found = _GROUP_RE.match(text, at) if at >= 0 else None
        if found is not None and text.count('"resources"') == 1:
            return found.group(0)
    return text


@lru_cache(maxsize=4096)
def job_shape(text: str | None) -> Shape:
    """Cores and GPUs of one job from its resources as the usage query gives them
    (:data:`fusesched.store.usage._RESOURCES`): a request's JSON text, or a compact
    ``[[replicas, resources], ...]``."""
    if not text:
        return _NOTHING
    if text[0] == "[":
        return _groups_shape(text)
    groups = _GROUP_RE.findall(text)  # a whole request, or one group (see shape_key)
    if len(groups) == text.count('"resources"'):
        return _groups_shape(tuple(groups))
    # written differently (another key order or spacing): read the whole request
    request = json.loads(text)
    found = request.get("groups") if isinstance(request, dict) else None
    if not isinstance(found, list):
        return _NOTHING
    return _groups_shape(json.dumps([[g.get("replicas"), g.get("resources")] for g in found]))


@lru_cache(maxsize=4096)
def _groups_shape(groups: str | tuple[tuple[str, str], ...]) -> Shape:
    """Cores and GPUs of a job from its groups, as ``(replicas, resources JSON)`` pairs or a
    JSON list of ``[replicas, resources]`` (cached: few jobs differ in this)."""
    pairs = json.loads(groups) if isinstance(groups, str) else groups
    cores = gpus = 0.0
    for replicas_value, resources_value in pairs:
        replicas = int(replicas_value) if replicas_value is not None else 1
        resources = (
            json.loads(resources_value) if isinstance(resources_value, str) else resources_value
        )
        if not isinstance(resources, dict):
            continue
        for name, quantity in resources.items():
            try:
                if name == CPU:
                    cores += replicas * parse_quantity(CPU, quantity) / 1000.0
                else:
                    gpus += replicas * _gpu_share(name, quantity)
            except (QuantityError, TypeError):
                continue
    return Shape(cores, gpus)


_NOTHING: Final = Shape(0.0, 0.0)


def _gpu_share(name: str, quantity: str | int | float) -> float:
    """Whole-GPU equivalents of ``quantity`` of resource ``name`` (0 for non-GPU ones)."""
    if name == GPU_MILLI:
        return parse_quantity(name, quantity) / 1000.0
    mig = _MIG_RE.match(name)
    if mig is not None:
        return parse_quantity(name, quantity) * min(int(mig.group(1)), MIG_SLICES) / MIG_SLICES
    if name == GPU or name.endswith("/gpu"):
        return float(parse_quantity(name, quantity))
    return 0.0
