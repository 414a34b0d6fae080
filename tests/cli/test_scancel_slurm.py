"""``fusesched scancel`` says what Slurm 22.05's scancel says, on the same stream, and exits
as it does (cli/scancel_said.py; each case checked against the real one), while ``fusesched
cancel`` keeps its own words. Found with workflow tools: qtoolkit (jobflow-remote) runs
``scancel -v ID`` and looks on stderr for ``scancel: Terminating job ID``; fusesched said
``Cancelling 22`` on stdout, so the tool took the job for unknown.

Against a real controller and agent whose tasks only pretend to run (the signals they get are
recorded), and, for another user's job, a controller with authentication on and a real
agent."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fusesched.agent.client import AgentClient
from fusesched.agent.config import AgentConfig
from fusesched.agent.fake import FakeRuntime
from fusesched.api.wire import NodeInventory
from fusesched.cli.local import LocalCluster
from fusesched.cli.main import app
from fusesched.cli.scancel_said import signal_refusal
from fusesched.controller.server import ControllerServer
from fusesched.sdk import Client

SECONDS = "600"  # (how long a task pretends to run)


@dataclass
class Pretend:
    url: str
    runtime: FakeRuntime
    client: Client

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--controller", self.url])

    def submit(self, cpus: int = 1, script: str | None = None, name: str = "x") -> str:
        group: dict[str, Any] = {
            "resources": {"cpu": cpus},
            "env": {"FUSESCHED_FAKE_DURATION": SECONDS},
        }
        group.update({"script": script} if script else {"argv": ["sleep", SECONDS]})
        [job_id] = self.client.submit({"name": name, "groups": [group]})
        return str(job_id)

    def running(self, job_id: str, tasks: int = 1) -> None:
        deadline = time.monotonic() + 20
        while True:
            shown = self.client.show(job_id)["tasks"]
            if len(shown) >= tasks and all(t["state"] == "Running" for t in shown):
                return
            assert time.monotonic() < deadline, shown
            time.sleep(0.02)

    def signals(self, count: int) -> list[tuple[str, str]]:
        """The first ``count`` signals the tasks got (waiting for them), then cleared."""
        deadline = time.monotonic() + 10
        while len(self.runtime.signals) < count:
            assert time.monotonic() < deadline, self.runtime.signals
            time.sleep(0.02)
        time.sleep(0.3)  # (none more coming)
        got = sorted((task, name) for task, name, _ in self.runtime.signals)
        self.runtime.signals.clear()
        return got


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Pretend]:
    """A real controller and one agent (n1, 2 CPUs) whose tasks only pretend to run."""
    server = ControllerServer(tmp_path / "ctl", port=0, long_poll_s=0.1).start()
    runtime = FakeRuntime(time.time)
    inventory = NodeInventory(name="n1", resources={"cpu": "2", "memory": "1Gi"})
    agent = AgentClient(server.url, inventory, runtime, long_poll_s=0.1)
    agent.start()
    try:
        yield Pretend(server.url, runtime, Client(server.url))
    finally:
        agent.stop()
        server.stop()


def test_verbose_says_terminating_on_stderr_as_slurms(cluster: Pretend) -> None:
    job = cluster.submit()
    cluster.running(job)
    said = cluster.run("scancel", "-v", job)
    assert (said.exit_code, said.stdout) == (0, "")
    assert said.stderr == f"scancel: Terminating job {job}\n"
    cluster.client.wait(job, timeout=20)
    again = cluster.run("scancel", "-v", job)  # (ended: Slurm's error, said with -v, exit 0)
    assert (again.exit_code, again.stdout) == (0, "")
    assert again.stderr == (
        f"scancel: Terminating job {job}\n"
        f"scancel: error: Kill job error on job id {job}: "
        "Job/step already completing or completed\n"
    )
    assert cluster.run("scancel", job).output == ""  # (without -v: nothing)
    own = cluster.run("cancel", job)  # (fusesched's own words, on stdout)
    assert (own.exit_code, own.stdout) == (0, f"Job {job} had already finished\n")


def test_an_unknown_or_malformed_id_as_slurms(cluster: Pretend) -> None:
    unknown = cluster.run("scancel", "99999")
    assert (unknown.exit_code, unknown.output) == (0, "")
    told = cluster.run("scancel", "-v", "99999")
    assert (told.exit_code, told.stdout) == (0, "")
    assert told.stderr == (
        "scancel: Terminating job 99999\n"
        "scancel: error: Kill job error on job id 99999: Invalid job id specified\n"
    )
    for bad in ("abc", "0", "12x"):
        malformed = cluster.run("scancel", bad)
        assert (malformed.exit_code, malformed.stderr) == (
            1,
            f"scancel: error: Invalid job id {bad}\n",
        )
    none = cluster.run("scancel")
    assert (none.exit_code, none.stderr) == (1, "scancel: error: No job identification provided\n")
    own = cluster.run("cancel", "99999")
    assert own.exit_code == 2 and "no job '99999'" in own.stderr


def test_a_signal_is_silent_and_verbose_says_slurms_line(cluster: Pretend) -> None:
    job = cluster.submit()
    cluster.running(job)
    quiet = cluster.run("scancel", "--signal=TERM", job)
    assert (quiet.exit_code, quiet.output) == (0, "")  # (was: "Sent SIGTERM to 1" on stdout)
    assert cluster.signals(1) == [(f"{job}.main.0", "TERM")]
    said = cluster.run("scancel", "-v", "-s", "USR1", job)
    assert (said.exit_code, said.stdout, said.stderr) == (
        0,
        "",
        f"scancel: Signal 10 to job {job}\n",
    )
    full = cluster.run("scancel", "-v", "-s", "USR2", "-f", job)
    assert full.stderr == f"scancel: Signal 12 to full job {job}\n"
    batch = cluster.run("scancel", "-v", "-s", "HUP", "-b", job)
    assert batch.stderr == f"scancel: Signal 1 to batch job {job}\n"
    assert cluster.signals(3) == sorted((f"{job}.main.0", s) for s in ("USR1", "USR2", "HUP"))
    own = cluster.run("cancel", "-s", "USR1", job)
    assert own.stdout == f"Sent SIGUSR1 to {job}\n"
    assert cluster.client.show(job)["state"] == "Running"


def test_scancel_signals_a_scripts_steps_not_its_shell(cluster: Pretend) -> None:
    """Slurm 22.05 without ``-b``/``-f`` signals the job's steps only: a batch script whose
    shell does not trap the signal goes on. ``-b``: the shell alone; ``-f``: all; ``fusesched
    cancel --signal`` keeps its documented default, all (as ``-f``)."""
    job = cluster.submit(script="#!/bin/bash\nsrun sleep 600\n")
    cluster.running(job)
    none = cluster.run("scancel", "-s", "TERM", job)  # (no step running: nothing, no error)
    assert (none.exit_code, none.output) == (0, "")
    step = {
        "slots": {"n1": 1},
        "tasks": [
            {"node": "n1", "argv": ["sleep", SECONDS], "env": {"FUSESCHED_FAKE_DURATION": SECONDS}}
        ],
    }
    (step_task,) = cluster.client.start_step(job, step)["task_ids"]
    cluster.running(job, tasks=2)
    shell = f"{job}.main.0"
    assert cluster.run("scancel", "-s", "TERM", job).exit_code == 0
    assert cluster.signals(1) == [(step_task, "TERM")]
    assert cluster.run("scancel", "-s", "USR1", "-b", job).exit_code == 0
    assert cluster.signals(1) == [(shell, "USR1")]
    assert cluster.run("scancel", "-s", "USR2", "-f", job).exit_code == 0
    assert cluster.signals(2) == sorted([(shell, "USR2"), (step_task, "USR2")])
    assert cluster.run("scancel", "-s", "HUP", "-b", "-f", job).exit_code == 0  # (-b ignored)
    assert cluster.signals(2) == sorted([(shell, "HUP"), (step_task, "HUP")])
    assert cluster.run("cancel", "-s", "INT", job).exit_code == 0
    assert cluster.signals(2) == sorted([(shell, "INT"), (step_task, "INT")])
    assert cluster.run("scancel", "-s", "TERM", "-n", "x").exit_code == 0  # (by filter too)
    assert cluster.signals(1) == [(step_task, "TERM")]
    assert cluster.client.show(job)["state"] == "Running"


def test_signalling_a_waiting_job_as_slurms(cluster: Pretend) -> None:
    big = cluster.submit(cpus=2)
    cluster.running(big)
    waiting = cluster.submit(cpus=2)
    said = cluster.run("scancel", "-s", "USR1", waiting)
    assert (said.exit_code, said.stdout) == (228, "")
    assert said.stderr == (
        f"scancel: error: Kill job error on job id {waiting}: "
        "Job can not be altered now, try again later\n"
    )
    told = cluster.run("scancel", "-v", "-s", "USR1", waiting, big)
    assert told.exit_code == 228  # (the worst of the jobs', as Slurm's)
    assert told.stderr.splitlines() == [
        f"scancel: Signal 10 to job {waiting}",
        f"scancel: error: Kill job error on job id {waiting}: "
        "Job can not be altered now, try again later",
        f"scancel: Signal 10 to job {big}",
    ]
    own = cluster.run("cancel", "-s", "USR1", waiting)
    assert own.exit_code == 2
    assert f"job {waiting} is waiting: only a running job can be signalled" in own.stderr


def test_a_signal_to_an_unknown_or_ended_job_fails_slurms_check(cluster: Pretend) -> None:
    """With ``--signal`` (or ``-b``) Slurm checks the ids first: an unknown or ended job is
    ``Invalid job id specified``, said even without ``-v`` (not with ``-Q``), exit 1."""
    ended = cluster.submit()
    cluster.running(ended)
    cluster.client.cancel(ended)
    cluster.client.wait(ended, timeout=20)
    for job_id in ("99999", ended):
        said = cluster.run("scancel", "-s", "USR1", job_id)
        assert (said.exit_code, said.stdout) == (1, "")
        assert said.stderr == (
            f"scancel: error: Kill job error on job id {job_id}: Invalid job id specified\n"
        )
        quiet = cluster.run("scancel", "-Q", "-s", "USR1", job_id)
        assert (quiet.exit_code, quiet.output) == (1, "")
    batch = cluster.run("scancel", "-b", "99999")  # (-b without a signal: checked too)
    assert batch.exit_code == 1 and "Invalid job id specified" in batch.stderr


def test_signal_kill_cancels_as_slurms(cluster: Pretend) -> None:
    job = cluster.submit()
    cluster.running(job)
    said = cluster.run("scancel", "-v", "--signal=SIGKILL", job)
    assert (said.exit_code, said.stderr) == (0, f"scancel: Terminating job {job}\n")
    assert cluster.client.wait(job, timeout=20)["state"] == "Cancelled"


def test_filters_say_slurms_lines(cluster: Pretend) -> None:
    job = cluster.submit(name="sweep")
    nothing = cluster.run("scancel", "-v", "-n", "nomatch", "-t", "pd", "-p", "gpu")
    assert (nothing.exit_code, nothing.stdout) == (0, "")
    assert nothing.stderr == (
        "scancel: error: No active jobs match ALL job filters, including: "
        "job_name=nomatch partition=gpu state=PENDING \n"
    )
    assert cluster.run("scancel", "-n", "nomatch").output == ""
    mine = cluster.run("scancel", "-v", "--me", "-n", "nomatch")  # (--me: Slurm says the uid)
    assert mine.stderr.endswith(f"including: job_name=nomatch user_name={os.getuid()} \n")
    said = cluster.run("scancel", "-v", "-n", "sweep")
    assert (said.exit_code, said.stderr) == (0, f"scancel: Terminating job {job}\n")


def test_json_keeps_fusesched_answer(cluster: Pretend) -> None:
    job = cluster.submit()
    cluster.running(job)
    answer = cluster.run("scancel", "--json", "-s", "USR1", job)
    assert answer.exit_code == 0 and f'"signalled": [\n    "{job}"\n  ]' in answer.stdout


def test_fusescheds_own_refusals_keep_their_reason() -> None:
    """What Slurm has no word for is said in fusesched's (exit 1)."""
    reason = "node n1's agent is too old to deliver signals (job 5 runs there): upgrade its agent"
    assert signal_refusal(reason) == (1, reason)


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[LocalCluster]:
    """A controller with authentication on and one real agent."""
    shared = Path(tempfile.mkdtemp(prefix="fusesched-scancel-"))
    shared.chmod(0o755)
    agent = AgentConfig(
        name="node-a",
        address="127.0.0.1",
        cpu=2,
        memory="2Gi",
        work_dir=shared / "work",
        image_cache_dir=shared / "images",
        nvml=False,
        run_as_users=False,
        memory_cgroup=False,
    )
    local = LocalCluster(tmp_path / "data", port=0, agents=[agent], long_poll_s=0.5, auth=True)
    try:
        with local:
            yield local
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_another_users_job_is_access_denied_as_slurms(secure: LocalCluster) -> None:
    admin = Client(secure.url, token=secure.admin_token)
    tokens = {
        who: admin.create_token(who, tenant="t", role="user")["token"] for who in ("alice", "bob")
    }
    alice = Client(secure.url, token=tokens["alice"])
    [job] = alice.submit({"groups": [{"resources": {"cpu": 1}, "argv": ["sleep", "600"]}]})
    deadline = time.monotonic() + 20
    while alice.show(job)["state"] != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.05)

    def bob(*args: str) -> Any:
        return CliRunner().invoke(
            app, [*args, "--controller", secure.url, "--token", tokens["bob"]]
        )

    denied = f"scancel: error: Kill job error on job id {job}: Access/permission denied\n"
    for args in ([job], ["-s", "USR1", job], ["-u", "alice"]):
        said = bob("scancel", *args)
        assert (said.exit_code, said.stdout, said.stderr) == (210, "", denied), args
    assert alice.show(job)["state"] == "Running"
    alice.cancel(job)


