"""The portal's JSON routes and static files, in process (no agents, no browser): scoping and
roles, bad input as 4xx with a reason, the operator views and a what-if run."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.controller.server import ControllerServer
from fusesched.portal.static_files import STATIC_DIR
from fusesched.store import EventRow, TokenKind


@dataclass
class Site:
    server: ControllerServer
    http: httpx.Client
    tokens: dict[str, str]

    def get(self, who: str | None, path: str, **kw: Any) -> Any:
        return self.http.get(path, headers=self.auth(who), **kw)

    def post(self, who: str | None, path: str, body: Any) -> Any:
        return self.http.post(path, headers=self.auth(who), json=body)

    def auth(self, who: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[who]}"} if who else {}


def job(**extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["sleep", "60"]}
    return {"walltime_s": 120, "groups": [group], **extra}


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    server = ControllerServer(tmp_path, port=0, auth=True, auto_schedule=False)
    try:
        issue = server.authenticator.issue
        tokens = {
            "admin": issue(TokenKind.USER, user="root", tenant="ops", role="cluster-admin")[0],
            "alice": issue(TokenKind.USER, user="alice", tenant="physics", role="user")[0],
            "bob": issue(TokenKind.USER, user="bob", tenant="biology", role="user")[0],
            "agent": server.authenticator.issue_agent("node-x"),
        }
        server.controller.register(
            NodeInventory(
                name="node-g",
                resources={
                    "cpu": "8",
                    "memory": "16Gi",
                    "nvidia.com/gpu": "1",
                    "nvidia.com/mig-1g.18gb": "1",
                },
                labels={"fusesched.io/pool": "gpu"},
                devices=[
                    DeviceInfo(index=0, uuid="GPU-0", model="H200"),
                    DeviceInfo(
                        kind="nvidia.com/mig-1g.18gb",
                        index=1,
                        uuid="MIG-1",
                        model="H200",
                        mig_profile="1g.18gb",
                    ),
                ],
            )
        )
        server.start()  # serves; no scheduling loop (jobs stay where the test puts them)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield Site(server, http, tokens)
    finally:
        server.stop()


def test_the_page_is_served_with_a_strict_policy(site: Site) -> None:
    page = site.http.get("/portal/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    for asset in ("portal.js", "portal.css", "favicon.svg"):
        assert site.http.get(f"/portal/{asset}").status_code == 200
    assert site.http.get("/portal/../pyproject.toml").status_code == 404
    assert site.http.get("/portal/nothing.js").status_code == 404


def test_every_asset_is_local() -> None:
    """No CDN, no font service: nothing the page loads comes from elsewhere."""
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        assert not re.search(r"(src|href)=\"(https?:)?//", text), path
        assert not re.search(r"url\((https?:)?//", text), path
        assert not re.search(r"fetch\(\s*['\"`]https?:", text), path
        assert "<script>" not in text  # nothing inline (the policy forbids it)


def test_me_and_roles(site: Site) -> None:
    assert site.get(None, "/v1/portal/me").status_code == 401
    assert site.get("agent", "/v1/portal/me").status_code == 403
    me = site.get("alice", "/v1/portal/me").json()
    assert me == {
        "user": "alice",
        "tenant": "physics",
        "role": "user",
        "auth": True,
        "operator": False,
        "qos_tiers": ["gold", "silver", "bronze"],  # no tenancy configuration: the defaults
        "default_qos": "silver",
    }
    assert site.get("admin", "/v1/portal/me").json()["operator"] is True
    for path in ("cluster", "queues", "history", "whatif", "whatif/w1"):
        response = site.get("alice", f"/v1/portal/{path}")
        assert response.status_code == 403, path
        assert "cluster-admin" in response.json()["detail"]
    assert site.post("alice", "/v1/portal/whatif", {}).status_code == 403


def test_a_job_is_shown_to_its_tenant_only(site: Site) -> None:
    job_id = site.post("alice", "/v1/jobs", job(name="mine")).json()["id"]
    site.server.controller.run_cycle()  # records the submission (and starts it on node-g)
    store = site.server.persist.store
    store.add_events([EventRow(time.time(), "Audit", job_id=job_id, data={"action": "x"})])
    mine = site.get("alice", f"/v1/portal/jobs/{job_id}").json()
    assert mine["job"]["id"] == job_id and mine["job"]["tenant"] == "physics"
    assert mine["request"]["name"] == "mine"
    kinds = [e["kind"] for e in mine["events"]]
    assert "JobSubmitted" in kinds and "Audit" not in kinds  # audits are admins' only
    assert [s["kind"] for s in mine["timeline"]] == ["wait", "run", "task"]
    assert "Audit" in [
        e["kind"] for e in site.get("admin", f"/v1/portal/jobs/{job_id}").json()["events"]
    ]
    assert mine["external"] is False  # local agents: its time limit can be changed
    site.server.controller.jobs[job_id].pool = "hpc"  # as if an external cluster ran it
    assert site.get("alice", f"/v1/portal/jobs/{job_id}").json()["external"] is True
    hidden = site.get("bob", f"/v1/portal/jobs/{job_id}")
    assert hidden.status_code == 404
    assert "mine" not in hidden.text
    assert site.get("bob", "/v1/portal/jobs/nope").status_code == 404


def test_cluster_view_shows_devices_and_reasons(site: Site) -> None:
    view = site.get("admin", "/v1/portal/cluster").json()
    (node,) = view["nodes"]
    assert (node["name"], node["pool"], node["state"], node["power"]) == (
        "node-g",
        "gpu",
        "up",
        "on",
    )
    names = [r["name"] for r in node["resources"]]
    assert names[:3] == ["cpu", "memory", "nvidia.com/gpu"]
    assert "nvidia.com/mig-1g.18gb" in names
    assert [d["kind"] for d in node["devices"]] == ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb"]
    assert all(d["job_id"] is None for d in node["devices"])
    assert view["unhealthy"] == [] and view["power_saving"] is False
    from fusesched.controller import failures
    from fusesched.model.node import NodeState

    ctl = site.server.controller
    with ctl.lock:
        failures.set_node_state(ctl, "node-g", NodeState.DRAINED, "bad fan", time.time())
        ctl.persist.flush()
    (bad,) = site.get("admin", "/v1/portal/cluster").json()["unhealthy"]
    assert (bad["name"], bad["state"], bad["reason"]) == ("node-g", "drained", "bad fan")


def test_queues_without_tenancy(site: Site) -> None:
    site.post("alice", "/v1/jobs", job(queue="short"))
    view = site.get("admin", "/v1/portal/queues").json()
    assert view["tenancy"] is False and view["fairshare"] == []
    assert [(q["name"], q["pending"], q["quota"]) for q in view["queues"]] == [("short", 1, [])]


def test_history_checks_its_window(site: Site) -> None:
    view = site.get("admin", "/v1/portal/history", params={"start": "-2h", "buckets": 4}).json()
    assert len(view["points"]) == 4 and view["cpus"] == 8 and view["gpus"] == 1
    assert view["step_s"] == pytest.approx(1800, rel=1e-3)
    for params, status in (
        ({"start": "yesterday-ish"}, 422),
        ({"start": "now", "end": "-1h"}, 422),
        ({"start": "-900d"}, 422),
        ({"buckets": 0}, 422),
        ({"buckets": 97}, 422),
    ):
        response = site.get("admin", "/v1/portal/history", params=params)
        assert response.status_code == status, params
        assert response.json()["detail"], params


def test_whatif_input_errors(site: Site) -> None:
    nothing = site.post("admin", "/v1/portal/whatif", {})
    assert nothing.status_code == 409 and "nothing to simulate" in nothing.json()["detail"]
    site.post("alice", "/v1/jobs", job())
    for body, status, text in (
        ({"queue_order": "nope"}, 400, "unknown queue_order"),
        ({"placement": "x"}, 400, "choose from"),
        ({"scale": 0}, 422, "greater than 0"),
        ({"scale": 5000}, 422, "less than or equal"),
        ({"scale": 16, "include_finished": 0, "extra": 1}, 422, "Extra inputs"),
    ):
        response = site.post("admin", "/v1/portal/whatif", body)
        assert response.status_code == status, body
        assert text in str(response.json()["detail"]), response.text
    assert site.get("admin", "/v1/portal/whatif/w404").status_code == 404


def test_whatif_compares_the_current_queue(site: Site) -> None:
    for _ in range(12):
        site.post("alice", "/v1/jobs", job())
    started = site.post(
        "admin", "/v1/portal/whatif", {"queue_order": "sjf", "backfill": "none", "scale": 2}
    )
    assert started.status_code == 202, started.text
    run = started.json()
    assert (run["jobs"], run["nodes"], run["alternative_nodes"]) == (12, 1, 2)
    deadline = time.monotonic() + 30
    while run["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
        run = site.get("admin", f"/v1/portal/whatif/{run['id']}").json()
    assert run["state"] == "done", run["error"]
    base, alt = run["baseline_metrics"], run["alternative_metrics"]
    assert base["jobs"] == alt["jobs"] == 12
    assert alt["avg_wait_s"] < base["avg_wait_s"]  # twice the nodes: shorter waits
    assert run["alternative"]["queue_order"] == "sjf" and run["baseline"]["queue_order"] == "fcfs"
    listed = site.get("admin", "/v1/portal/whatif").json()
    assert listed["runs"][0]["id"] == run["id"]
    assert "sjf" in listed["options"]["queue_order"]


TENANCY = """\
flavors:
  - name: cpu
    resources: [cpu, memory]
