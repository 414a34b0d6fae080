"""A Kubernetes pod's containers as fusesched reads them (the pod around them:
:class:`~fusesched.submit.kube_pod.PodReader`): one container's resources (its requests, with
its limits filling requests it lacks), and the task group the main container gives —
``command`` + ``args`` as argv, plain ``env`` values, ``image``, ``workingDir``, ``ports`` and
its probes (:mod:`fusesched.submit.kube_probes`). Unknown fields are errors, unsupported ones
warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fusesched.model.resources import QuantityError, Resources, parse_quantity
from fusesched.submit._kube_fields import CONTAINER_QUIET, CONTAINER_USED, CONTAINER_WARN
from fusesched.submit.kube_probes import add_probes
from fusesched.submit.problems import Loc
from fusesched.submit.resource_names import resource_name

if TYPE_CHECKING:
    from fusesched.submit.kube_pod import PodReader


def read_container(
    reader: PodReader, value: object, loc: Loc
) -> tuple[Mapping[str, object], Resources]:
    """The container at ``loc`` and one task's resources from it: its requests, with its limits
    filling requests it lacks (as Kubernetes does)."""
    container = reader.mapping(value, loc, "a container")
    reader.check_fields(container, loc, CONTAINER_USED, CONTAINER_QUIET, CONTAINER_WARN)
    if not isinstance(container.get("name", ""), str):
        raise reader.error("must be a string", (*loc, "name"))
    res = reader.mapping(container.get("resources"), (*loc, "resources"), "resources")
    for key in res:
        if key == "claims":
            reader.ignored((*loc, "resources", key))
        elif key not in ("requests", "limits"):
            raise reader.error(f"unknown field {key!r}", (*loc, "resources", key))
    requests = _quantities(reader, res.get("requests"), (*loc, "resources", "requests"))
    limits = _quantities(reader, res.get("limits"), (*loc, "resources", "limits"))
    for name, amount in requests.items():
        if name in limits and limits[name] < amount:
            raise reader.error(
                f"the {name} request is above its limit", (*loc, "resources", "requests")
            )
    merged = {**limits, **requests}
    return container, Resources(merged)


def _quantities(reader: PodReader, value: object, loc: Loc) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, amount in reader.mapping(value, loc, "resources").items():
        try:
            name = resource_name(key)
            if not isinstance(amount, str | int | float):
                raise ValueError(f"{name}: a quantity must be a number or a string")
            out[name] = out.get(name, 0) + parse_quantity(name, amount)
        except (ValueError, QuantityError) as exc:
            raise reader.error(str(exc), (*loc, key)) from None
    return out


def container_group(
    reader: PodReader,
    container: Mapping[str, object],
    loc: Loc,
    prefix: str,
    command_required: bool,
) -> dict[str, object]:
    """The task group the main container at ``loc`` gives (``prefix``: the group's field path
    in the request, ``groups[i]``): argv, env, image, workdir, ports and probes."""
    command = reader.sequence(container.get("command"), (*loc, "command"), "command")
    args = reader.sequence(container.get("args"), (*loc, "args"), "args")
    if not command and command_required:
        raise reader.error(
            "command is required: fusesched cannot read an image's entrypoint",
            loc if "args" not in container else (*loc, "args"),
        )
    group: dict[str, object] = {"name": "main"}
    if command:
        group["argv"] = [
            str(w) if isinstance(w, int | float) and not isinstance(w, bool) else w
            for w in [*command, *args]
        ]
        reader.renames[f"{prefix}.argv"] = (*loc, "command")
    env: dict[str, object] = {}
    if "envFrom" in container:
        raise reader.error(
            "envFrom is not supported: list the variables under env with values",
            (*loc, "envFrom"),
        )
    for i, item in enumerate(reader.sequence(container.get("env"), (*loc, "env"), "env")):
        entry = reader.mapping(item, (*loc, "env", i), "an env entry")
        if "valueFrom" in entry:
            raise reader.error(
                f"env {entry.get('name')!r}: valueFrom is not supported; give a value",
                (*loc, "env", i),
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise reader.error("env entry needs a name", (*loc, "env", i))
        value = entry.get("value", "")
        env[name] = value if isinstance(value, str) else str(value)
    if env:
        group["env"] = env
        reader.renames[f"{prefix}.env"] = (*loc, "env")
    if "image" in container:
        group["image"] = container["image"]
        reader.renames[f"{prefix}.image"] = (*loc, "image")
    if "workingDir" in container:
        group["workdir"] = container["workingDir"]
        reader.renames[f"{prefix}.workdir"] = (*loc, "workingDir")
    ports = []
    for i, item in enumerate(reader.sequence(container.get("ports"), (*loc, "ports"), "ports")):
        entry = reader.mapping(item, (*loc, "ports", i), "a port")
        if "containerPort" not in entry:
            raise reader.error("a port needs containerPort", (*loc, "ports", i))
        ports.append(entry["containerPort"])
    if ports:
        group["ports"] = ports
        reader.renames[f"{prefix}.ports"] = (*loc, "ports")
    add_probes(reader, container, loc, group, prefix)
    return group
