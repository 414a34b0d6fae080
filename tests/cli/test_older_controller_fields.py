"""A controller one release older than ``attended`` and ``hetjob`` (it refuses every request
field it does not know, FastAPI's 422) takes a plain job from this release's commands: the
request names those two fields only when true (submit/request.py), and a heterogeneous job
still says ``hetjob: true``. Real processes against a real HTTP server on loopback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import FULL_COMMAND
from tests.cli.old_controller import serving

from fusesched.submit.request import JobRequest

PYTHON = [sys.executable, "-m", "fusesched"]
#: The fields this release added to a job request.
NEW = frozenset({"attended", "hetjob"})
#: The fields the older controller knows.
KNOWN = frozenset(JobRequest.model_fields) - NEW
SCRIPT = "#!/bin/sh\n#SBATCH -J s\ntrue\n"
YAML = 'name: y\ngroups:\n  - resources: {cpu: 1}\n    argv: ["true"]\n'
OLDER = "the controller is older than this command"


def _refusal(body: Any) -> list[dict[str, Any]]:
    """FastAPI's 422 items for each field of a job ``KNOWN`` lacks (files sent as text to
    ``/v1/submissions`` are parsed there: none)."""
    if isinstance(body, dict) and "files" in body:
        return []
    items = body if isinstance(body, list) else [body]
    said = "Extra inputs are not permitted"
    return [
        {"type": "extra_forbidden", "loc": ["body", i, key], "msg": said}
        for i, item in enumerate(items)
        for key in item
        if key not in KNOWN
    ]


@pytest.fixture
def older() -> Iterator[tuple[str, list[Any]]]:
    with serving(_refusal) as served:
        yield served


def _run(url: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "USER": "ann", "FUSESCHED_CONTROLLER": url, "LANG": "C.UTF-8"}
    env["XDG_CONFIG_HOME"] = str(folder / "config")
    command = FULL_COMMAND if "--parsable" in args else PYTHON  # (the full command's request)
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, cwd=folder, env=env, timeout=60
    )


def _jobs(body: Any) -> list[dict[str, Any]]:
    return body if isinstance(body, list) else [body]


@pytest.mark.parametrize(
    "args",
    [
        ("sbatch", "--parsable", "job.sh"),  # the full command: the request as the CLI parsed it
        ("submit", "--parsable", "job.sh"),
        ("submit", "--parsable", "a.yaml"),
        ("submit", "--parsable", "a.yaml", "b.yaml"),  # (several: POST /v1/jobs/batch)
        ("sbatch", "job.sh"),  # the quick path (text, parsed by the controller)
    ],
)
def test_a_plain_job_is_taken_by_an_older_controller(
    older: tuple[str, list[Any]], tmp_path: Path, args: tuple[str, ...]
) -> None:
    url, received = older
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "a.yaml").write_text(YAML)
    (tmp_path / "b.yaml").write_text(YAML.replace("name: y", "name: z"))
    done = _run(url, tmp_path, *args)
    assert done.returncode == 0 and OLDER not in done.stderr, done.stderr
    assert done.stdout.split().count("5") == (2 if "b.yaml" in args else 1), done.stdout
    assert len(received) == 1  # (taken at once, not sent again)
    assert not [k for job in _jobs(received[0]) if "files" not in job for k in job if k in NEW]


def test_run_is_taken_by_an_older_controller_after_one_warning(
    older: tuple[str, list[Any]], tmp_path: Path
) -> None:
    """``fusesched run`` sends ``attended: true`` (explicit: kept), refused; sent again
    without it, the job names no other new field and is taken. (No ``GET`` is answered:
    run stops after submitting.)"""
    url, received = older
    done = _run(url, tmp_path, "run", "-Q", "true")
    assert "Traceback" not in done.stderr and done.stderr.count(OLDER) == 1, done.stderr
    assert [sorted(NEW.intersection(body)) for body in received] == [["attended"], []]


def test_a_heterogeneous_job_still_says_so(tmp_path: Path) -> None:
    """An explicit true is sent as before (to a controller that knows the fields)."""
    with serving(lambda body: []) as (url, received):
        (tmp_path / "job.sh").write_text(SCRIPT)
        done = _run(url, tmp_path, "sbatch", "--parsable", "-n1", ":", "-n2", "job.sh")
    assert done.returncode == 0, done.stderr
    assert [body.get("hetjob") for body in received] == [True]
    assert "attended" not in received[0]