cohorts:
  - name: shared
organisations:
  - name: lab
    tenants:
      - name: physics
        queues:
          - name: qa
            cohort: shared
            users: {alice: 1}
            flavors:
              - name: cpu
                resources:
                  cpu: {nominal: 2}
                  memory: {nominal: 8Gi}
      - name: biology
        queues:
          - name: qb
            cohort: shared
            flavors:
              - name: cpu
                resources:
                  cpu: {nominal: 4}
                  memory: {nominal: 8Gi}
"""


def test_queues_with_quota_borrowing_and_fair_share(tmp_path: Path) -> None:
    from fusesched.model.tenancy import TenancyConfig
    from fusesched.policies.registry import CoreConfig
    from fusesched.policies.tenancy_policy import TenancyPolicy

    core = CoreConfig(placement="best-fit", tenancy=TenancyPolicy(TenancyConfig.from_yaml(TENANCY)))
    server = ControllerServer(tmp_path, port=0, auth=True, auto_schedule=False, core=core)
    try:
        issue = server.authenticator.issue
        admin = issue(TokenKind.USER, user="root", tenant="ops", role="cluster-admin")[0]
        alice = issue(TokenKind.USER, user="alice", tenant="physics", role="user")[0]
        ctl = server.controller
        ctl.register(NodeInventory(name="n1", resources={"cpu": "8", "memory": "16Gi"}))
        server.start()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for _ in range(3):
                made = http.post(
                    "/v1/jobs",
                    headers={"authorization": f"Bearer {alice}"},
                    json=job(queue="qa"),
                )
                assert made.status_code == 201, made.text
            ctl.run_cycle()
            ctl.run_cycle()
            view = http.get(
                "/v1/portal/queues", headers={"authorization": f"Bearer {admin}"}
            ).json()
    finally:
        server.stop()
    assert view["tenancy"] is True
    queues = {q["name"]: q for q in view["queues"]}
    qa, qb = queues["qa"], queues["qb"]
    assert (qa["tenant"], qa["cohort"], qa["running"]) == ("physics", "shared", 3)
    cpu = next(c for c in qa["quota"] if c["resource"] == "cpu")
    assert (cpu["flavor"], cpu["nominal"], cpu["used"], cpu["borrowed"]) == ("cpu", "2", "3", "1")
    assert qa["borrowing"] is True and qb["borrowing"] is False
    accounts = {f["account"] for f in view["fairshare"]}
    assert "lab/physics/qa/alice" in accounts


def test_me_names_the_tenancy_configurations_qos_tiers(tmp_path: Path) -> None:
    """Highest priority first, whatever the order in the file; equal priorities in the
    file's order; the configuration's default tier."""
    from fusesched.model.tenancy import TenancyConfig
    from fusesched.policies.registry import CoreConfig
    from fusesched.policies.tenancy_policy import TenancyPolicy

    tiers = {
        "qos": {
            "bronze": {"priority": 10},
            "silver": {"priority": 60},
            "gold": {"priority": 60, "preemptible": False},
        },
        "default_qos": "bronze",
    }
    core = CoreConfig(placement="best-fit", tenancy=TenancyPolicy(TenancyConfig.from_dict(tiers)))
    server = ControllerServer(tmp_path, port=0, auto_schedule=False, core=core).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            me = http.get("/v1/portal/me").json()
    finally:
        server.stop()
    assert (me["qos_tiers"], me["default_qos"]) == (["silver", "gold", "bronze"], "bronze")


def test_without_authentication_everyone_is_an_operator(tmp_path: Path) -> None:
    server = ControllerServer(tmp_path, port=0, auto_schedule=False).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            me = http.get("/v1/portal/me").json()
            assert (me["auth"], me["operator"], me["role"]) == (False, True, "cluster-admin")
            assert http.get("/v1/portal/cluster").status_code == 200
    finally:
        server.stop()


def test_odd_input_is_never_a_server_error(site: Site) -> None:
    """Whatever the operator routes are sent, they answer 2xx or 4xx with a reason."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    site.post("alice", "/v1/jobs", job())
    text = st.text(max_size=30)
    number = st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=True), text)
    finite = st.one_of(
        st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False), text
    )

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        start=text,
        end=text,
        buckets=number,
        body=st.dictionaries(
            st.sampled_from(["queue_order", "backfill", "placement", "scale", "include_finished"]),
            st.one_of(finite, st.sampled_from(["sjf", "easy", "best-fit"])),
        ),
        job_id=text,
    )
    def check(start: str, end: str, buckets: Any, body: dict[str, Any], job_id: str) -> None:
        params = {"start": start, "end": end, "buckets": str(buckets)}
        responses = [
            site.get("admin", "/v1/portal/history", params=params),
            site.post("admin", "/v1/portal/whatif", body),
            site.get("admin", f"/v1/portal/jobs/{quote(job_id, safe='')}"),
            site.get("admin", f"/v1/portal/whatif/{quote(job_id, safe='')}"),
        ]
        for response in responses:
            assert response.status_code < 500, response.text
            if response.status_code >= 400:
                assert response.json()["detail"]

    check()


