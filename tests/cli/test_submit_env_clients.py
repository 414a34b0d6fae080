"""Every submitting path sends the shell's environment (``submit_env``, which batch jobs
inherit as with Slurm's default ``--export=ALL``): the quick path and the native front in the
request (the controller parses the script), the full command (``--parsable``) and ``run`` in
the job they parsed. A controller older than the field refuses it (422 naming it, nothing
submitted): each path sends the job again without it, with one warning, keeping
``submit_dir`` when the controller knows that. Real processes against a real HTTP server on
loopback."""

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
ENV_WARNING = "batch jobs do not inherit this shell's environment"
DIR_WARNING = "batch jobs start in their task folder"


def _fields(body: Any) -> list[tuple[list[Any], str]]:
    """(location, name) of every ``submit_env``/``submit_dir`` in a request body."""
    found: list[tuple[list[Any], str]] = []
    if isinstance(body, dict) and "files" in body:
        found += [(["body"], k) for k in ("submit_env",) if k in body]
        found += [
            (["body", "files", i], k)
            for i, item in enumerate(body["files"])
            for k in ("submit_dir",)
            if k in item
        ]
        return found
    for i, item in enumerate(body if isinstance(body, list) else [body]):
        found += [(["body", i], k) for k in ("submit_env", "submit_dir") if k in item]
    return found


@pytest.fixture
def controller(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[Any]]]:
    """A controller that does not know the fields ``param`` names: its URL and the bodies
    it received."""
    unknown: frozenset[str] = request.param

    def refusal(body: Any) -> list[dict[str, Any]]:
        return [
            {"type": "extra_forbidden", "loc": [*where, name], "msg": "Extra inputs"}
            for where, name in _fields(body)
            if name in unknown
        ]

    with serving(refusal) as served:
        yield served


def submitted(command: list[str], url: str, folder: Path, *args: str) -> Any:
    (folder / "job.sh").write_text(SCRIPT)
    env = {"PATH": "/usr/bin:/bin", "USER": "ann", "FUSESCHED_CONTROLLER": url, "LANG": "C.UTF-8"}
    env |= {"XDG_CONFIG_HOME": str(folder / "config"), "MY_VENV": "/home/ann/venv"}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, cwd=folder, env=env, timeout=60
    )


def paths(native_front: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    return [
        (PYTHON, ("sbatch", "job.sh")),  # the quick path
        (FULL_COMMAND, ("sbatch", "--parsable", "job.sh")),  # the full command
        (FULL_COMMAND, ("submit", "--parsable", "job.sh")),
        ([str(native_front)], ("sbatch", "job.sh")),  # (to an older controller: Python's)
        (PYTHON, ("run", "-Q", "true")),
    ]


def sent_env(body: Any) -> dict[str, str] | None:
    if isinstance(body, dict) and "files" in body:
        return body.get("submit_env")
    return (body[0] if isinstance(body, list) else body).get("submit_env")


@pytest.mark.parametrize("controller", [frozenset()], indirect=True)
def test_every_path_sends_the_environment(
    controller: tuple[str, list[Any]], native_front: Path, tmp_path: Path
) -> None:
    url, received = controller
    for command, args in paths(native_front):
        done = submitted(command, url, tmp_path, *args)
        assert ENV_WARNING not in done.stderr and DIR_WARNING not in done.stderr, done.stderr
        (body,) = received  # (run goes on to ask for the job: this server answers no GET)
        env = sent_env(body)
        assert env is not None and env["MY_VENV"] == "/home/ann/venv", (args, body)
        if "files" not in body:  # (parsed here: what is carried, already)
            assert "USER" not in env and "FUSESCHED_CONTROLLER" not in env
        received.clear()


@pytest.mark.parametrize(
    ("controller", "warnings", "dir_kept"),
    [
        (frozenset({"submit_env"}), [ENV_WARNING], True),
        (frozenset({"submit_env", "submit_dir"}), [ENV_WARNING, DIR_WARNING], False),
    ],
    indirect=["controller"],
)
def test_an_older_controller_gets_the_job_without_it(
    controller: tuple[str, list[Any]],
    warnings: list[str],
    dir_kept: bool,
    native_front: Path,
    tmp_path: Path,
) -> None:
    url, received = controller
    for command, args in paths(native_front):
        done = submitted(command, url, tmp_path, *args)
        assert "Traceback" not in done.stderr and "5" in done.stdout + done.stderr, done.stderr
        for warning in (ENV_WARNING, DIR_WARNING):
            assert done.stderr.count(warning) == (warning in warnings), (args, done.stderr)
        taken = received[-1]
        assert sent_env(taken) is None, args
        names = {name for _, name in _fields(taken)}
        assert ("submit_dir" in names) == dir_kept, (args, taken)
        received.clear()


def test_a_refused_environment_is_an_error_not_an_older_controller(
    native_front: Path, tmp_path: Path
) -> None:
    """A controller that knows ``submit_env`` and refuses this one (too large: a 422 naming
    the field, as FastAPI words a validator's refusal) is no older controller: the command
    fails with the reason, and the job is not sent again without the environment."""
    reason = "the submitting environment is 2000000 bytes: at most 1048576"

    def refusal(body: Any) -> list[dict[str, Any]]:
        found = [where for where, name in _fields(body) if name == "submit_env"]
        return [
            {"type": "value_error", "loc": [*where, "submit_env"], "msg": f"Value error, {reason}"}
            for where in found
        ]

    with serving(refusal) as (url, received):
        for command, args in paths(native_front)[:1] + paths(native_front)[3:4]:
            done = submitted(command, url, tmp_path, *args)
            assert done.returncode == 2 and reason in done.stderr, (args, done.stderr)
            assert ENV_WARNING not in done.stderr and "Traceback" not in done.stderr
            assert all(sent_env(body) is not None for body in received), args
            received.clear()
