"""Advance reservations end to end (docs/RESERVATIONS.md): a controller with authentication
and three real agents. Cluster-admins create, list, change and delete reservations (REST and
CLI); a job submitted into one waits for its window and runs on its nodes, also across a
controller restart, and follows a change of the window; other jobs keep off reserved nodes;
the refusals are clear 4xx."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client, ControllerError
from fusesched.store.schema import events
from live.conftest import agent_configs

# jobs start at a reservation's edge, timed to the second: run alone, after the others
# (Makefile)
pytestmark = pytest.mark.serial

FUSESCHED = str(Path(sys.executable).with_name("fusesched"))


def job(argv: list[str], **extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": argv}
    return {"name": extra.pop("name", "resv"), "walltime_s": 60, "groups": [group], **extra}


def status_of(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ControllerError) as refused:
        call(*args, **kwargs)
    return refused.value.status, str(refused.value)


def wait_for(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def cli(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FUSESCHED, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "FUSESCHED_CONTROLLER": url,
            "FUSESCHED_TOKEN": token,
            "PATH": "/usr/bin:/bin",
            "COLUMNS": "200",
        },
    )


class Site:
    """The cluster (restartable on the same data) and its people's tokens."""

    def __init__(self, data: Path, agents: Path) -> None:
        self.data, self.agents = data, agents
        self.cluster = self._start()
        admin = self.cluster.admin_token
        assert admin is not None
        self.tokens = {"admin": admin}
        for who, tenant in (("alice", "physics"), ("bob", "biology")):
            self.tokens[who] = self.client("admin").create_token(who, tenant=tenant)["token"]

    def _start(self) -> LocalCluster:
        cluster = LocalCluster(
            self.data, port=0, agents=agent_configs(self.agents), long_poll_s=0.5, auth=True
        )
        return cluster.start()

    def client(self, who: str) -> Client:
        return Client(self.cluster.url, token=self.tokens[who])

    def restart(self) -> None:
        self.cluster.stop()
        self.cluster = self._start()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    agents = Path(tempfile.mkdtemp(prefix="fusesched-agents-"))
    agents.chmod(0o755)
    made: Site | None = None
    try:
        made = Site(tmp_path / "data", agents)
        yield made
    finally:
        if made is not None:
            made.cluster.stop()
        shutil.rmtree(agents, ignore_errors=True)