def test_power_states_and_why(tmp_path: Path) -> None:
    from fusesched.controller.power import PowerConfig

    power = PowerConfig(suspend=("true",), resume=("true",))
    server = ControllerServer(tmp_path, port=0, auto_schedule=False, power=power).start()
    try:
        ctl = server.controller
        ctl.register(NodeInventory(name="n1", resources={"cpu": "4", "memory": "4Gi"}))
        ctl.register(NodeInventory(name="n2", resources={"cpu": "4", "memory": "4Gi"}))
        assert ctl.power is not None
        with ctl.lock:
            ctl.power._suspend(ctl, "n2", time.time())  # as the power-saving policy does
            ctl.persist.flush()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            deadline = time.monotonic() + 10
            while True:
                view = http.get("/v1/portal/cluster").json()
                (n2,) = view["unhealthy"]
                if n2["power"] == "suspended" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
    finally:
        server.stop()
    assert view["power_saving"] is True
    assert (n2["name"], n2["state"], n2["power"]) == ("n2", "suspended", "suspended")
    assert n2["reason"] == "idle: power saving"
    assert {n["name"]: n["power"] for n in view["nodes"]} == {"n1": "on", "n2": "suspended"}


# ------------------------------------------------------------------ audit findings


def test_a_machine_credential_is_refused_in_plain_english(site: Site) -> None:
    """The login form shows this message as it is: "a agent credential" read as a typo."""
    refused = site.get("agent", "/v1/portal/me")
    assert refused.status_code == 403
    assert refused.json()["detail"] == "an agent credential cannot use the portal"


