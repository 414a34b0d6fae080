"""Job-type identification and launcher inference, as one table each."""

from __future__ import annotations

from typing import Any

import pytest

from fusesched.model.job import JobType
from fusesched.submit import Launcher, identify_type, infer_launcher, parse_request
from fusesched.submit.identify import identify

GPU = {"nvidia.com/gpu": 1}
CPU = {"cpu": 1}


def req(
    argv: list[str] | None = None,
    *,
    script: str | None = None,
    resources: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    group: dict[str, Any] = {"resources": resources or CPU}
    if script is not None:
        group["script"] = script
    else:
        group["argv"] = argv or ["true"]
    for key in ("ports", "launcher"):
        if key in fields:
            group[key] = fields.pop(key)
    return {"groups": [group], **fields}


CASES: list[tuple[str, dict[str, Any], JobType]] = [
    ("explicit wins", req(["mpirun", "x"], type="service"), JobType.SERVICE),
    ("torchrun on gpu", req(["torchrun", "train.py"], resources=GPU), JobType.AI_TRAIN),
    ("deepspeed path", req(["/opt/bin/deepspeed", "t.py"], resources=GPU), JobType.AI_TRAIN),
    ("accelerate", req(["accelerate", "launch", "t.py"], resources=GPU), JobType.AI_TRAIN),
    (
        "torch.distributed module",
        req(["python", "-m", "torch.distributed.run", "t.py"], resources=GPU),
        JobType.AI_TRAIN,
    ),
    (
        "torchrun launcher",
        req(["python", "t.py"], resources=GPU, launcher="torchrun"),
        JobType.AI_TRAIN,
    ),
    (
        "training script",
        req(script="#!/bin/bash\n#SBATCH --gres=gpu:8\nsrun torchrun t.py\n", resources=GPU),
        JobType.AI_TRAIN,
    ),
    ("torchrun without gpu", req(["torchrun", "t.py"]), JobType.BATCH),
    ("vllm", req(["vllm", "serve", "meta/llama"], resources=GPU), JobType.AI_INFER),
    (
        "vllm module",
        req(["python", "-m", "vllm.entrypoints.openai.api_server"], resources=GPU),
        JobType.AI_INFER,
    ),
    ("triton", req(["tritonserver", "--model-repository=/m"], resources=GPU), JobType.AI_INFER),
    ("gpu with ports", req(["python", "app.py"], resources=GPU, ports=[8000]), JobType.AI_INFER),
    (
        "mig share with ports",
        req(["x"], resources={"nvidia.com/mig-1g.10gb": 1}, ports=[80]),
        JobType.AI_INFER,
    ),
    ("mpirun", req(["mpirun", "-n", "64", "./lmp"]), JobType.HPC),
    ("mpiexec path", req(["/usr/bin/mpiexec", "./a"]), JobType.HPC),
    ("srun in script", req(script="#!/bin/sh\n#SBATCH -N 4\nsrun ./cg.x\n"), JobType.HPC),
    ("mpi launcher", req(["./a.out"], launcher="mpi"), JobType.HPC),
    ("mpirun on gpu", req(["mpirun", "./hpl"], resources=GPU), JobType.HPC),
    ("mpirun only in a comment", req(script="#!/bin/sh\n# mpirun later\n./a\n"), JobType.BATCH),
    ("ports", req(["python", "-m", "http.server"], ports=[8080]), JobType.SERVICE),
    ("server without walltime", req(["gunicorn", "app:app"]), JobType.SERVICE),
    ("sleep infinity", req(["sleep", "infinity"]), JobType.SERVICE),
    ("server with walltime", req(["gunicorn", "app:app"], walltime_s=60), JobType.BATCH),
    ("plain", req(["python", "etl.py"]), JobType.BATCH),
    ("gpu without launcher", req(["python", "infer_batch.py"], resources=GPU), JobType.BATCH),
]


@pytest.mark.parametrize(
    ("data", "expected"), [(d, t) for _, d, t in CASES], ids=[c for c, *_ in CASES]
)
def test_identification_table(data: dict[str, Any], expected: JobType) -> None:
    request = parse_request(data)
    assert identify_type(request) is expected
    assert identify(request).reason


def test_reasons_say_why() -> None:
    assert (
        identify(parse_request(req(["torchrun", "t"], resources=GPU))).reason == "GPU with torchrun"
    )
    assert identify(parse_request(req(["mpirun", "x"]))).reason == "MPI launcher mpirun"
    assert identify(parse_request(req(["x"], type="hpc"))).reason == "given explicitly"


LAUNCHERS: list[tuple[dict[str, Any], Launcher]] = [
    (req(["torchrun", "t.py"]), Launcher.TORCHRUN),
    (req(["python", "-m", "torch.distributed.launch", "t.py"]), Launcher.TORCHRUN),
    (req(["deepspeed", "t.py"]), Launcher.DEEPSPEED),
    (req(script="#!/bin/sh\nmpirun ./a\n"), Launcher.MPI),
    (req(["srun", "./a"]), Launcher.MPI),
    (req(["python", "t.py"]), Launcher.NONE),
    (req(["torchrun", "t.py"], launcher="none"), Launcher.NONE),
]


@pytest.mark.parametrize(("data", "expected"), LAUNCHERS)
def test_launcher_inference(data: dict[str, Any], expected: Launcher) -> None:
    assert infer_launcher(parse_request(data).groups[0]) is expected