def _array(cluster: Pretend, last: int, hold: bool = False) -> str:
    """An array of members 1..last, each a task of 1 CPU that pretends to run."""
    group = {"resources": {"cpu": 1}, "env": {"FUSESCHED_FAKE_DURATION": SECONDS}}
    request: dict[str, Any] = {
        "name": "arr",
        "groups": [group | {"argv": ["sleep", SECONDS]}],
        "array": {"start": 1, "stop": last},
        "hold": hold,
    }
    [job_id] = cluster.client.submit(request)
    return str(job_id)


def _members_running(cluster: Pretend, ids: list[str]) -> None:
    deadline = time.monotonic() + 20
    while any(cluster.client.show(i)["state"] != "Running" for i in ids):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_an_arrays_members_signalled_as_slurms(cluster: Pretend) -> None:
    """Checked against Slurm 22.05's scancel: a running array's id says each member
    signalled; a combined id of waiting members is refused (228; was: exit 0 and "No active
    jobs match ALL job filters, including: "), one of members that are none fails the check
    (1, each member said; was: exit 0); an array with a waiting member is 228 too."""
    mixed = _array(cluster, 3)  # (n1 has 2 CPUs: members 1 and 2 run, 3 waits)
    _members_running(cluster, [f"{mixed}_1", f"{mixed}_2"])
    held = _array(cluster, 3, hold=True)
    said = cluster.run("scancel", "-v", "-s", "USR1", mixed)
    transition = "Job can not be altered now, try again later"
    assert (said.exit_code, said.stdout) == (228, "")
    assert said.stderr.splitlines() == [
        f"scancel: Signal 10 to job {mixed}_1",
        f"scancel: Signal 10 to job {mixed}_2",
        f"scancel: Signal 10 to job {mixed}_3",
        f"scancel: error: Kill job error on job id {mixed}_3: {transition}",
    ]
    assert cluster.signals(2) == [(f"{mixed}_{i}.main.0", "USR1") for i in (1, 2)]
    running = cluster.run("scancel", "-v", "-s", "USR2", f"{mixed}_[1-2]")
    assert (running.exit_code, running.stderr) == (
        0,
        f"scancel: Signal 12 to job {mixed}_1\nscancel: Signal 12 to job {mixed}_2\n",
    )
    assert cluster.signals(2) == [(f"{mixed}_{i}.main.0", "USR2") for i in (1, 2)]
    waiting = cluster.run("scancel", "-s", "USR1", f"{held}_[1-2]")
    assert (waiting.exit_code, waiting.stdout) == (228, "")
    assert waiting.stderr.splitlines() == [
        f"scancel: error: Kill job error on job id {held}_{i}: {transition}" for i in (1, 2)
    ]
    none = cluster.run("scancel", "-s", "USR1", f"{held}_[8-9]")
    assert (none.exit_code, none.stdout) == (1, "")
    assert none.stderr.splitlines() == [
        f"scancel: error: Kill job error on job id {held}_{i}: Invalid job id specified"
        for i in (8, 9)
    ]
    assert cluster.runtime.signals == []


