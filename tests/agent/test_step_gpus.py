"""What a job step asks for of its job's GPUs (agent/step_gpus.py): srun's four ways to say
it, per node over the step's placement, and the bad ones refused with a reason; what srun
sends (its GPUs and name), and what it does with a controller older than them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fusesched.agent.step import step_name
from fusesched.agent.step_args import parse_args
from fusesched.agent.step_gpus import GpuAsk, gpu_ask
from fusesched.agent.step_plan import StepError, StepLaunch, StepTask
from fusesched.agent.step_run import Step
from fusesched.api.step_schemas import StepRequest


def ask(*argv: str, slots: dict[str, int] | None = None, mpi: bool = False) -> GpuAsk | None:
    return gpu_ask(parse_args([*argv, "train.py"]), slots or {"a": 2, "b": 1}, mpi)


def test_each_option_asks_per_node() -> None:
    assert ask() is None
    assert ask("--gres=gpu:1") == GpuAsk({"a": 1, "b": 1})
    assert ask("--gres", "gpu:h100:2") == GpuAsk({"a": 2, "b": 2})
    assert ask("--gres=gpu") == GpuAsk({"a": 1, "b": 1})
    assert ask("--gres=gpu:h100") == GpuAsk({"a": 1, "b": 1})
    assert ask("--gres=none") == GpuAsk({"a": 0, "b": 0})
    assert ask("--gpus-per-node=h200:3") == GpuAsk({"a": 3, "b": 3})
    assert ask("-G4", slots={"a": 1, "b": 1}) == GpuAsk({"a": 2, "b": 2})
    assert ask("--gpus=0") == GpuAsk({"a": 0, "b": 0})
    assert ask("--gpus-per-task=2") == GpuAsk({"a": 4, "b": 2}, per_task=2)
    assert ask("--gpus-per-task=2", mpi=True) == GpuAsk({"a": 4, "b": 2})  # mpirun: per node


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gres=gpu:1", "-G1"], "once, not with --gres and --gpus"),
        (["--gpus=3"], "cannot be shared evenly by the step's 2 nodes"),
    ],
)
def test_bad_asks_say_why(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ask(*argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gres=gpu:a:b:2"], "gpu\\[:type\\]\\[:count\\]"),
        (["--gres=gpu:h100:x"], "the count in 'gpu:h100:x'"),
        (["--gres=mps:100"], "steps are given GPUs only"),
        (["--gpus-per-task=-1"], "\\[type:\\]count"),
        (["--gpus-per-node=99999"], "\\[type:\\]count"),
    ],
)
def test_bad_options_say_why(argv: list[str], message: str) -> None:
    with pytest.raises(StepError, match=message):
        parse_args([*argv, "train.py"])


def _refusing(field: str, bodies: list[dict[str, Any]]) -> httpx.Client:
    """A controller older than the step field ``field`` (it refuses it as unknown)."""

    def controller(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if field in body:
            error = {"type": "extra_forbidden", "loc": ["body", field], "msg": "Extra inputs"}
            return httpx.Response(422, json={"detail": [error]})
        return httpx.Response(201, json={"step_id": 0, "task_ids": ["7.remote.1"]})

    return httpx.Client(base_url="http://controller", transport=httpx.MockTransport(controller))


def test_the_step_sends_its_gpus_and_name_and_an_older_controller_is_told() -> None:
    sent = [StepLaunch(StepTask(0, "node-a", 0, 0, 1), ["true"], {})]
    bodies: list[dict[str, Any]] = []
    named = Step(_refusing("name", bodies), "7", False, gpus=GpuAsk({"node-a": 1}), name="x")
    assert named.create({"node-a": 1}, False, sent) is None  # unnamed, then
    assert [(b.get("name"), b["gpus"], b["gpus_per_task"]) for b in bodies] == [
        ("x", {"node-a": 1}, None),
        (None, {"node-a": 1}, None),
    ]
    older = Step(_refusing("gpus", []), "7", False, gpus=GpuAsk({"node-a": 1}))
    with pytest.raises(StepError, match="cannot give a step its own GPUs"):
        older.create({"node-a": 1}, False, sent)
    assert step_name(parse_args(["-J", "seed", "python"])) == "seed"
    assert step_name(parse_args(["/opt/bin/train.py", "--seed", "1"])) == "train.py"


@pytest.mark.parametrize("argv", [["/opt/" + "x" * 250], ["-J", "y" * 300, "train.py"]])
def test_a_long_name_is_cut_to_what_the_controller_takes(argv: list[str]) -> None:
    name = step_name(parse_args(argv))
    body = {"slots": {"a": 1}, "tasks": [{"node": "a", "argv": ["x"]}], "name": name}
    assert StepRequest.model_validate(body).name == name[:200] == name
