"""A PyTorchJob's torchrun settings (docs/SUBMIT.md, "Kubeflow, Volcano and Deployments"):
``spec.nprocPerNode`` — or the older ``elasticPolicy.nProcPerNode``, not both, as the training
operator refuses both — becomes the tasks' ``PET_NPROC_PER_NODE`` (``auto`` when neither is
given, the operator's default), and ``elasticPolicy.maxRestarts`` their ``PET_MAX_RESTARTS``.
The rest of the rendezvous (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``,
``PET_MASTER_PORT``) is set when the tasks start (controller/torchrun_env.py).

An ``elasticPolicy`` may hold only those and ``minReplicas``/``maxReplicas`` equal to the
Worker's replicas: fusesched starts fixed gangs with torchrun's static rendezvous, so a
changing number of replicas, another rendezvous backend and metrics-driven scaling are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from fusesched.submit.problems import Loc

if TYPE_CHECKING:
    from fusesched.submit.kube_pod import PodReader

#: torchrun's own names for a number of processes per node, besides a whole number.
NPROC_WORDS: Final = ("auto", "cpu", "gpu", "xpu")
DEFAULT_NPROC: Final = "auto"
ELASTIC_USED: Final = frozenset({"nProcPerNode", "minReplicas", "maxReplicas", "maxRestarts"})


def torchrun_env(reader: PodReader, spec: Mapping[str, object], workers: int) -> dict[str, str]:
    """The ``PET_*`` variables a PyTorchJob's ``spec`` sets in every task (``workers``: the
    Worker's replicas, 0 without a Worker)."""
    loc: Loc = ("spec", "elasticPolicy")
    elastic = reader.mapping(spec.get("elasticPolicy"), loc, "elasticPolicy")
    for key in elastic:
        if key not in ELASTIC_USED:
            raise reader.error(
                f"elasticPolicy.{key} is not supported: fusesched starts a fixed gang with "
                "torchrun's static rendezvous (PET_MASTER_ADDR, PET_MASTER_PORT); of "
                "elasticPolicy only nProcPerNode, maxRestarts and minReplicas/maxReplicas equal "
                "to the Worker's replicas are read",
                (*loc, key),
            )
    for key in ("minReplicas", "maxReplicas"):
        if key in elastic and reader.count(elastic, (*loc, key), 1) != workers:
            raise reader.error(
                f"elastic training (a changing number of replicas) is not supported: fusesched "
                f"starts a fixed gang; give {key} equal to the Worker's replicas ({workers}), "
                "or leave it out",
                (*loc, key),
            )
    env = {"PET_NPROC_PER_NODE": _nproc(reader, spec, elastic)}
    if "maxRestarts" in elastic:
        env["PET_MAX_RESTARTS"] = str(reader.count(elastic, (*loc, "maxRestarts"), 0, least=0))
    return env


def _nproc(reader: PodReader, spec: Mapping[str, object], elastic: Mapping[str, object]) -> str:
    given: list[tuple[object, Loc]] = []
    if "nprocPerNode" in spec:
        given.append((spec["nprocPerNode"], ("spec", "nprocPerNode")))
    if "nProcPerNode" in elastic:
        given.append((elastic["nProcPerNode"], ("spec", "elasticPolicy", "nProcPerNode")))
    if not given:
        return DEFAULT_NPROC
    if len(given) > 1:
        raise reader.error(
            "give nprocPerNode or elasticPolicy.nProcPerNode, not both (the training operator "
            "refuses both too)",
            given[1][1],
        )
    value, loc = given[0]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return str(value)
    if isinstance(value, str) and (
        value in NPROC_WORDS or (value.isascii() and value.isdigit() and int(value) >= 1)
    ):
        return value
    raise reader.error(
        f"must be a whole number ≥ 1 or one of {', '.join(NPROC_WORDS)}, not {value!r}", loc
    )
