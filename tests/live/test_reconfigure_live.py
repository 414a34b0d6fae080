"""Changing a running controller's tenancy file and licenses with real agents and tasks:
``fusesched reconfigure`` (and SIGHUP to a real controller process) applies an edited quota,
so a waiting job starts; an invalid file or removing a queue in use changes nothing; only
cluster-admins may ask; license counts change live (docs/TENANCY.md, docs/LICENSES.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fusesched.cli.local import AgentHandle, LocalCluster, start_agent
from fusesched.controller.reconfigure import read_tenancy_file
from fusesched.controller.server import ControllerServer
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client

from .conftest import agent_configs, drop_postgres, fresh_postgres_url, local_cluster
from .test_cli import as_json, fusesched
from .test_recovery import FUSESCHED, free_port, wait_for


def tenancy(small: int) -> dict[str, Any]:
    """Queue ``small`` with ``small`` CPUs of quota, queue ``lic`` with 8."""

    def queue(name: str, cpus: int) -> dict[str, Any]:
        return {"name": name, "flavors": [{"name": "cpu", "resources": {"cpu": cpus}}]}

    return {
        "flavors": [{"name": "cpu", "resources": ["cpu"]}],
        "organisations": [
            {
                "name": "lab",
                "tenants": [{"name": "ml", "queues": [queue("small", small), queue("lic", 8)]}],
            }
        ],
    }


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(data))


def gated(scratch: Path, name: str, queue: str, **extra: Any) -> dict[str, Any]:
    """A one-CPU job that runs until the file ``scratch/<name>.go`` exists."""
    gate = scratch / f"{name}.go"
    group = {
        "resources": {"cpu": "1", "memory": "64Mi"},
        "argv": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"],
    }
    return {"name": name, "walltime_s": 300, "queue": queue, "groups": [group], **extra}


def state(client: Client, job_id: str) -> str:
    return str(client.show(job_id)["state"])


@pytest.fixture
def tenancy_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenancy.yaml"
    write(path, tenancy(small=1))
    return path


@pytest.fixture
def admin_cluster(tmp_path: Path, tenancy_file: Path) -> Iterator[LocalCluster]:
    core = CoreConfig(
        placement="best-fit",
        tenancy=read_tenancy_file(tenancy_file),
        licenses=(("matlab", 1),),
    )
    with local_cluster(
        tmp_path / "data", core=core, auth=True, tenancy_file=tenancy_file
    ) as cluster:
        yield cluster


def test_reconfigure_applies_an_edited_quota_and_refuses_bad_changes(
    admin_cluster: LocalCluster, scratch: Path, tenancy_file: Path
) -> None:
    token = admin_cluster.admin_token
    assert token is not None
    admin = Client(admin_cluster.url, token=token)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return fusesched(admin_cluster, "reconfigure", *args, "--token", token)

    first = admin.submit(gated(scratch, "first", "small"))
    second = admin.submit(gated(scratch, "second", "small"))
    wait_for("the first job to start", lambda: state(admin, first) == "Running")
    assert state(admin, second) == "Pending"  # small's quota is 1 CPU
    # a user, even a tenant-admin, may not
    for role in ("user", "tenant-admin"):
        other = admin.create_token("alice", tenant="ml", role=role)["token"]
        denied = fusesched(admin_cluster, "reconfigure", "--token", other)
        assert denied.returncode == 2
        assert "only cluster-admins may reconfigure the controller" in denied.stderr
    # an invalid file: the startup error, nothing changes
    tenancy_file.write_text("flavors: [{name: cpu, resources: [cpu]}]\norganisations: 3\n")
    bad = cli()
    assert bad.returncode == 2
    assert f"{tenancy_file}: config: 'organisations' must be a list" in bad.stderr
    assert "nothing was changed" in bad.stderr
    # removing the queue the two jobs use: refused
    gone = tenancy(small=1)
    gone["organisations"][0]["tenants"][0]["queues"].pop(0)
    write(tenancy_file, gone)
    refused = cli()
    assert refused.returncode == 2
    assert "queue small has 1 waiting and 1 running jobs: drain it first" in refused.stderr
    time.sleep(0.5)
    assert state(admin, second) == "Pending"  # the old quota still applies
    # raised: a dry run says so and changes nothing; then it applies and the job starts
    write(tenancy_file, tenancy(small=2))
    dry = cli("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run, nothing changed" in dry.stdout
    assert "queue small changed (quota cpu/cpu nominal 1 → 2)" in dry.stdout
    assert state(admin, second) == "Pending"
    done = cli()
    assert done.returncode == 0, done.stderr
    assert f"re-read {tenancy_file}: applied" in done.stdout
    assert "queue small changed (quota cpu/cpu nominal 1 → 2)" in done.stdout
    wait_for("the second job to start", lambda: state(admin, second) == "Running")
    queues = as_json(fusesched(admin_cluster, "queues", "--json", "--token", token))
    small = next(q for q in queues if q["name"] == "small")
    assert small["quota"][0]["nominal"] == "2" and small["quota"][0]["used"] == "2"
    # shrunk below use: both keep running
    write(tenancy_file, tenancy(small=1))
    shrunk = cli()
    assert shrunk.returncode == 0, shrunk.stderr
    assert "queue small uses 2 cpu/cpu, above its new nominal quota of 1" in shrunk.stdout
    assert state(admin, first) == state(admin, second) == "Running"
    for name in ("first", "second"):
        (scratch / f"{name}.go").touch()
    assert admin.wait(second, timeout=60)["state"] == "Completed"


def test_license_counts_change_live(admin_cluster: LocalCluster, scratch: Path) -> None:
    token = admin_cluster.admin_token
    assert token is not None
    admin = Client(admin_cluster.url, token=token)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return fusesched(admin_cluster, "reconfigure", *args, "--token", token)

    one = admin.submit(gated(scratch, "one", "lic", licenses={"matlab": 1}))
    two = admin.submit(gated(scratch, "two", "lic", licenses={"matlab": 1}))
    wait_for("the first job to start", lambda: state(admin, one) == "Running")
    assert state(admin, two) == "Pending"  # one license
    raised = cli("--licenses", "matlab:2")
    assert raised.returncode == 0, raised.stderr
    assert "license matlab changed (count 1 → 2)" in raised.stdout
    wait_for("the second job to start", lambda: state(admin, two) == "Running")
    lowered = cli("--licenses", "matlab:1")
    assert lowered.returncode == 0, lowered.stderr
    assert "running jobs hold 2, above the new count 1" in lowered.stdout
    rows = as_json(fusesched(admin_cluster, "licenses", "--json", "--token", token))
    assert [(r["total"], r["in_use"], r["free"]) for r in rows] == [(1, 2, 0)]
    assert state(admin, one) == state(admin, two) == "Running"  # they keep running
    auth = {"authorization": f"Bearer {token}"}
    metrics = httpx.get(f"{admin_cluster.url}/metrics", headers=auth).text
    assert 'fusesched_license_total{license="matlab"} 1.0' in metrics
    assert 'fusesched_license_in_use{license="matlab"} 2.0' in metrics
    removed = cli("--licenses", "none")
    assert removed.returncode == 2
    assert "license matlab is held by 2 running jobs" in removed.stderr
    malformed = cli("--licenses", "matlab:lots")
    assert malformed.returncode == 2 and "--licenses" in malformed.stderr
    for name in ("one", "two"):
        (scratch / f"{name}.go").touch()
    assert admin.wait(two, timeout=60)["state"] == "Completed"


def test_sighup_makes_a_controller_process_reread_its_file(
    tmp_path: Path, scratch: Path, tenancy_file: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "controller.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                *(FUSESCHED, "controller", "--data-dir", str(tmp_path / "data")),
                *("--port", str(port), "--no-auth", "--tenancy", str(tenancy_file)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    agents: list[AgentHandle] = []
    try:
        client = Client(url)
        wait_for("the controller", lambda: client.health() or True)
        root = scratch / "agents"
        root.mkdir(mode=0o755)
        agents.append(start_agent(url, agent_configs(root)[2], long_poll_s=0.5))
        first = client.submit(gated(scratch, "first", "small"))
        second = client.submit(gated(scratch, "second", "small"))
        wait_for("the first job to start", lambda: state(client, first) == "Running")
        # an invalid file: the controller says why and goes on as before
        tenancy_file.write_text("organisations: [\n")
        proc.send_signal(signal.SIGHUP)
        wait_for("the refusal in the log", lambda: "not valid YAML" in log.read_text())
        assert proc.poll() is None and state(client, second) == "Pending"
        write(tenancy_file, tenancy(small=2))
        proc.send_signal(signal.SIGHUP)
        wait_for("the second job to start", lambda: state(client, second) == "Running")
        said = log.read_text()
        assert f"SIGHUP: re-read {tenancy_file}: queue small changed" in said
        assert "nominal 1 → 2" in said
        (queue,) = [q for q in client.queues() if q["name"] == "small"]
        assert queue["quota"][0]["nominal"] == "2"
        for name in ("first", "second"):
            (scratch / f"{name}.go").touch()
        assert client.wait(second, timeout=60)["state"] == "Completed"
    finally:
        for agent in agents:
            agent.stop()
        proc.terminate()
        proc.wait(timeout=10)


def test_a_sighup_while_the_controller_starts_does_not_end_it(tmp_path: Path) -> None:
    """A SIGHUP's default is to end the process: the controller takes it from its first
    step (here it is still reading its tenancy file, a FIFO fed by the test), says there is
    nothing to re-read yet, and starts as usual."""
    fifo = tmp_path / "tenancy.fifo"
    os.mkfifo(fifo)
    port = free_port()
    log = tmp_path / "controller.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                *(FUSESCHED, "controller", "--data-dir", str(tmp_path / "data")),
                *("--port", str(port), "--no-auth", "--tenancy", str(fifo)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        writer = -1
        deadline = time.monotonic() + 30
        while writer < 0:  # (opens once the controller opened it to read: it is reading)
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        try:
            proc.send_signal(signal.SIGHUP)
            answered = lambda: "SIGHUP: not leading" in log.read_text()  # noqa: E731
            wait_for("the SIGHUP's answer", lambda: proc.poll() is not None or answered())
            assert proc.poll() is None, f"ended by the SIGHUP ({proc.returncode})"
            os.set_blocking(writer, True)
            os.write(writer, yaml.safe_dump(tenancy(small=1)).encode())
        finally:
            os.close(writer)
        client = Client(f"http://127.0.0.1:{port}")
        wait_for("the controller", lambda: client.health() or True)
        assert [q["name"] for q in client.queues()] == ["lic", "small"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_standby_reads_the_edited_file_when_it_takes_over(
    tmp_path: Path, tenancy_file: Path
) -> None:
    """A leader and a standby on PostgreSQL, both started with the file; it is edited (and
    applied on the leader); the leader stops; the standby leads with the edited file."""
    url = fresh_postgres_url()
    servers: list[ControllerServer] = []
    try:
        core = CoreConfig(placement="best-fit", tenancy=read_tenancy_file(tenancy_file))
        for name in ("a", "b"):
            servers.append(
                ControllerServer(
                    tmp_path / name,
                    port=0,
                    database_url=url,
                    core=core,
                    standby=True,
                    tenancy_file=tenancy_file,
                )
            )
        leader, standby = servers
        leader.start()
        waiting = threading.Thread(target=standby.start, daemon=True)
        waiting.start()
        write(tenancy_file, tenancy(small=3))
        Client(leader.url).reconfigure()
        assert nominal_of(leader, "small") == 3_000  # (millicores)
        leader.stop()
        waiting.join(timeout=30)
        assert not waiting.is_alive()
        assert nominal_of(standby, "small") == 3_000
        assert standby.controller.config.tenancy_file == tenancy_file
    finally:
        for server in servers:
            server.stop()
        drop_postgres(url)


def nominal_of(server: ControllerServer, queue: str) -> int:
    gate = server.controller.core.tenants
    assert gate is not None
    return gate.ledger.nominal(queue)[("cpu", "cpu")]