def test_reservations_end_to_end(site: Site) -> None:
    admin, alice, bob = (site.client(w) for w in ("admin", "alice", "bob"))
    now = time.time()
    hour = now + 3600

    # --- who may, and what is refused
    assert status_of(alice.create_reservation, "mine", ["node-a"], now, hour)[0] == 403
    code, why = status_of(admin.create_reservation, "x", ["node-z"], now, hour)
    assert (code, "unknown node(s): node-z" in why) == (400, True)
    code, why = status_of(admin.create_reservation, "x", ["node-a"], hour, hour)
    assert code == 400 and "must come after the start" in why
    code, why = status_of(admin.create_reservation, "x", ["node-a"], now - 100, now - 10)
    assert code == 400 and "has passed" in why
    assert status_of(admin.create_reservation, "bad name", ["node-a"], now, hour)[0] == 422
    assert status_of(admin.delete_reservation, "nope")[0] == 404

    # --- a maintenance window on node-b now, a project's window on node-a soon (by the CLI)
    made = admin.create_reservation("maint", ["node-b"], now - 1, hour)
    assert made["reservation"]["maintenance"] is True and made["warnings"] == []
    opens = time.time() + 8
    created = cli(
        site.cluster.url,
        site.tokens["admin"],
        "reservation",
        "create",
        "proj",
        "--nodes",
        "node-a",
        "--start",
        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(opens))}",
        "--duration",
        "1h",
        "--users",
        "alice",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    proj = json.loads(created.stdout)["reservation"]
    assert proj["nodes"] == ["node-a"] and proj["users"] == ["alice"]
    assert proj["active"] is False and proj["end"] - proj["start"] == 3600
    opens = proj["start"]
    assert status_of(admin.create_reservation, "proj", ["node-c"], now, hour)[0] == 409
    code, why = status_of(admin.create_reservation, "p2", ["node-a", "node-c"], now, hour)
    assert code == 409 and "node-a already reserved by proj" in why
    code, why = status_of(admin.create_reservation, "e", ["node-c"], now, hour, [""])
    assert code == 422 and "at least 1 character" in why  # (an empty user name)
    assert status_of(admin.create_reservation, "far", ["node-c"], now, 3e11)[0] == 422
    refused = cli(site.cluster.url, site.tokens["alice"], "reservation", "delete", "proj")
    assert refused.returncode == 2 and "only cluster-admins" in refused.stderr

    # --- submissions into it: only alice, only into a reservation for people
    mine = alice.submit(job(["sh", "-c", "echo in-window"], reservation="proj"))
    code, why = status_of(bob.submit, job(["true"], reservation="proj"))
    assert code == 400 and "user 'bob' (tenant 'biology') may not use reservation proj" in why
    code, why = status_of(alice.submit, job(["true"], reservation="maint"))
    assert code == 400 and "maintenance reservation" in why
    code, why = status_of(alice.submit, job(["true"], reservation="nope"))
    assert code == 400 and "reservation 'nope' does not exist" in why
    shown = alice.show(mine)
    assert shown["state"] == "Pending"
    assert shown["reason"].startswith("reservation proj starts at ")
    assert shown["reason"].endswith(" UTC")  # (as the scheduler says it)
    # an outsider whose time limit reaches into proj's window: on neither reserved node
    outsider = bob.submit(job(["sleep", "300"], walltime_s=300))
    running = wait_for("the outsider to start", lambda: bob.show(outsider)["state"] == "Running")
    assert running and bob.show(outsider)["nodes"] == ["node-c"]

    # --- a restart keeps both reservations and the waiting job
    site.restart()
    admin, alice, bob = (site.client(w) for w in ("admin", "alice", "bob"))
    listed = cli(site.cluster.url, site.tokens["alice"], "reservation", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["name"] for r in json.loads(listed.stdout)] == ["maint", "proj"]
    table = cli(site.cluster.url, site.tokens["alice"], "reservation", "list").stdout
    assert "maintenance" in table and "user alice" in table
    if time.time() < opens - 0.5:
        assert alice.show(mine)["state"] == "Pending"
    done = alice.wait(mine, timeout=60)
    assert done["state"] == "Completed" and done["nodes"] == ["node-a"]
    assert done["start_time"] >= opens
    assert "in-window" in alice.logs(mine)

    # --- warnings for running jobs (the outsider was requeued by the restart: it keeps off
    # the reserved nodes again), deletion rejects the waiting ones
    again = lambda: bob.show(outsider)["state"] == "Running"  # noqa: E731
    assert wait_for("the outsider to run again", again, timeout=90)
    assert bob.show(outsider)["nodes"] == ["node-c"]
    soon = admin.create_reservation("soon", ["node-c"], time.time() + 60, hour + 60, ["alice"])
    assert any(f"job {outsider} runs on node-c" in w for w in soon["warnings"]), soon
    waiting = alice.submit(job(["true"], reservation="soon"))
    deleted = cli(site.cluster.url, site.tokens["admin"], "reservation", "delete", "soon")
    assert deleted.returncode == 0, deleted.stderr
    gone = alice.wait(waiting, timeout=30)
    assert gone["state"] == "Cancelled" and "reservation soon deleted" in gone["reason"]
    assert [r["name"] for r in admin.reservations()] == ["maint", "proj"]
    admin.delete_reservation("maint")
    assert [r["name"] for r in alice.reservations()] == ["proj"]


