"""Security of the live platform, end to end: a controller with authentication and three
real agents. Every route of the API is checked without a token, with wrong tokens and with
another tenant's token; then role escalation, node identity (join tokens, node credentials),
job credentials, what is stored and logged, the bootstrap token, TLS and the CLI."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from sqlalchemy import select

from fusesched.agent.config import AgentConfig
from fusesched.agent.joining import CREDENTIAL_FILE, JoinError
from fusesched.cli.local import LocalCluster, start_agent
from fusesched.controller.server import ADMIN_TOKEN_FILE, ControllerServer
from fusesched.sdk import Client, ControllerError
from fusesched.store import TokenKind
from fusesched.store.schema import events

from .conftest import local_cluster

PUBLIC = {("GET", "/healthz")}


def job(argv: list[str], **extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "250m", "memory": "64Mi"}, "argv": argv}
    return {"name": extra.pop("name", "sec"), "walltime_s": 120, "groups": [group], **extra}


def wait_state(client: Client, job_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = client.show(job_id)
        if found["state"] == state:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} is {found['state']}, not {state}")
        time.sleep(0.05)


@dataclass
class Secure:
    cluster: LocalCluster
    url: str
    tokens: dict[str, str]  # name -> token
    ids: dict[str, str]  # name -> token id
    bob_job: str
    alice_job: str
    scratch: Path
    issued: list[str] = field(default_factory=list)  # every token made here, to look for

    def client(self, who: str) -> Client:
        return Client(self.url, token=self.tokens[who])

    def http(self, token: str | None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def make(self, name: str, user: str, tenant: str, role: str = "user") -> str:
        made = self.client("admin").create_token(user, tenant=tenant, role=role)
        self.tokens[name], self.ids[name] = made["token"], made["id"]
        self.issued.append(made["token"])
        return str(made["token"])


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    scratch = Path(tempfile.mkdtemp(prefix="fusesched-test-"))
    scratch.chmod(0o1777)
    try:
        with local_cluster(tmp_path_factory.mktemp("secure") / "data", auth=True) as cluster:
            admin = cluster.admin_token
            assert admin is not None
            sec = Secure(cluster, cluster.url, {"admin": admin}, {}, "", "", scratch, [admin])
            sec.make("alice", "alice", "physics")
            sec.make("carol", "carol", "physics")
            sec.make("physics-admin", "pat", "physics", "tenant-admin")
            sec.make("bob", "bob", "biology")
            sec.make("biology-admin", "bea", "biology", "tenant-admin")
            bob = sec.client("bob")
            sec.bob_job = bob.submit(
                job(["sh", "-c", "echo bob-secret-output; exec sleep 600"], name="bob-secret")
            )
            wait_state(bob, sec.bob_job, "Running")
            deadline = time.monotonic() + 10
            while "bob-secret-output" not in bob.logs(sec.bob_job):
                assert time.monotonic() < deadline, "bob's job wrote no output"
                time.sleep(0.05)
            alice = sec.client("alice")
            sec.alice_job = alice.submit(job(["echo", "alice-output"]))
            alice.wait(sec.alice_job, timeout=30)
            yield sec
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------- every route


def route_table(sec: Secure) -> dict[tuple[str, str], dict[str, Any]]:
    """One request per route, aimed at the biology tenant's things (job, task, token, node)."""
    bob_job = sec.bob_job
    inventory = {"name": "node-a", "resources": {"cpu": "2", "memory": "2Gi"}}
    node = sec.cluster.server.persist.store.list_nodes()[0].name
    return {
        ("GET", "/healthz"): {},
        ("POST", "/v1/jobs"): {"json": job(["true"], user="bob", tenant="biology")},
        ("POST", "/v1/jobs/batch"): {"json": [job(["true"], user="bob", tenant="biology")]},
        ("POST", "/v1/submissions"): {
            "json": {
                "files": [
                    {
                        "name": "job.yaml",
                        "text": "name: x\nuser: bob\ntenant: biology\nresources: {cpu: 1}\n"
                        'command: ["true"]\n',
                    }
                ]
            }
        },
        ("GET", "/v1/jobs"): {"params": {"tenant": "biology"}},
        ("GET", "/v1/jobs/{job_id}"): {"path": {"job_id": bob_job}},
        ("POST", "/v1/jobs/{job_id}/cancel"): {"path": {"job_id": bob_job}, "json": {}},
        ("POST", "/v1/jobs/cancel"): {"json": {"user": ["bob"], "id": [bob_job]}},
        ("POST", "/v1/jobs/{job_id}/hold"): {"path": {"job_id": bob_job}, "json": {}},
        ("POST", "/v1/jobs/{job_id}/release"): {"path": {"job_id": bob_job}, "json": {}},
        ("POST", "/v1/jobs/{job_id}/requeue"): {"path": {"job_id": bob_job}, "json": {}},
        ("POST", "/v1/jobs/{job_id}/resubmit"): {"path": {"job_id": bob_job}},
        ("POST", "/v1/jobs/{job_id}/update"): {
            "path": {"job_id": bob_job},
            "json": {"priority": 1},
        },
        ("POST", "/v1/jobs/{job_id}/signal"): {
            "path": {"job_id": bob_job},
            "json": {"signal": "USR1"},
        },
        ("POST", "/v1/jobs/{job_id}/alive"): {"path": {"job_id": bob_job}, "json": {}},
        ("GET", "/v1/jobs/{job_id}/logs"): {"path": {"job_id": bob_job}},
        ("POST", "/v1/jobs/{job_id}/logs"): {"path": {"job_id": bob_job}, "json": {"all": True}},
        ("GET", "/v1/jobs/{job_id}/priority"): {"path": {"job_id": bob_job}},
        ("GET", "/v1/jobs/{job_id}/efficiency"): {"path": {"job_id": bob_job}},
        ("GET", "/v1/jobs/{job_id}/route"): {"path": {"job_id": bob_job}},
        ("POST", "/v1/route"): {"json": job(["true"], user="bob", tenant="biology")},
        ("POST", "/v1/jobs/{job_id}/checkpoint"): {"path": {"job_id": bob_job}, "json": {}},
        ("GET", "/v1/nodes"): {},
        # a real node: a drain that got through would show as 200, not as a 404
        ("POST", "/v1/nodes/{name}/drain"): {"path": {"name": node}, "json": {"reason": "x"}},
        ("POST", "/v1/nodes/{name}/undrain"): {"path": {"name": node}},
        ("POST", "/v1/reconfigure"): {"json": {"dry_run": True}},  # (cluster-admins only)
        ("POST", "/v1/admin/purge"): {"json": {"ended_before": 0, "dry_run": True}},  # (ditto)
        ("GET", "/v1/queues"): {},
        ("GET", "/v1/fairshare"): {},
        ("GET", "/v1/licenses"): {},
        ("GET", "/v1/reservations"): {},
        ("POST", "/v1/reservations"): {
            "json": {"name": "sec", "nodes": [node], "start": 0, "end": 4e9, "users": ["bob"]}
        },
        ("PATCH", "/v1/reservations/{name}"): {"path": {"name": "sec"}, "json": {"end": 4e9}},
        ("DELETE", "/v1/reservations/{name}"): {"path": {"name": "sec"}},
        ("GET", "/v1/starts"): {},
        ("POST", "/v1/starts/test"): {"json": [job(["true"], user="bob", tenant="biology")]},
        ("GET", "/metrics"): {},
        ("GET", "/v1/usage"): {"params": {"tenant": "biology"}},
        ("POST", "/v1/agents/register"): {"json": inventory},
        ("POST", "/v1/agents/heartbeat"): {"json": {"node": "node-a", "running": []}},
        ("POST", "/v1/agents/leaving"): {"json": {"node": "node-a"}},
        ("POST", "/v1/agents/join"): {"json": {"node": "node-evil"}},
        ("POST", "/v1/jobs/{job_id}/remote"): {
            "path": {"job_id": bob_job},
            "json": {"node": "node-a", "argv": ["sh", "-c", "echo pwned"]},
        },
        ("POST", "/v1/jobs/{job_id}/steps"): {
            "path": {"job_id": bob_job},
            "json": {
                "slots": {"node-a": 1},
                "tasks": [{"node": "node-a", "argv": ["sh", "-c", "echo pwned"]}],
            },
        },
        # the terminal relay of run --pty (api/pty_routes.py): bob's job, its task on node-a
        ("POST", "/v1/jobs/{job_id}/pty/input"): {
            "path": {"job_id": bob_job},
            "json": {"offset": 0, "data": "ZWNobyBwd25lZA0=", "wait": 0},
        },
        ("GET", "/v1/jobs/{job_id}/pty/output"): {
            "path": {"job_id": bob_job},
            "params": {"wait": 0},
        },
        # a job step's terminal (srun --pty, run --jobid): by task, bob's job's
        ("POST", "/v1/tasks/{task_id}/pty/input"): {
            "path": {"task_id": f"{bob_job}.main.0"},
            "json": {"offset": 0, "data": "ZWNobyBwd25lZA0=", "wait": 0},
        },
        ("GET", "/v1/tasks/{task_id}/pty/output"): {
            "path": {"task_id": f"{bob_job}.main.0"},
            "params": {"wait": 0},
        },
        ("GET", "/v1/agents/{node}/pty/{task_id}/input"): {
            "path": {"node": "node-a", "task_id": f"{bob_job}.main.0"},
            "params": {"wait": 0},
        },
        ("POST", "/v1/agents/{node}/pty/{task_id}/output"): {
            "path": {"node": "node-a", "task_id": f"{bob_job}.main.0"},
            "json": {"offset": 0, "data": "", "wait": 0},
        },
        ("POST", "/v1/jobs/{job_id}/stdin"): {"path": {"job_id": bob_job}},
        ("POST", "/v1/jobs/{job_id}/stdin/{stream}"): {
            "path": {"job_id": bob_job, "stream": "s1"},
            "json": {"offset": 0, "data": "ZWNobyBwd25lZA0=", "wait": 0},
        },
        ("GET", "/v1/jobs/{job_id}/stdin/{stream}"): {
            "path": {"job_id": bob_job, "stream": "s1"},
            "params": {"reader": f"{bob_job}.remote.1", "wait": 0},
        },
        ("GET", "/v1/tasks/{task_id}"): {"path": {"task_id": f"{bob_job}.main.0"}},
        ("DELETE", "/v1/tasks/{task_id}"): {"path": {"task_id": f"{bob_job}.main.0"}},
        ("POST", "/v1/tokens"): {"json": {"user": "mallory", "tenant": "biology"}},
        ("GET", "/v1/tokens"): {},
        ("DELETE", "/v1/tokens/{token_id}"): {"path": {"token_id": sec.ids["bob"]}},
        # the portal's routes (src/fusesched/portal/api.py)
        ("GET", "/v1/portal/me"): {},
        ("GET", "/v1/portal/jobs/{job_id}"): {"path": {"job_id": bob_job}},
        ("GET", "/v1/portal/cluster"): {},
        ("GET", "/v1/portal/queues"): {},
        ("GET", "/v1/portal/history"): {},
        ("GET", "/v1/portal/whatif"): {},
        ("POST", "/v1/portal/whatif"): {"json": {"scale": 2}},
        ("GET", "/v1/portal/whatif/{run_id}"): {"path": {"run_id": "w1"}},
    }


