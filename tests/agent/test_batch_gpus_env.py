"""A batch script's GPUs as the agent shows them (agent/task_env.py): the launch's
``FUSESCHED_STEP_BATCH_GPUS`` widens ``CUDA_VISIBLE_DEVICES`` and ``FUSESCHED_GPU_INDICES``
to all of its job's whole GPUs on the node, the task's own kept; not for MIG instances, nor
from a mark that does not read as GPU indices; the mark itself is not left in the task's
environment, so neither the script nor its ``srun`` passes it on."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.task_env import task_environment, visible_gpus
from fusesched.api.wire import BATCH_GPUS_ENV

from .helpers import launch, run_one

SHOW = 'echo "$CUDA_VISIBLE_DEVICES|$FUSESCHED_GPU_INDICES|${FUSESCHED_STEP_BATCH_GPUS-unset}"'


def test_a_batch_script_sees_its_jobs_gpus(runtime: ProcessRuntime) -> None:
    script = launch("j1.main.0", "sh", "-c", SHOW, env={BATCH_GPUS_ENV: "0,1,2,3"}, gpu_indices=[0])
    report, text = run_one(runtime, script)
    assert (report.exit_code, text) == (0, "0,1,2,3|0,1,2,3|unset\n")
    alone = launch("j2.main.0", "sh", "-c", SHOW, gpu_indices=[1])  # (no mark: its own)
    assert run_one(runtime, alone)[1] == "1|1|unset\n"


@pytest.mark.parametrize(
    ("mark", "own", "uuids", "cuda", "indices"),
    [
        ("2,3", [1], [], "1,2,3", "1,2,3"),  # (its own kept, the whole sorted)
        ("3,1", [1], [], "1,3", "1,3"),
        ("0,1", [1], ["MIG-a"], "MIG-a", "1"),  # MIG instances: their own
        ("0,x", [1], [], "1", "1"),  # not indices: its own
        ("0,,1", [1], [], "1", "1"),
        ("-1", [1], [], "1", "1"),
        ("1234567", [1], [], "1", "1"),
        ("", [1], [], "1", "1"),
        ("", [], [], "", ""),  # no GPUs: none, as before
        ("0,1", [], [], "0,1", "0,1"),
    ],
)
def test_what_the_mark_gives(
    tmp_path: Path, mark: str, own: list[int], uuids: list[str], cuda: str, indices: str
) -> None:
    given = launch(
        "j3.main.0", "true", env={BATCH_GPUS_ENV: mark}, gpu_indices=own, gpu_uuids=uuids
    )
    env = task_environment(given, str(tmp_path), None)
    assert (env["CUDA_VISIBLE_DEVICES"], env["FUSESCHED_GPU_INDICES"]) == (cuda, indices)
    assert BATCH_GPUS_ENV not in env
    assert visible_gpus(given) == ([int(i) for i in indices.split(",")] if indices else [])
