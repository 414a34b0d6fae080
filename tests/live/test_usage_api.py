"""``GET /v1/usage`` and ``fusesched usage`` against a real controller with authentication
and three real agents: two users of two tenants run a short job each; every role sees only
what it may, and bad parameters are refused with a reason."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from fusesched.sdk import Client, ControllerError

from .conftest import local_cluster


@dataclass
class Accounts:
    url: str
    tokens: dict[str, str]
    db: str

    def client(self, who: str) -> Client:
        return Client(self.url, token=self.tokens[who])


def job(cpu: str) -> dict[str, Any]:
    group = {"resources": {"cpu": cpu, "memory": "64Mi"}, "argv": ["sleep", "0.5"]}
    return {"name": "acct", "walltime_s": 60, "groups": [group]}


@pytest.fixture(scope="module")
def accounts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accounts]:
    data = tmp_path_factory.mktemp("usage") / "data"
    with local_cluster(data, auth=True) as cluster:
        admin_token = cluster.admin_token
        assert admin_token is not None
        admin = Client(cluster.url, token=admin_token)
        tokens = {"admin": admin_token}
        for name, user, tenant, role in (
            ("alice", "alice", "physics", "user"),
            ("bob", "bob", "biology", "user"),
            ("physics-admin", "pat", "physics", "tenant-admin"),
        ):
            tokens[name] = admin.create_token(user, tenant=tenant, role=role)["token"]
        acc = Accounts(cluster.url, tokens, f"sqlite:///{data}/fusesched.db")
        for who, cpu in (("alice", "1"), ("bob", "500m")):
            client = acc.client(who)
            done = client.wait(client.submit(job(cpu)), timeout=60)
            assert done["state"] == "Completed", done
        yield acc


def keys(report: dict[str, Any]) -> list[dict[str, str]]:
    return [row["group"] for row in report["rows"]]


def test_each_role_sees_what_it_may(accounts: Accounts) -> None:
    everything = accounts.client("admin").usage("-1h", "now", ("tenant", "user"))
    assert keys(everything) == [
        {"tenant": "biology", "user": "bob"},
        {"tenant": "physics", "user": "alice"},
    ]
    assert everything["total"]["jobs"] == 2
    rows = {row["group"]["user"]: row for row in everything["rows"]}
    # each job ran at least its 0.5 s sleep (allow generous scheduling slack)
    assert 0.4 / 3600 <= rows["alice"]["cpu_hours"] < 30 / 3600
    assert 0.2 / 3600 <= rows["bob"]["cpu_hours"] < 15 / 3600
    assert rows["alice"]["energy_kwh_est"] > 0
    assert rows["alice"]["gpu_hours"] == {}

    alice = accounts.client("alice").usage("-1h", "now", ("user",))
    assert keys(alice) == [{"user": "alice"}]
    assert (alice["tenant"], alice["user"]) == ("physics", "alice")
    assert keys(accounts.client("bob").usage("-1h", "now", ("tenant",))) == [{"tenant": "biology"}]
    physics = accounts.client("physics-admin").usage("-1h", "now", ("tenant", "user"))
    assert keys(physics) == [{"tenant": "physics", "user": "alice"}]
    # the window excludes both jobs
    assert accounts.client("admin").usage("-1d", "-2h")["rows"] == []


@pytest.mark.parametrize(
    ("who", "params"),
    [
        ("alice", {"user": "bob"}),
        ("alice", {"tenant": "biology"}),
        ("physics-admin", {"tenant": "biology"}),
    ],
)
def test_others_usage_is_forbidden(accounts: Accounts, who: str, params: dict[str, str]) -> None:
    with pytest.raises(ControllerError) as caught:
        accounts.client(who).usage(**params)  # type: ignore[arg-type]
    assert caught.value.status == 403


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"start": "now", "end": "-1d"}, "before it starts"),
        ({"by": "tenant,account"}, "cannot group usage by 'account'"),
        ({"start": "yesterday"}, "not a time"),
        ({"end": "2026-02-30"}, "not a time"),
        ({"start": "nan"}, "not a time"),
    ],
)
def test_bad_parameters_are_refused(
    accounts: Accounts, params: dict[str, str], reason: str
) -> None:
    headers = {"authorization": f"Bearer {accounts.tokens['admin']}"}
    answer = httpx.get(f"{accounts.url}/v1/usage", params=params, headers=headers, timeout=30)
    assert answer.status_code == 422, answer.text
    assert reason in answer.json()["detail"]


def test_without_a_token(accounts: Accounts) -> None:
    assert httpx.get(f"{accounts.url}/v1/usage", timeout=30).status_code == 401


def test_cli(accounts: Accounts) -> None:
    def run(*args: str, token: str = "alice") -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "fusesched", "usage", "--controller", accounts.url]
        return subprocess.run(
            [*command, "--token", accounts.tokens[token], *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    table = run("--start", "-1h", "--by", "tenant,user")
    assert table.returncode == 0, table.stderr
    assert "alice" in table.stdout and "TOTAL" in table.stdout and "bob" not in table.stdout
    as_json = json.loads(run("--format", "json", token="admin").stdout)
    assert as_json["total"]["jobs"] == 2
    csv_lines = run("--format", "csv", "--by", "user", token="admin").stdout.splitlines()
    assert csv_lines[0].startswith("user,jobs,cpu_hours,")
    assert [line.split(",")[0] for line in csv_lines[1:]] == ["alice", "bob", "TOTAL"]
    refused = run("--user", "bob")
    assert refused.returncode == 2 and "usage of user 'bob'" in refused.stderr
    bad = run("--start", "soon")
    assert bad.returncode == 2 and "not a time" in bad.stderr
    direct = run("--db", accounts.db, "--format", "json", "--by", "queue")
    assert json.loads(direct.stdout)["total"]["jobs"] == 2


def test_usage_counts_a_running_job(accounts: Accounts) -> None:
    client = accounts.client("bob")
    running = client.submit(
        {
            "name": "long",
            "walltime_s": 60,
            "groups": [{"resources": {"cpu": "1"}, "argv": ["sleep", "30"]}],
        }
    )
    try:
        deadline = time.monotonic() + 30
        while client.show(running)["state"] != "Running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        report = client.usage("-1h", "now", ("user",))
        assert report["total"]["jobs"] == 2  # the finished one and the running one
    finally:
        client.cancel(running)