def test_changing_a_reservation(site: Site) -> None:
    admin, alice, bob = (site.client(w) for w in ("admin", "alice", "bob"))
    now = time.time()
    later = now + 3600
    admin.create_reservation("proj", ["node-a"], later, later + 3600, ["alice"])
    admin.create_reservation("other", ["node-c"], later, later + 3600)
    mine = alice.submit(job(["sh", "-c", "echo moved"], reservation="proj"))
    assert alice.show(mine)["reason"].startswith("reservation proj starts at ")

    # --- who may, and what is refused (nothing changes then)
    assert status_of(alice.update_reservation, "proj", start=now)[0] == 403
    refused = cli(
        site.cluster.url, site.tokens["bob"], "reservation", "update", "proj", "--start", "now"
    )
    assert refused.returncode == 2 and "only cluster-admins" in refused.stderr
    code, why = status_of(admin.update_reservation, "nope", start=now)
    assert code == 404 and "no reservation 'nope'" in why
    code, why = status_of(admin.update_reservation, "proj", end=later - 10)
    assert code == 400 and "must come after the start" in why
    code, why = status_of(admin.update_reservation, "proj", nodes=["node-a", "node-c"])
    assert code == 409 and "node-c already reserved by other" in why
    code, why = status_of(admin.update_reservation, "proj", nodes=["node-z"])
    assert code == 400 and "unknown node(s): node-z" in why
    assert status_of(admin.update_reservation, "proj", duration_s=-5)[0] == 422
    unknown = cli(
        site.cluster.url, site.tokens["admin"], "reservation", "update", "nope", "--end", "now+1h"
    )
    assert unknown.returncode == 2 and "no reservation 'nope'" in unknown.stderr
    assert [(r["name"], r["start"]) for r in admin.reservations()] == [
        ("other", later),
        ("proj", later),
    ]

    # --- the window moves to now (by the CLI): the waiting job runs in it, on its node
    moved = cli(
        site.cluster.url,
        site.tokens["admin"],
        "reservation",
        "update",
        "proj",
        "--start",
        "now",
        "--duration",
        "30m",
        "--users",
        "alice,bob",
        "--json",
    )
    assert moved.returncode == 0, moved.stderr
    changed = json.loads(moved.stdout)["reservation"]
    assert changed["users"] == ["alice", "bob"] and changed["end"] - changed["start"] == 1800
    assert changed["start"] <= time.time() and changed["active"] is True
    done = alice.wait(mine, timeout=60)
    assert done["state"] == "Completed" and done["nodes"] == ["node-a"]
    assert "moved" in alice.logs(mine)
    theirs = bob.submit(job(["true"], reservation="proj"))  # (bob is listed now)
    assert bob.wait(theirs, timeout=60)["nodes"] == ["node-a"]

    # --- a job waiting in it whose user is dropped is rejected, with the reason
    whole = [{"resources": {"cpu": "2", "memory": "64Mi"}, "argv": ["sleep", "30"]}]
    blocker = alice.submit(job([], reservation="proj") | {"groups": whole})  # all of node-a
    wait_for("the blocker to run", lambda: alice.show(blocker)["state"] == "Running")
    waiting = bob.submit(job(["true"], reservation="proj", walltime_s=30))
    assert admin.update_reservation("proj", users=["alice"])["reservation"]["users"] == ["alice"]
    gone = bob.wait(waiting, timeout=30)
    assert gone["state"] == "Cancelled"
    # ("reservation proj changed: " first when the scheduler had seen the job before)
    assert gone["reason"].endswith("user 'bob' (tenant 'biology') may not use reservation proj")
    assert alice.show(blocker)["state"] == "Running"  # running jobs are not touched
    admin.delete_reservation("proj")

    store = site.cluster.server.persist.store
    with store._read() as conn:
        rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings().all()
    updates = [r["data"] for r in rows if r["data"]["action"] == "reservation-update"]
    assert len(updates) == 2 and {u["by"] for u in updates} == {"admin"}