def send(http: httpx.Client, method: str, path: str, spec: dict[str, Any]) -> httpx.Response:
    url = path.format(**spec.get("path", {}))
    return http.request(method, url, json=spec.get("json"), params=spec.get("params"))


def test_the_table_covers_every_route(secure: Secure) -> None:
    routes = {
        (method, route.path)
        for route in secure.cluster.server.app.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    assert routes == set(route_table(secure))


def test_every_route_but_health_needs_a_token(secure: Secure) -> None:
    with secure.http(None) as http:
        for (method, path), spec in route_table(secure).items():
            response = send(http, method, path, spec)
            if (method, path) in PUBLIC:
                assert response.status_code == 200
                continue
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"


def test_wrong_revoked_and_expired_tokens_get_401(secure: Secure) -> None:
    admin = secure.client("admin")
    revoked = secure.make("dave", "dave", "physics")
    admin.revoke_token(secure.ids["dave"])
    expiring = admin.create_token("erin", tenant="physics", expires_in_s=0.3)["token"]
    secure.issued.append(expiring)
    time.sleep(0.5)
    alice_id = secure.ids["alice"]
    wrong = [
        "nonsense",
        "fsk_0123456789abcdef_" + "x" * 43,  # well formed, unknown id
        f"fsk_{alice_id}_" + "y" * 43,  # alice's id, wrong secret
        secure.tokens["alice"][:-1] + ("A" if secure.tokens["alice"][-1] != "A" else "B"),
        revoked,
        expiring,
    ]
    for token in wrong:
        with secure.http(token) as http:
            for (method, path), spec in route_table(secure).items():
                if (method, path) in PUBLIC:
                    continue
                response = send(http, method, path, spec)
                assert response.status_code == 401, (token[:12], method, path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
    with httpx.Client(base_url=secure.url, headers={"authorization": "Basic YTpi"}) as http:
        assert http.get("/v1/jobs").status_code == 401


DENIED = {403, 404}
# cluster-wide, no tenant data (/metrics: jobs by id and queue only, no user or tenant)
SHARED = {
    ("GET", "/v1/nodes"),
    ("GET", "/v1/queues"),  # other tenants' queues: name and counts only
    ("GET", "/v1/fairshare"),  # the caller's own branch of the tree only
    ("GET", "/v1/licenses"),  # counts per license name (none configured here)
    ("GET", "/v1/reservations"),  # (none exists while these tests run)
    ("GET", "/metrics"),
    ("GET", "/v1/portal/me"),  # the caller's own name, tenant and role
    ("GET", "/v1/starts"),  # the caller's tenant's waiting jobs only (checked below)
    # the caller's tenant's jobs only: another's are neither cancelled nor named (below: bob's
    # job still runs)
    ("POST", "/v1/jobs/cancel"),
}
LISTS = {("GET", "/v1/jobs"), ("GET", "/v1/tokens")}


@pytest.mark.parametrize("attacker", ["alice", "physics-admin"])
def test_another_tenant_gets_403_or_404_and_sees_nothing(secure: Secure, attacker: str) -> None:
    secrets = ["bob-secret", '"user":"bob"', '"tenant":"biology"']  # bob's job and output
    biology_tokens = [secure.ids["bob"], secure.ids["biology-admin"]]
    with secure.http(secure.tokens[attacker]) as http:
        for (method, path), spec in route_table(secure).items():
            response = send(http, method, path, spec)
            key = (method, path)
            if key in PUBLIC or key in SHARED:
                assert response.status_code == 200, (key, response.text)
            elif key in LISTS and not (attacker == "alice" and path == "/v1/tokens"):
                assert response.status_code == 200, (key, response.text)
                assert response.json() == [] or "tokens" in path, (key, response.text)
            else:
                assert response.status_code in DENIED, (attacker, key, response.text)
            shown = secrets + (biology_tokens if response.status_code == 200 else [])
            for secret in shown:
                assert secret not in response.text, (attacker, key, response.text)
    bob = secure.client("bob")
    assert bob.show(secure.bob_job)["state"] == "Running"  # nothing was cancelled
    assert [j["id"] for j in bob.jobs()] == [secure.bob_job]
    assert "pwned" not in bob.logs(secure.bob_job)


def test_users_see_only_their_tenant(secure: Secure) -> None:
    alice, bob, admin = (secure.client(w) for w in ("alice", "bob", "admin"))
    assert {j["tenant"] for j in alice.jobs()} == {"physics"}
    assert alice.jobs(user="bob") == []
    assert {j["id"] for j in bob.jobs()} == {secure.bob_job}
    assert {secure.bob_job, secure.alice_job} <= {j["id"] for j in admin.jobs()}
    assert "alice-output" in secure.client("carol").logs(secure.alice_job)  # same tenant
    with pytest.raises(ControllerError) as denied:
        alice.logs(secure.bob_job)
    assert denied.value.status == 404
    with pytest.raises(ControllerError) as denied:
        alice.task_logs(secure.bob_job, {}, all_tasks=True)
    assert denied.value.status == 404


# ---------------------------------------------------------------------- roles


def status_of(call: Any, *args: Any, **kwargs: Any) -> int:
    try:
        call(*args, **kwargs)
    except ControllerError as exc:
        return exc.status
    return 200


def test_role_escalation_fails(secure: Secure) -> None:
    alice, padmin = secure.client("alice"), secure.client("physics-admin")
    for role in ("user", "tenant-admin", "cluster-admin"):
        assert status_of(alice.create_token, "alice", role=role) == 403
    assert status_of(alice.create_token, kind="join") == 403
    assert status_of(alice.tokens) == 403
    assert status_of(alice.revoke_token, secure.ids["carol"]) == 403
    for role in ("tenant-admin", "cluster-admin"):
        assert status_of(padmin.create_token, "pat", role=role) == 403
    assert status_of(padmin.create_token, kind="join") == 403
    assert status_of(padmin.create_token, "x", tenant="biology") == 403
    assert status_of(padmin.revoke_token, secure.ids["bob"]) == 404
    assert status_of(padmin.revoke_token, secure.ids["biology-admin"]) == 404
    made = padmin.create_token("frank")
    secure.issued.append(made["token"])
    assert (made["tenant"], made["role"], made["kind"]) == ("physics", "user", "user")
    listed = padmin.tokens()
    assert {t["tenant"] for t in listed} == {"physics"}
    assert {t["kind"] for t in listed} == {"user"}
    assert all("token" not in t and "hash" not in t for t in listed)
    assert padmin.revoke_token(made["id"]) == made["id"]
    assert status_of(Client(secure.url, token=made["token"]).jobs) == 401


def test_submissions_take_user_and_tenant_from_the_token(secure: Secure) -> None:
    alice, padmin, admin = (secure.client(w) for w in ("alice", "physics-admin", "admin"))
    quick = job(["true"])
    assert status_of(alice.submit, quick | {"user": "carol"}) == 403
    assert status_of(alice.submit, quick | {"tenant": "biology"}) == 403
    assert status_of(alice.submit_many, [quick, quick | {"user": "bob"}]) == 403
    assert status_of(padmin.submit, quick | {"tenant": "biology"}) == 403
    mine = alice.show(alice.submit(quick))
    assert (mine["user"], mine["tenant"]) == ("alice", "physics")
    written_out = alice.show(alice.submit(quick | {"tenant": "default", "user": "alice"}))
    assert written_out["tenant"] == "physics"  # the default tenant's name means "mine"
    for_carol = padmin.show(padmin.submit(quick | {"user": "carol"}))
    assert (for_carol["user"], for_carol["tenant"]) == ("carol", "physics")
    anywhere = admin.show(admin.submit(quick | {"user": "zed", "tenant": "chemistry"}))
    assert (anywhere["user"], anywhere["tenant"]) == ("zed", "chemistry")


def test_cancels_others_jobs_only_as_admin_and_audited(secure: Secure) -> None:
    carol, alice, padmin = (secure.client(w) for w in ("carol", "alice", "physics-admin"))
    victim = carol.submit(job(["sleep", "600"], type="service"))
    wait_state(carol, victim, "Running")
    assert status_of(alice.cancel, victim) == 403
    assert status_of(secure.client("bob").cancel, victim) == 404
    assert padmin.cancel(victim) == [victim]
    wait_state(carol, victim, "Cancelled")
    store = secure.cluster.server.persist.store
    audits = [e.event for e in store.events_for_job(victim) if e.event.kind == "Audit"]
    assert len(audits) == 1
    assert audits[0].data["action"] == "cancel"
    assert (audits[0].data["by"], audits[0].data["owner"]) == ("pat", "carol")
    own = carol.submit(job(["sleep", "600"], type="service"))
    assert carol.cancel(own) == [own]
    assert not [e for e in store.events_for_job(own) if e.event.kind == "Audit"]


def test_machine_credentials_cannot_act_as_people(secure: Secure) -> None:
    node_a = secure.cluster.agents[0].client._http.headers["authorization"]
    with httpx.Client(base_url=secure.url, headers={"authorization": node_a}) as http:
        assert http.get("/v1/jobs").status_code == 403
        assert http.post("/v1/jobs", json=job(["true"])).status_code == 403
        assert http.get("/v1/tokens").status_code == 403
        assert http.get(f"/v1/jobs/{secure.bob_job}").status_code in DENIED


# ---------------------------------------------------------------------- nodes


def test_nodes_must_prove_who_they_are(secure: Secure) -> None:
    inventory = {"name": "node-fake", "resources": {"cpu": "64", "memory": "1Ti"}}
    node_a = secure.cluster.agents[0].client._http.headers["authorization"]
    assert secure.cluster.agents[0].name == "node-a"
    with secure.http(None) as http:
        assert http.post("/v1/agents/register", json=inventory).status_code == 401
    for who in ("alice", "physics-admin", "admin"):
        with secure.http(secure.tokens[who]) as http:
            assert http.post("/v1/agents/register", json=inventory).status_code == 403
    with httpx.Client(base_url=secure.url, headers={"authorization": node_a}) as http:
        assert http.post("/v1/agents/register", json=inventory).status_code == 403
        beat = {"node": "node-b", "running": []}
        assert http.post("/v1/agents/heartbeat", json=beat).status_code == 403
        assert http.post("/v1/agents/leaving", json={"node": "node-b"}).status_code == 403
        assert http.post("/v1/agents/join", json={"node": "node-z"}).status_code == 403
    names = {n["name"] for n in secure.client("admin").nodes()}
    assert "node-fake" not in names


def test_a_join_token_works_once_and_for_its_node_only(secure: Secure) -> None:
    admin = secure.client("admin")
    bound = admin.create_token(kind="join", node="node-j1")["token"]
    secure.issued.append(bound)
    with secure.http(bound) as http:
        assert http.post("/v1/agents/join", json={"node": "node-other"}).status_code == 403
        assert http.get("/v1/jobs").status_code == 403
        tiny = {"name": "node-j1", "resources": {"cpu": "1", "memory": "1Mi"}}
        assert http.post("/v1/agents/register", json=tiny).status_code == 403
        first = http.post("/v1/agents/join", json={"node": "node-j1"})
        assert first.status_code == 201
        again = http.post("/v1/agents/join", json={"node": "node-j1"})
        assert again.status_code == 401
    credential = first.json()["token"]
    secure.issued.append(credential)
    with secure.http(credential) as http:
        tiny = {"name": "node-j1", "resources": {"cpu": "1", "memory": "1Mi"}}
        assert http.post("/v1/agents/register", json=tiny).status_code == 201
        other = {"name": "node-j2", "resources": {"cpu": "1", "memory": "1Mi"}}
        assert http.post("/v1/agents/register", json=other).status_code == 403
    store = secure.cluster.server.persist.store
    row = store.get_token(credential.split("_")[1])
    assert row is not None and row.kind is TokenKind.AGENT and row.node == "node-j1"


def test_an_agent_joins_and_keeps_its_credential(secure: Secure, tmp_path: Path) -> None:
    join_token = secure.client("admin").create_token(kind="join")["token"]
    secure.issued.append(join_token)
    config = AgentConfig(
        name="node-joined",
        address="127.0.0.1",
        cpu=1,
        memory="1Mi",  # too small for any test job: it only proves it can join
        nvml=False,
        work_dir=tmp_path / "work",
        image_cache_dir=tmp_path / "images",
    )
    handle = start_agent(secure.url, config, join_token=join_token, long_poll_s=0.5)
    try:
        path = tmp_path / "work" / CREDENTIAL_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        secure.issued.append(path.read_text().strip())
    finally:
        handle.stop()
    again = start_agent(secure.url, config, long_poll_s=0.5)  # reuses the stored credential
    again.stop()
    assert "node-joined" in {n["name"] for n in secure.client("admin").nodes()}
    elsewhere = config.model_copy(update={"work_dir": tmp_path / "w2"})
    with pytest.raises(JoinError, match="could not join"):  # the join token was used
        start_agent(secure.url, elsewhere, join_token=join_token)


# ---------------------------------------------------------------------- job credentials


def test_a_job_token_is_scoped_to_its_job_and_dies_with_it(secure: Secure) -> None:
    alice = secure.client("alice")
    out = secure.scratch / "job.token"
    job_id = alice.submit(
        job(["sh", "-c", f'printf %s "$FUSESCHED_JOB_TOKEN" > {out}; exec sleep 600'])
    )
    running = wait_state(alice, job_id, "Running")
    deadline = time.monotonic() + 10
    while not (out.exists() and out.read_text()):
        assert time.monotonic() < deadline, "the job got no FUSESCHED_JOB_TOKEN"
        time.sleep(0.05)
    token = out.read_text()
    out.unlink()
    secure.issued.append(token)
    node = running["nodes"][0]
    with secure.http(token) as http:
        assert http.get(f"/v1/tasks/{job_id}.main.0").status_code == 200
        assert http.get(f"/v1/tasks/{secure.bob_job}.main.0").status_code == 403
        launch = {"node": node, "argv": ["true"]}
        assert http.post(f"/v1/jobs/{secure.bob_job}/remote", json=launch).status_code == 403
        assert http.post(f"/v1/jobs/{job_id}/remote", json=launch).status_code == 201
        step = {"slots": {node: 1}, "tasks": [launch], "overlap": True}
        assert http.post(f"/v1/jobs/{secure.bob_job}/steps", json=step).status_code == 403
        assert http.post(f"/v1/jobs/{job_id}/steps", json=step).status_code == 201
        # srun's job steps: its own tasks' output, and stopping its own remote tasks only
        assert http.get(f"/v1/jobs/{job_id}/logs").status_code == 200
        assert http.get(f"/v1/jobs/{secure.bob_job}/logs").status_code == 403
        assert http.delete(f"/v1/tasks/{secure.bob_job}.remote.1").status_code == 403
        assert http.delete(f"/v1/tasks/{job_id}.main.0").status_code == 400
        assert http.delete(f"/v1/tasks/{job_id}.remote.99").status_code == 404
        for odd in ("%00", "x" * 5000, f"{secure.bob_job}-r1.remote.1", "..", "%2e"):
            assert http.delete(f"/v1/tasks/{odd}").status_code in (403, 404, 422), odd
        own_logs = f"/v1/jobs/{job_id}/logs"
        assert http.get(own_logs, params={"task": "\x00"}).status_code in (404, 422)
        assert http.get(own_logs, params={"task": f"{secure.bob_job}.main.0"}).status_code == 404
        assert http.post(own_logs, json={"all": True}).status_code == 200  # its tasks at once
        bobs = {"offsets": {f"{secure.bob_job}.main.0": 0}}
        assert http.post(own_logs, json=bobs).status_code == 400
        assert http.post(f"/v1/jobs/{secure.bob_job}/logs", json=bobs).status_code == 403
        for missing in ("987654", "no-such-job"):  # as for bob's: nothing says which jobs exist
            assert http.get(f"/v1/jobs/{missing}/logs").status_code == 403
            assert http.post(f"/v1/jobs/{missing}/logs", json={}).status_code == 403
        assert http.get("/v1/jobs").status_code == 403
        assert http.get(f"/v1/jobs/{job_id}").status_code == 403
        assert http.post(f"/v1/jobs/{job_id}/cancel", json={}).status_code == 403
        assert http.post("/v1/agents/heartbeat", json={"node": node}).status_code == 403
    alice.cancel(job_id)
    wait_state(alice, job_id, "Cancelled")
    deadline = time.monotonic() + 5
    while True:
        with secure.http(token) as http:
            status = http.get(f"/v1/tasks/{job_id}.main.0").status_code
        if status == 401:
            break
        assert time.monotonic() < deadline, f"the job token still works after the end ({status})"
        time.sleep(0.05)


@pytest.mark.skipif(shutil.which("mpicc") is None, reason="OpenMPI (mpicc) is not installed")
def test_mpirun_reaches_other_nodes_with_the_job_token(secure: Secure) -> None:
    """The whole MPI test of test_jobs.py, as alice (with Slurm's variables, as an sbatch job
    has them): mpirun's launcher authenticates with the job's own credential (nothing else
    is given to the job)."""
    from live import test_jobs

    test_jobs.test_mpi_across_two_agents_without_ssh(secure.client("alice"), secure.scratch, True)


# ---------------------------------------------------------------------- storage and logs


def test_secrets_are_neither_stored_nor_logged(
    secure: Secure, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = secure.client("alice")
    alice.wait(alice.submit(job(["echo", "x"])), timeout=30)
    with secure.http("fsk_0123456789abcdef_" + "z" * 43) as http:
        http.get("/v1/jobs")
    data = secure.cluster.data_dir
    stored = b"".join(
        p.read_bytes() for p in data.rglob("*") if p.is_file() and p.name != ADMIN_TOKEN_FILE
    )
    assert len(secure.issued) > 8
    for token in secure.issued:
        secret = token.rsplit("_", 1)[-1] if token.count("_") == 2 else token.split("_", 2)[2]
        assert secret.encode() not in stored
        assert secret not in caplog.text
    for path in (data / "logs").rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert stat.S_IMODE((data / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE((data / ADMIN_TOKEN_FILE).stat().st_mode) == 0o600


def test_token_management_is_audited(secure: Secure) -> None:
    store = secure.cluster.server.persist.store
    with store._read() as conn:  # every audit event, whatever its job
        rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings().all()
    actions = {r["data"]["action"] for r in rows}
    assert {"token-create", "token-revoke", "node-join"} <= actions
    for r in rows:
        assert all(token not in str(r["data"]) for token in secure.issued)


def test_only_cluster_admins_drain_nodes_and_it_is_audited(secure: Secure) -> None:
    store = secure.cluster.server.persist.store
    node = store.list_nodes()[0].name
    for who in ("alice", "physics-admin"):
        assert status_of(secure.client(who).drain_node, node, "mine now") == 403
        assert status_of(secure.client(who).undrain_node, node) == 403
    admin = secure.client("admin")
    drained = admin.drain_node(node, "memory test")
    assert drained["drain_reason"] == "memory test"
    assert drained["state"] in ("draining", "drained")
    assert admin.undrain_node(node) == {"node": node, "state": "up", "drain_reason": None}
    with store._read() as conn:
        rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings().all()
    mine = [(r["node"], r["data"]["action"], r["data"]["by"]) for r in rows if r["node"] == node]
    assert [m for m in mine if m[1] != "node-join"] == [
        (node, "node-drain", "admin"),
        (node, "node-undrain", "admin"),
    ]


def test_users_may_only_lower_what_they_change(secure: Secure) -> None:
    alice, admin = secure.client("alice"), secure.client("admin")
    sleeper = alice.submit(job(["sleep", "600"], name="sleeper"))
    after = [{"kind": "afterany", "job_id": sleeper}]  # it runs: this one waits
    # a user may not submit above priority 0 (sbatch --priority is an admin's), only lower
    assert status_of(alice.submit, job(["true"], priority=5)) == 403
    waiting = alice.submit(job(["true"], priority=-5, walltime_s=600, dependencies=after))
    deadline = time.monotonic() + 10
    while alice.show(waiting)["phase"] != "pending" and time.monotonic() < deadline:
        time.sleep(0.05)
    for change in ({"priority": -4}, {"qos": "gold"}, {"walltime_s": 601}):
        assert status_of(alice.update, waiting, **change) == 403, change
    assert alice.update(waiting, priority=-8, qos="bronze", walltime_s=300) == [waiting]
    assert admin.update(waiting, priority=100, walltime_s=7200) == [waiting]
    assert status_of(secure.client("bob").update, waiting, priority=1) == 404
    alice.cancel(waiting)
    alice.cancel(sleeper)


def test_revoking_a_token_twice_is_audited_once(secure: Secure) -> None:
    admin = secure.client("admin")
    made = admin.create_token("fay", tenant="physics")
    secure.issued.append(made["token"])
    assert admin.revoke_token(made["id"]) == made["id"]
    assert admin.revoke_token(made["id"]) == made["id"]  # DELETE is idempotent
    store = secure.cluster.server.persist.store
    with store._read() as conn:
        rows = conn.execute(select(events).where(events.c.kind == "Audit")).mappings().all()
    mine = [r["data"]["action"] for r in rows if r["data"].get("token_id") == made["id"]]
    assert sorted(mine) == ["token-create", "token-revoke"]


# ---------------------------------------------------------------------- bootstrap, CLI


def test_the_first_start_writes_an_admin_token_once(tmp_path: Path) -> None:
    server = ControllerServer(tmp_path, port=0, auth=True)
    try:
        path = server.admin_token_path
        assert path == tmp_path / ADMIN_TOKEN_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        principal = server.authenticator.authenticate(path.read_text().strip())
        assert principal.role.value == "cluster-admin"
    finally:
        server.stop()
    again = ControllerServer(tmp_path, port=0, auth=True)
    try:
        assert again.admin_token_path is None
    finally:
        again.stop()
    open_server = ControllerServer(tmp_path / "open", port=0)
    try:
        assert open_server.admin_token_path is None
        assert not (tmp_path / "open" / ADMIN_TOKEN_FILE).exists()
    finally:
        open_server.stop()


def fusesched(url: str, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"FUSESCHED_CONTROLLER": url, "PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": "/"}
    if token is not None:
        env["FUSESCHED_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "fusesched", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_the_token_commands(secure: Secure) -> None:
    made = fusesched(
        secure.url,
        "token",
        "create",
        "gina",
        "--tenant",
        "physics",
        "--json",
        token=secure.tokens["admin"],
    )
    assert made.returncode == 0, made.stderr
    gina = json.loads(made.stdout)
    secure.issued.append(gina["token"])
    listed = fusesched(secure.url, "jobs", "--json", "--token", gina["token"])
    assert listed.returncode == 0, listed.stderr
    assert {j["tenant"] for j in json.loads(listed.stdout)} == {"physics"}
    spec = secure.scratch / "cli-job.yaml"
    spec.write_text(
        'name: cli-sec\nwalltime: 1m\nresources: {cpu: 100m, memory: 32Mi}\ncommand: ["true"]\n'
    )
    submitted = fusesched(secure.url, "submit", str(spec), "--json", token=gina["token"])
    assert submitted.returncode == 0, submitted.stderr
    shown = secure.client("admin").show(json.loads(submitted.stdout)["id"])
    assert (shown["user"], shown["tenant"]) == ("gina", "physics")
    anonymous = fusesched(secure.url, "jobs")
    assert anonymous.returncode == 2
    assert "bearer token is required" in anonymous.stderr
    table = fusesched(secure.url, "token", "list", token=secure.tokens["admin"])
    assert gina["id"] in table.stdout and gina["token"] not in table.stdout
    revoked = fusesched(secure.url, "token", "revoke", gina["id"], token=secure.tokens["admin"])
    assert revoked.returncode == 0, revoked.stderr
    assert fusesched(secure.url, "jobs", "--token", gina["token"]).returncode == 2


# ---------------------------------------------------------------------- TLS


def test_a_tls_round_trip(tmp_path: Path) -> None:
    from fusesched.tls import init_ca, issue

    ca = init_ca(tmp_path / "ca")
    cert, key = issue(tmp_path / "ca", "controller", ["127.0.0.1", "localhost"])
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ca" / "ca.key").stat().st_mode) == 0o600
    with local_cluster(
        tmp_path / "data", lambda configs: configs[:1], auth=True, tls_cert=cert, tls_key=key, ca=ca
    ) as cluster:
        assert cluster.url.startswith("https://")
        client = Client(cluster.url, token=cluster.admin_token, ca=ca)
        job_id = client.submit(job(["echo", "over tls"]))
        assert client.wait(job_id, timeout=30)["state"] == "Completed"
        assert "over tls" in client.logs(job_id)
        untrusting = Client(cluster.url, token=cluster.admin_token)
        with pytest.raises(ControllerError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusting.jobs()
        plain = cluster.url.replace("https://", "http://")
        with pytest.raises(ControllerError, match="if the controller serves TLS, use https://"):
            Client(plain, token=cluster.admin_token, timeout=5).jobs()
    assert not os.environ.get("FUSESCHED_TOKEN")
