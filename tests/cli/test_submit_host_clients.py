"""Every submitting path sends the host it runs on (``submit_host``: the jobs'
``SLURM_SUBMIT_HOST``): the quick path and the native front in each file (the controller
parses the script), the full command and ``run`` in the job they parsed (with the Slurm
options' ``slurm_options``), the SDK in each file it is given. A controller older than those
fields refuses them (422 naming them, nothing submitted): each path sends the job again
without them, saying nothing (such a controller tells the tasks none of it anyway). Real
processes against a real HTTP server on loopback († ``run`` goes on to ask for the job it
submitted, which this server does not answer)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.old_controller import serving
from tests.cli.test_submit_env_clients import paths, submitted

from fusesched.model.submit_host import this_host
from fusesched.sdk import Client, ControllerError

NEWER = ("submit_host", "slurm_options")


def hosts(body: Any) -> list[Any]:
    """The ``submit_host`` of each file, or of each job, a request body sends (None: none)."""
    if isinstance(body, dict) and "files" in body:
        return [item.get("submit_host") for item in body["files"]]
    return [item.get("submit_host") for item in (body if isinstance(body, list) else [body])]


def fields(body: Any) -> list[tuple[list[Any], str]]:
    """(location, name) of every field of :data:`NEWER` in a request body."""
    if isinstance(body, dict) and "files" in body:
        items = [(["body", "files", i], item) for i, item in enumerate(body["files"])]
    else:
        jobs = body if isinstance(body, list) else [body]
        items = [
            (["body", i] if isinstance(body, list) else ["body"], j) for i, j in enumerate(jobs)
        ]
    return [(where, name) for where, item in items for name in NEWER if name in item]


@pytest.fixture
def older() -> Iterator[tuple[str, list[Any]]]:
    """A controller older than ``submit_host`` and ``slurm_options``."""

    def refusal(body: Any) -> list[dict[str, Any]]:
        return [
            {"type": "extra_forbidden", "loc": [*where, name], "msg": "Extra inputs"}
            for where, name in fields(body)
        ]

    with serving(refusal) as served:
        yield served


def test_this_host_is_the_one_gethostname_says() -> None:
    assert this_host() == socket.gethostname()  # (a name the pattern takes, on this machine)


def test_every_path_sends_the_host(native_front: Path, tmp_path: Path) -> None:
    with serving(lambda body: []) as (url, received):
        for command, args in paths(native_front):
            done = submitted(command, url, tmp_path, *args)
            assert done.returncode == 0 or args[0] == "run", (args, done.stderr)  # (†)
            (body,) = received
            assert hosts(body) == [socket.gethostname()], (args, body)
            received.clear()
        options = ("sbatch", "--parsable", "--ntasks-per-node=1", "-d", "singleton", "job.sh")
        done = submitted(paths(native_front)[1][0], url, tmp_path, *options)
        assert done.returncode == 0, done.stderr
        (body,) = received
        assert body["slurm_options"] == {"ntasks_per_node": 1, "dependency": "singleton"}


def test_an_older_controller_gets_the_job_without_them(
    older: tuple[str, list[Any]], native_front: Path, tmp_path: Path
) -> None:
    url, received = older
    for command, args in paths(native_front):
        args = (*args[:-1], "--ntasks-per-node=1", args[-1]) if args[0] == "sbatch" else args
        done = submitted(command, url, tmp_path, *args)
        assert done.returncode == 0 or args[0] == "run", (args, done.stderr)  # (†)
        assert "5" in done.stdout + done.stderr, (args, done.stdout, done.stderr)
        assert "older than this command" not in done.stderr, done.stderr  # (said nothing)
        assert "Traceback" not in done.stderr, done.stderr
        first, taken = received[0], received[-1]
        assert fields(first) and not fields(taken), (args, received)
        assert "submit_env" in (taken if isinstance(taken, dict) else taken[0])  # (kept)
        received.clear()


def test_the_sdk_says_this_host_unless_told_otherwise() -> None:
    with serving(lambda body: []) as (url, received):
        client = Client(url)
        given = {"name": "a.sh", "text": "#!/bin/sh\n"}
        client.submit_files([given])
        assert given == {"name": "a.sh", "text": "#!/bin/sh\n"}  # (the caller's, unchanged)
        mine = {"name": "b.sh", "text": "#!/bin/sh\n", "submit_host": "login-9"}
        client.submit_files([mine, {"name": "c.sh", "text": "#!/bin/sh\n", "submit_host": None}])
        assert [hosts(body) for body in received] == [
            [socket.gethostname()],
            ["login-9", None],
        ]


def test_the_sdk_sends_an_older_controller_the_files_without_the_host_it_added(
    older: tuple[str, list[Any]],
) -> None:
    url, received = older
    client = Client(url)
    assert client.submit_files([{"name": "a.sh", "text": "#!/bin/sh\n"}])["ids"] == ["5"]
    assert [hosts(body) for body in received] == [[socket.gethostname()], [None]]
    received.clear()
    with pytest.raises(ControllerError, match="submit_host"):  # (the caller's own: its call)
        client.submit_files([{"name": "b.sh", "text": "#!/bin/sh\n", "submit_host": "x"}])
    assert len(received) == 1
