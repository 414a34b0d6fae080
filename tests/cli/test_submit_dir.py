"""``fusesched sbatch`` and ``submit`` say the folder they run in (``submit_dir``: a batch
script's working directory, as Slurm's sbatch), by every path: the quick one, the full
command (``--parsable``) and the native front. A controller older than the field refuses it
(422 naming it, nothing submitted): each path sends the job again without it, with a
warning, and the job is submitted. Real processes against a real HTTP server on loopback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import FULL_COMMAND
from tests.cli.old_controller import serving

PYTHON = [sys.executable, "-m", "fusesched"]
SCRIPT = "#!/bin/sh\n#SBATCH -J s\ntrue\n"
WARNING = "the controller is older than this command"


def _refusal(body: Any) -> list[dict[str, Any]]:
    """What FastAPI answers for ``submit_dir`` to a controller that does not know it."""
    items = body["files"] if isinstance(body, dict) and "files" in body else [body]
    return [
        {"type": "extra_forbidden", "loc": ["body", "files", i, "submit_dir"], "msg": "Extra"}
        for i, item in enumerate(items)
        if "submit_dir" in item
    ]


@pytest.fixture
def controller(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[Any]]]:
    """A controller that knows ``submit_dir`` (``param`` True) or is older (False): its URL
    and the bodies it received."""
    knows: bool = request.param
    with serving(lambda body: [] if knows else _refusal(body)) as served:
        yield served


def sbatch(
    command: list[str], url: str, folder: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    (folder / "job.sh").write_text(SCRIPT)
    env = {"PATH": "/usr/bin:/bin", "USER": "ann", "FUSESCHED_CONTROLLER": url, "LANG": "C.UTF-8"}
    env["XDG_CONFIG_HOME"] = str(folder / "config")
    return subprocess.run(
        [*command, *args, "job.sh"], capture_output=True, text=True, cwd=folder, env=env, timeout=60
    )


def dirs(body: Any) -> list[str | None]:
    """The ``submit_dir`` each job of a request body carries."""
    items = body.get("files", [body])
    return [item.get("submit_dir") for item in items]


def paths(native_front: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    return [
        (PYTHON, ("sbatch",)),  # the quick path
        (FULL_COMMAND, ("sbatch", "--parsable")),  # the full command
        (PYTHON, ("submit",)),  # (a batch script submitted as any job file)
        (FULL_COMMAND, ("submit", "--parsable")),
        ([str(native_front)], ("sbatch",)),  # (to an older controller: Python retries)
    ]


@pytest.mark.parametrize("controller", [True], indirect=True)
def test_every_path_sends_the_folder_it_runs_in(
    controller: tuple[str, list[Any]], native_front: Path, tmp_path: Path
) -> None:
    url, received = controller
    for command, args in paths(native_front):
        done = sbatch(command, url, tmp_path, *args)
        assert done.returncode == 0 and WARNING not in done.stderr, done.stderr
        assert [dirs(body) for body in received] == [[str(tmp_path)]], (command, args)
        received.clear()


@pytest.mark.parametrize("controller", [False], indirect=True)
def test_an_older_controller_gets_the_job_without_it(
    controller: tuple[str, list[Any]], native_front: Path, tmp_path: Path
) -> None:
    url, received = controller
    for command, args in paths(native_front):
        done = sbatch(command, url, tmp_path, *args)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count(WARNING) == 1 and "5" in done.stdout, done.stderr
        refused, taken = received[-2:]
        assert dirs(refused) == [str(tmp_path)] and dirs(taken) == [None], (command, args)
        received.clear()


@pytest.mark.parametrize(("controller", "warned"), [(True, 0), (False, 1)], indirect=["controller"])
def test_run_sends_the_folder_it_runs_in(
    controller: tuple[str, list[Any]], warned: int, tmp_path: Path
) -> None:
    """``fusesched run`` too (its tasks start there, as srun's); an older controller gets
    the job again without it. (This one answers no ``GET``: run stops after submitting.)"""
    url, received = controller
    env = {"PATH": "/usr/bin:/bin", "FUSESCHED_CONTROLLER": url, "LANG": "C.UTF-8"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    done = subprocess.run(
        [*PYTHON, "run", "-Q", "true"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert "Traceback" not in done.stderr and done.stderr.count(WARNING) == warned, done.stderr
    expected = [[str(tmp_path)], [None]] if warned else [[str(tmp_path)]]
    assert [dirs(body) for body in received] == expected
    assert "output" not in received[0]  # (run writes no output file: it prints the output)