def test_an_arrays_members_cancelled_as_slurms(cluster: Pretend) -> None:
    """``scancel -v 7_[1-2]`` says the id as given, as Slurm 22.05's (``Terminating job
    7_[1-2]``; was a line per member), and for members that are none, Slurm's error with
    ``-v`` (was: ``No active jobs match ALL job filters, including: ``), exit 0."""
    held = _array(cluster, 3, hold=True)
    said = cluster.run("scancel", "-v", f"{held}_[1-2]")
    assert (said.exit_code, said.stdout, said.stderr) == (
        0,
        "",
        f"scancel: Terminating job {held}_[1-2]\n",
    )
    assert [cluster.client.show(f"{held}_{i}")["state"] for i in (1, 2, 3)] == [
        "Cancelled",
        "Cancelled",
        "Pending",
    ]
    gone = cluster.run("scancel", "-v", f"{held}_[8-9]")
    assert (gone.exit_code, gone.stderr) == (
        0,
        f"scancel: Terminating job {held}_[8-9]\n"
        f"scancel: error: Kill job error on job id {held}_[8-9]: Invalid job id specified\n",
    )
    assert cluster.run("scancel", f"{held}_[8-9]").output == ""
    checked = cluster.run("scancel", "-b", f"{held}_[8-9]")  # (-b: Slurm's check first)
    assert (checked.exit_code, checked.stderr) == (
        1,
        f"scancel: error: Kill job error on job id {held}_[8-9]: Invalid job id specified\n",
    )


def test_a_signal_by_filter_refuses_a_waiting_job_as_slurms(cluster: Pretend) -> None:
    """Slurm's ``scancel -s USR1 -u USER`` signals every job of the user's that has not
    ended, and a waiting one is refused (228; checked against Slurm 22.05's); fusesched's
    ``cancel`` signals the running ones alone, as it documents."""
    big = cluster.submit(cpus=2, name="f")
    cluster.running(big)
    waiting = cluster.submit(cpus=2, name="f")
    said = cluster.run("scancel", "-v", "-s", "USR1", "-n", "f")
    assert (said.exit_code, said.stdout) == (228, "")
    assert said.stderr.splitlines() == [
        f"scancel: Signal 10 to job {big}",
        f"scancel: Signal 10 to job {waiting}",
        f"scancel: error: Kill job error on job id {waiting}: "
        "Job can not be altered now, try again later",
    ]
    assert cluster.signals(1) == [(f"{big}.main.0", "USR1")]
    own = cluster.run("cancel", "-s", "USR1", "-n", "f")
    assert (own.exit_code, own.stdout) == (0, f"Sent SIGUSR1 to {big}\n")