def test_an_array_job_id_names_its_members(site: Site) -> None:
    """Submitting an array answers the array's id, which has no job of its own: its page
    said only "no job '4'" although the user had just submitted it. It names the members
    (to those who may see them)."""
    array = {
        "name": "sweep",
        "walltime_s": 60,
        "array": {"start": 0, "stop": 5},
        "groups": [{"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["true"]}],
    }
    made = site.post("alice", "/v1/jobs", array)
    assert made.status_code == 201, made.text
    parent, members = made.json()["id"], made.json()["ids"]
    site.server.controller.run_cycle()  # records the submission
    for who in ("alice", "admin"):
        response = site.get(who, f"/v1/portal/jobs/{parent}")
        assert response.status_code == 404
        detail = response.json()["detail"]
        assert f"job {parent} is a job array" in detail, detail
        assert ", ".join(members[:3]) in detail and members[3] not in detail, detail
    assert site.get("alice", f"/v1/portal/jobs/{members[0]}").status_code == 200
    hidden = site.get("bob", f"/v1/portal/jobs/{parent}")
    assert hidden.status_code == 404
    assert hidden.json()["detail"] == f"no job {parent!r}"  # nothing of alice's array
    assert site.get("alice", "/v1/portal/jobs/12345").json()["detail"] == "no job '12345'"
