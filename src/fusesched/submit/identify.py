"""Job-type identification and launcher inference for requests that do not say.

Rules, first match wins (:func:`identify`):

1. an explicit ``type`` is kept;
2. **ai-train** — a GPU is requested and some group's launcher is torchrun or deepspeed, or its
   command uses ``torchrun``, ``deepspeed``, ``accelerate``, ``horovodrun`` or
   ``python -m torch.distributed.*``;
3. **ai-infer** — a GPU is requested and the command is a model server (``vllm``,
   ``tritonserver``, ``torchserve``, ``text-generation-launcher``, ``sglang``, a ``serve``
   word) or the group opens ports;
4. **hpc** — some group's launcher is mpi, or its command uses ``mpirun``, ``mpiexec``,
   ``orterun`` or ``srun``;
5. **service** — the job opens ports, or has no walltime and runs a long-running server
   (``gunicorn``, ``uvicorn``, ``nginx``, ``httpd``, ``redis-server``, ``postgres``,
   ``python -m http.server``, ``serve``, ``sleep infinity``);
6. **batch** — everything else.

"A GPU" is any accelerator resource: ``nvidia.com/gpu``, GPU shares, MIG profiles and other
vendors' ``*/gpu``. Commands are read from ``argv`` or from the script's non-comment lines;
a word matches a program by its base name (``/usr/bin/mpirun`` is ``mpirun``) or a Python
module prefix (``vllm.entrypoints…`` is ``vllm``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from fusesched.model.job import JobType
from fusesched.model.resources import GPU, GPU_MILLI
from fusesched.submit.request import JobRequest
from fusesched.submit.task_group import Launcher, TaskGroupRequest

TRAIN_WORDS: Final = ("torchrun", "deepspeed", "accelerate", "horovodrun", "torch.distributed")
SERVE_WORDS: Final = (
    "vllm",
    "tritonserver",
    "torchserve",
    "text-generation-launcher",
    "sglang",
    "serve",
)
MPI_WORDS: Final = ("mpirun", "mpiexec", "orterun", "srun")
SERVER_WORDS: Final = (
    "gunicorn",
    "uvicorn",
    "nginx",
    "httpd",
    "redis-server",
    "postgres",
    "http.server",
    "serve",
)

_SPLIT_RE: Final = re.compile(r"[\s;&|()`'\"=]+")


@dataclass(frozen=True, slots=True)
class Identification:
    type: JobType
    reason: str


def is_accelerator(resource: str) -> bool:
    return (
        resource in (GPU, GPU_MILLI)
        or resource.startswith("nvidia.com/mig-")
        or resource.endswith("/gpu")
    )


def command_words(group: TaskGroupRequest) -> tuple[str, ...]:
    """The words of a group's command: argv, or the script without comments."""
    if group.argv:
        text = " ".join(group.argv)
    else:
        lines = (group.script or "").splitlines()
        text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    words = []
    for word in _SPLIT_RE.split(text):
        if word:
            words.append(word.rsplit("/", 1)[-1] if "/" in word else word)
    return tuple(words)


def _find(words: Sequence[str], wanted: Iterable[str]) -> str | None:
    for word in words:
        for name in wanted:
            if word == name or word.startswith(name + "."):
                return name
    return None


def _long_running(words: Sequence[str]) -> str | None:
    found = _find(words, SERVER_WORDS)
    if found is not None:
        return found
    for first, second in itertools.pairwise(words):
        if first == "sleep" and second in ("infinity", "inf"):
            return "sleep infinity"
    return None


def infer_launcher(group: TaskGroupRequest) -> Launcher:
    """The group's launcher, or the one its command uses (``none`` when it uses none)."""
    if group.launcher is not None:
        return group.launcher
    words = command_words(group)
    if _find(words, ("torchrun", "torch.distributed")):
        return Launcher.TORCHRUN
    if _find(words, ("deepspeed",)):
        return Launcher.DEEPSPEED
    if _find(words, MPI_WORDS):
        return Launcher.MPI
    return Launcher.NONE


def identify(req: JobRequest) -> Identification:
    """The job's type and, in words, why (see the module's rules)."""
    if req.type is not None:
        return Identification(req.type, "given explicitly")
    gpu = any(is_accelerator(r) for g in req.groups for r in g.resources)
    launchers = {g.launcher for g in req.groups}
    words = [w for g in req.groups for w in command_words(g)]
    ports = any(g.ports for g in req.groups)
    if gpu:
        for launcher in (Launcher.TORCHRUN, Launcher.DEEPSPEED):
            if launcher in launchers:
                return Identification(JobType.AI_TRAIN, f"GPU with the {launcher} launcher")
        found = _find(words, TRAIN_WORDS)
        if found:
            return Identification(JobType.AI_TRAIN, f"GPU with {found}")
        found = _find(words, SERVE_WORDS)
        if found:
            return Identification(JobType.AI_INFER, f"GPU with the model server {found}")
        if ports:
            return Identification(JobType.AI_INFER, "GPU with open ports")
    if Launcher.MPI in launchers:
        return Identification(JobType.HPC, "the mpi launcher")
    found = _find(words, MPI_WORDS)
    if found:
        return Identification(JobType.HPC, f"MPI launcher {found}")
    if ports:
        return Identification(JobType.SERVICE, "open ports")
    if req.walltime_s is None:
        found = _long_running(words)
        if found:
            return Identification(JobType.SERVICE, f"long-running {found} without a walltime")
    return Identification(JobType.BATCH, "no rule for another type matched")


def identify_type(req: JobRequest) -> JobType:
    """The job's type: explicit, else identified by the module's rules."""
    return identify(req).type
