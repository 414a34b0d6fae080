"""``POST /v1/jobs/{id}/resubmit`` (api/resubmit_routes.py): a job's stored request submitted
again on the server, as the caller and not held. Its submitting environment (kept apart from
the request, never shown) goes with it only when the job's own user resubmits it; anyone
else who sees the job gets a job without it, and a warning saying so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import ONE_NODE
from tests.controller.test_actions_gaps import People
from tests.controller.test_job_actions_review import tenancy_controller

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory
from fusesched.controller.auth import Authenticator
from fusesched.controller.server import ControllerServer
from fusesched.controller.service import Controller
from fusesched.sdk import Client, ControllerError
from fusesched.store import TokenKind
from fusesched.store.records import JobChange

SCRIPT = "#!/bin/sh\npython train.py\n"
SHELL = {"PATH": "/home/alice/venv/bin:/usr/bin:/bin", "VIRTUAL_ENV": "/home/alice/venv"}
GROUP = {"resources": {"cpu": "1"}, "argv": ["true"]}


def sbatch(people: People, who: str, *args: str) -> dict[str, Any]:
    """A batch job ``who`` submits from a shell with :data:`SHELL` (``sbatch ARGS``)."""
    item = {"name": "job.sh", "text": SCRIPT, "args": list(args)}
    body = {"files": [item], "submit_env": SHELL}
    answer = people.post(who, "/v1/submissions", body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def env_of(ctl: Controller, job_id: str) -> dict[str, str] | None:
    """The submitting environment stored for ``job_id`` (None: none)."""
    detail = ctl.persist.store.get_job(job_id)
    assert detail is not None, job_id
    env_id = detail.job.env_id
    return None if env_id is None else ctl.persist.store.environments([env_id])[env_id]


def with_bob(ctl: Controller) -> People:
    """:class:`People` and bob, a user of another tenant."""
    people = People(ctl)
    auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
    people.tokens["bob"], _ = auth.issue(TokenKind.USER, user="bob", tenant="other", role="user")
    return people


def test_the_jobs_own_user_gets_its_environment_back_not_held(ctl: Controller) -> None:
    people = People(ctl)
    (old,) = sbatch(people, "alice", "-H", "--job-name=train")["ids"]
    answer = people.post("alice", f"/v1/jobs/{old}/resubmit")
    assert answer.status_code == 201, answer.text
    out = answer.json()
    assert out["ids"] == [] and out["warnings"] == [] and out["id"] != old
    assert env_of(ctl, out["id"]) == env_of(ctl, old) == SHELL
    new = people.job(out["id"])
    assert (new["user"], new["name"]) == ("alice", "train") and new["phase"] != "held"
    assert people.job(old)["phase"] == "held"  # (the old job is left as it was)
    assert "venv" not in answer.text


def test_anyone_else_gets_no_environment_and_a_warning(ctl: Controller) -> None:
    people = People(ctl)
    (old,) = sbatch(people, "alice")["ids"]
    for who in ("tina", "root"):  # an admin of the tenant, a cluster-admin
        answer = people.post(who, f"/v1/jobs/{old}/resubmit")
        assert answer.status_code == 201, (who, answer.text)
        out = answer.json()
        (warning,) = out["warnings"]
        assert f"job {old} is alice's" in warning and "inherits none" in warning
        assert env_of(ctl, out["id"]) is None
        assert people.job(out["id"])["user"] == who  # submitted as the caller


def test_a_job_without_an_environment_warns_of_nothing(ctl: Controller) -> None:
    people = People(ctl)
    answer = people.post("alice", "/v1/jobs", {"groups": [GROUP]})
    old = answer.json()["id"]
    out = people.post("root", f"/v1/jobs/{old}/resubmit").json()
    assert out["warnings"] == [] and people.job(out["id"])["user"] == "root"


def test_who_may_not_resubmit(ctl: Controller) -> None:
    people = with_bob(ctl)
    (old,) = sbatch(people, "alice")["ids"]
    answer = people.post("bob", f"/v1/jobs/{old}/resubmit")  # another tenant's: not seen
    assert answer.status_code == 404 and f"no job '{old}'" in answer.text
    auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
    people.tokens["job"] = auth.issue_job(old, "alice", "t")
    answer = people.post("job", f"/v1/jobs/{old}/resubmit")
    assert answer.status_code == 403 and "a job credential cannot" in answer.text
    answer = people.post("alice", "/v1/jobs/999/resubmit")
    assert answer.status_code == 404 and "no job '999'" in answer.text
    assert people.job(old)["id"] == old and len(ctl.jobs) == 1  # nothing submitted


def test_an_array_member_resubmits_the_whole_array(ctl: Controller) -> None:
    people = People(ctl)
    made = sbatch(people, "alice", "-a", "0-2")
    (old_parent,) = made["ids"]  # (an array's id)
    member = f"{old_parent}_1"
    assert people.job(member)["array_parent"] == old_parent
    for job_id in (member, old_parent):  # a member's id, or the array's own
        out = people.post("alice", f"/v1/jobs/{job_id}/resubmit").json()
        assert out["ids"] == [f"{out['id']}_{i}" for i in range(3)], out
        assert all(env_of(ctl, m) == SHELL for m in out["ids"])
    out = people.post("tina", f"/v1/jobs/{member}/resubmit").json()
    assert len(out["ids"]) == 3 and all(env_of(ctl, m) is None for m in out["ids"])
    assert out["warnings"]


def test_a_request_that_no_longer_validates_is_a_400_with_the_reason(
    tmp_path: Path, clock: Clock
) -> None:
    ctl = tenancy_controller(tmp_path, clock)
    try:
        client = TestClient(create_app(ctl), raise_server_exceptions=False)
        answer = client.post("/v1/jobs", json={"groups": [GROUP], "tenant": "ml", "queue": "train"})
        old = answer.json()["id"]
        detail = ctl.persist.store.get_job(old)
        assert detail is not None
        stored = dict(detail.job.request)
        for change, reason in [({"queue": "gone"}, "gone"), ({"walltime_s": -1}, "walltime_s")]:
            request = {**stored, **change}  # (as if the queue were removed since)
            ctl.persist.store.update_jobs([JobChange(old, request=request)])
            answer = client.post(f"/v1/jobs/{old}/resubmit")
            assert answer.status_code == 400 and reason in answer.text, answer.text
    finally:
        ctl.persist.close()


def test_with_authentication_off_the_job_keeps_its_user_and_environment(
    ctl: Controller, client: TestClient
) -> None:
    body = {"groups": [GROUP], "user": "alice", "hold": True, "submit_env": SHELL}
    old = client.post("/v1/jobs", json=body).json()["id"]
    answer = client.post(f"/v1/jobs/{old}/resubmit")
    assert answer.status_code == 201, answer.text
    new = answer.json()["id"]
    assert env_of(ctl, new) == SHELL and answer.json()["warnings"] == []
    shown = client.get(f"/v1/jobs/{new}").json()
    assert shown["user"] == "alice" and shown["phase"] != "held"


def test_the_openapi_documents_the_route(ctl: Controller) -> None:
    schema = TestClient(create_app(ctl)).get("/openapi.json").json()
    assert "post" in schema["paths"]["/v1/jobs/{job_id}/resubmit"]


def test_the_sdk_resubmits(tmp_path: Path) -> None:
    server = ControllerServer(tmp_path, port=0, auth=True, auto_schedule=False)
    try:
        issue = server.authenticator.issue
        alice = Client(server.url, token=issue(TokenKind.USER, user="alice", tenant="t")[0])
        root = Client(
            server.url,
            token=issue(TokenKind.USER, user="root", tenant="t", role="cluster-admin")[0],
        )
        server.controller.register(NodeInventory.model_validate(ONE_NODE))
        server.start()
        files = [{"name": "job.sh", "text": SCRIPT, "args": ["-a", "1-2"]}]
        made = alice.submit_files(files, submit_env=SHELL)
        member = f"{made['ids'][0]}_2"
        out = alice.resubmit(member)
        assert out["ids"] == [f"{out['id']}_1", f"{out['id']}_2"] and out["warnings"] == []
        assert env_of(server.controller, out["ids"][0]) == SHELL
        other = root.resubmit(member)
        assert other["warnings"] and env_of(server.controller, other["ids"][0]) is None
        with pytest.raises(ControllerError) as refused:
            alice.resubmit("12345")
        assert refused.value.status == 404 and "no job '12345'" in str(refused.value)
    finally:
        server.stop()
