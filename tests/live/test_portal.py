"""The portal end to end: a real controller with authentication and three real agents, driven
through Debian's Chromium (headless) by Playwright. A user logs in, submits a job through the
form, watches it run and complete, reads its logs, cancels and resubmits another; a user of
another tenant sees none of it; an operator sees the heat map, queues, charts, drained nodes
and a what-if comparison. Each page is saved as a screenshot in a folder the run prints
(``FUSESCHED_PORTAL_SHOTS`` chooses it)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.controller import failures
from fusesched.model.node import NodeState
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sdk import Client

from .browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, playwright_or_skip
from .conftest import local_cluster

#: Quotas for the queues page: "physics" may borrow what "default" does not use.
TENANCY = """\
flavors:
  - name: cpu
    resources: [cpu, memory]
cohorts:
  - name: shared
organisations:
  - name: lab
    tenants:
      - name: default
        queues:
          - name: default
            cohort: shared
            flavors:
              - name: cpu
                resources:
                  cpu: {nominal: 4}
                  memory: {nominal: 4Gi}
      - name: physics
        queues:
          - name: physics
            cohort: shared
            users: {alice: 1}
            flavors:
              - name: cpu
                resources:
                  cpu: {nominal: 1}
                  memory: {nominal: 1Gi}
"""
WAIT_MS = 20_000

playwright_sync = playwright_or_skip()
expect = playwright_sync.expect


def job(argv: list[str], **extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "250m", "memory": "64Mi"}, "argv": argv}
    return {"name": extra.pop("name", "portal"), "walltime_s": 600, "groups": [group], **extra}


def wait_state(client: Client, job_id: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while client.show(job_id)["state"] != state:
        assert time.monotonic() < deadline, f"job {job_id} never reached {state}"
        time.sleep(0.05)


@dataclass
class Portal:
    cluster: LocalCluster
    url: str
    tokens: dict[str, str]
    shots: Path
    browser: Any
    bob_job: str

    def client(self, who: str) -> Client:
        return Client(self.url, token=self.tokens[who])

    def login(self, who: str, script: str | None = None) -> Any:
        """A fresh browser context (its own session storage) logged in as ``who`` (``script``:
        run in each of its pages before the portal's own)."""
        context = self.browser.new_context(viewport=LAPTOP)
        if script is not None:
            context.add_init_script(script)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{self.url}/portal/")
        page.get_by_label("API token").fill(self.tokens[who])
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
        return page

    def shot(self, page: Any, name: str) -> None:
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)


def announce(config: pytest.Config, line: str) -> None:
    """Print ``line`` past pytest's output capture (the screenshots' folder)."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        print(f"\n{line}", flush=True)


@pytest.fixture(scope="module")
def portal(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Portal]:
    wanted = os.environ.get("FUSESCHED_PORTAL_SHOTS")
    shots = Path(wanted) if wanted else Path(tempfile.mkdtemp(prefix="fusesched-portal-shots-"))
    shots.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=WAIT_MS)
    announce(pytestconfig, f"portal screenshots: {shots}")
    data = tmp_path_factory.mktemp("portal") / "data"
    tenancy = TenancyPolicy(TenancyConfig.from_yaml(TENANCY))
    core = CoreConfig(placement="best-fit", tenancy=tenancy)
    try:
        with (
            local_cluster(data, auth=True, core=core) as cluster,
            playwright_sync.sync_playwright() as pw,
        ):
            admin = cluster.admin_token
            assert admin is not None
            tokens = {"admin": admin}
            root = Client(cluster.url, token=admin)
            for name, tenant in (("alice", "physics"), ("bob", "biology")):
                tokens[name] = root.create_token(name, tenant=tenant)["token"]
            bob = Client(cluster.url, token=tokens["bob"])
            bob_job = bob.submit(job(["sleep", "600"], name="bob-secret"))
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Portal(cluster, cluster.url, tokens, shots, browser, bob_job)
            finally:
                browser.close()
    finally:
        announce(pytestconfig, f"portal screenshots: {shots}")


def test_login_is_required_and_bad_tokens_are_refused(portal: Portal) -> None:
    context = portal.browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{portal.url}/portal/#/jobs")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    portal.shot(page, "01-login")
    # from the keyboard alone: the token field has the focus, Enter logs in
    expect(page.get_by_label("API token")).to_be_focused()
    page.keyboard.type("fsk_0123456789abcdef_" + "x" * 43)
    page.keyboard.press("Enter")
    expect(page.locator("#login-error")).to_contain_text("Not a valid token")
    expect(page.get_by_label("API token")).to_be_focused()
    page.keyboard.press("Control+A")
    page.keyboard.type(portal.tokens["alice"])
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_label("State")).to_be_focused()
    context.close()


def test_a_revoked_token_ends_the_session(portal: Portal) -> None:
    admin = portal.client("admin")
    made = admin.create_token("dave", tenant="physics")
    portal.tokens["dave"] = made["token"]
    page = portal.login("dave")
    admin.revoke_token(made["id"])
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()  # at the next refresh
    expect(page.locator("#login-error")).to_contain_text("no longer valid")
    page.context.close()


def test_submit_through_the_form_run_complete_and_read_logs(portal: Portal) -> None:
    page = portal.login("alice")
    portal.shot(page, "02-jobs-alice")
    page.get_by_role("link", name="Submit").click()
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    # the page's own checks: no command
    page.get_by_label("Name", exact=True).fill("portal-hello")
    page.get_by_role("button", name="Submit job").click()
    errors = page.locator("#submit-errors")
    expect(errors).to_contain_text("Give a command to run")
    expect(page.locator("#s-command")).to_have_attribute("aria-invalid", "true")
    # the server's validation (pydantic, 422): shown at the field it names
    page.get_by_label("Command").fill("echo portal-hello; sleep 2; echo portal-bye")
    page.get_by_label("CPU per task").fill("0.0001")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#s-cpu-err")).to_contain_text("whole number of milli-cores")
    portal.shot(page, "03-submit-errors")
    # the server's feasibility check (400): no node could ever hold it
    page.get_by_label("CPU per task").fill("64")
    page.get_by_role("button", name="Submit job").click()
    expect(errors).to_contain_text("400")
    page.get_by_label("CPU per task").fill("250m")
    page.get_by_label("Memory per task").fill("64Mi")
    page.get_by_role("button", name="Submit job").click()
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_have_text(re.compile(r"^Job \d+ — portal-hello"))
    job_id = page.url.rsplit("/", 1)[1]
    state = page.locator("#job-state")
    expect(state).to_have_text("Running")
    expect(page.locator("#placement")).to_contain_text("node-")
    portal.shot(page, "04-job-running")
    expect(state).to_have_text("Completed", timeout=30_000)
    expect(page.locator("#logs")).to_contain_text("portal-hello")
    expect(page.locator("#logs")).to_contain_text("portal-bye")
    expect(page.locator("#events")).to_contain_text("JobCompleted")
    expect(page.locator("#timeline svg rect.run")).to_have_count(1)
    expect(page.locator("#energy-total")).to_contain_text("kWh")
    # its final sample came with its exit: the ended job's use, asked for once
    expect(page.locator("#efficiency")).to_contain_text("CPU")
    # its log is complete (the controller says so): read no more, though the page refreshes
    expect(page.locator("#logs")).to_have_attribute("data-complete", "true")
    expect(page.locator("#logs-note")).to_have_text("")  # (its agent confirmed the end)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/efficiency" in r.url else None)
    page.on("request", lambda r: asked.append(r.url) if "/logs" in r.url else None)
    page.wait_for_timeout(2500)  # the page still refreshes for 10 s after the end
    assert asked == []
    expect(page.locator("#spec")).to_contain_text('"portal-hello"')
    portal.shot(page, "05-job-completed")
    shown = portal.client("alice").show(job_id)
    assert (shown["user"], shown["tenant"], shown["state"]) == ("alice", "physics", "Completed")
    page.get_by_role("link", name="Jobs").click()
    row = page.locator(f'#jobs tr[data-job="{job_id}"]')
    expect(row).to_contain_text("Completed")
    page.get_by_label("State").select_option("Completed")
    page.get_by_role("button", name="Apply").click()
    expect(row).to_be_visible()
    page.context.close()


def test_a_log_past_the_reads_cap_is_read_to_its_end(portal: Portal) -> None:
    """The log route answers 4 MiB a read (``X-Log-More``): the page asks for the rest at
    once, up to the end (it shows the last million characters of so long a log)."""
    write = "yes 'é€😀 line' | head -n 300000; echo the-very-end"  # (4.5 MB)
    job_id = portal.client("alice").submit(job(["sh", "-c", write], name="chatty"))
    wait_state(portal.client("alice"), job_id, "Completed")
    page = portal.login("alice")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/logs" in r.url else None)
    page.goto(f"{portal.url}/portal/#/job/{job_id}")
    logs = page.locator("#logs")
    expect(logs).to_have_attribute("data-complete", "true")
    shown = logs.text_content() or ""
    assert shown.endswith("é€😀 line\nthe-very-end\n"), shown[-200:]
    offsets = [int(url.rsplit("offset=", 1)[1]) for url in asked]
    # the second read at once, where the first stopped: 4 MiB, less a character it cut
    assert offsets[0] == 0 and 4 * 2**20 - 4 < offsets[1] < 4 * 2**20, asked
    page.context.close()


def test_a_slow_log_read_is_not_read_twice(portal: Portal) -> None:
    """A log read slower than the page's second-by-second refresh (a slow link, or the reads
    of a long log one after another) is the only one under way: a second read from the same
    offset would show that output twice."""
    write = "for i in $(seq 1 12); do echo line-$i; sleep 0.5; done"
    job_id = portal.client("alice").submit(job(["sh", "-c", write], name="slow-link"))
    slow_reads = """(() => {  // every log read takes 1.5 s, as over a slow link
      const fetch = window.fetch;
      window.fetch = (path, options) => String(path).includes("/logs")
        ? new Promise((done) => setTimeout(() => done(fetch(path, options)), 1500))
        : fetch(path, options);
    })();"""
    page = portal.login("alice", slow_reads)
    page.goto(f"{portal.url}/portal/#/job/{job_id}")
    logs = page.locator("#logs")
    expect(logs).to_have_attribute("data-complete", "true")
    page.wait_for_timeout(2000)  # (a read still under way would show its text by now)
    shown = (logs.text_content() or "").split()
    assert shown == [f"line-{i}" for i in range(1, 13)], shown
    page.context.close()


def test_a_job_is_submitted_into_a_reservation_from_the_form(portal: Portal) -> None:
    admin = portal.client("admin")
    now = time.time()
    admin.create_reservation("alice-now", ["node-b"], now + 1, now + 3600, ["alice"])
    admin.create_reservation("bobs", ["node-a"], now + 1, now + 3600, ["bob"])
    try:
        page = portal.login("alice")
        page.get_by_role("link", name="Submit").click()
        chooser = page.get_by_label("Reservation")
        # hers only: bob's is not offered
        expect(chooser.locator("option")).to_have_count(2)
        expect(chooser.locator("option").nth(1)).to_contain_text("alice-now: node-b")
        chooser.select_option("alice-now")
        page.get_by_label("Name", exact=True).fill("in-reservation")
        page.get_by_label("Command").fill("echo inside")
        page.get_by_label("CPU per task").fill("250m")
        page.get_by_label("Memory per task").fill("64Mi")
        expect(page.locator("#preview")).to_contain_text('"reservation": "alice-now"')
        page.get_by_role("button", name="Submit job").click()
        expect(page.get_by_role("heading", level=1)).to_have_text(
            re.compile(r"^Job \d+ — in-reservation")
        )
        expect(page.locator("#job-state")).to_have_text("Completed", timeout=30_000)
        expect(page.locator("#placement")).to_contain_text("node-b")
        page.context.close()
    finally:
        for name in ("alice-now", "bobs"):
            admin.delete_reservation(name)


def test_cancel_and_resubmit(portal: Portal) -> None:
    """Resubmit is the controller's: alice's new job inherits the shell she submitted from
    (never shown to the page); the admin's resubmission of it is his own, without it, and
    the page says so."""
    alice = portal.client("alice")
    shell = {"PATH": os.environ["PATH"], "PORTAL_MARK": "from-alices-shell"}
    argv = ["sh", "-c", "echo mark=$PORTAL_MARK; exec sleep 600"]
    victim = alice.submit(job(argv, name="to-cancel", submit_env=shell))
    wait_state(alice, victim, "Running")
    page = portal.login("alice")
    page.locator(f'#jobs tr[data-job="{victim}"] a').click()
    expect(page.locator("#job-state")).to_have_text("Running")
    page.get_by_role("button", name="Cancel job").click()  # the confirm dialog is accepted
    expect(page.locator("#job-state")).to_have_text("Cancelled", timeout=30_000)
    expect(page.get_by_role("button", name="Cancel job")).to_be_disabled()
    portal.shot(page, "06-job-cancelled")
    page.get_by_role("button", name="Resubmit").click()
    expect(page).not_to_have_url(re.compile(rf"#/job/{victim}$"))
    again = page.url.rsplit("/", 1)[1]
    assert again != victim
    expect(page.get_by_role("heading", level=1)).to_contain_text("to-cancel")
    expect(page.locator("#action-msg")).to_have_text(f"Resubmitted job {victim}.")
    assert alice.show(again)["user"] == "alice"
    deadline = time.monotonic() + 30
    while "mark=from-alices-shell" not in alice.logs(again):
        assert time.monotonic() < deadline, alice.logs(again)
        time.sleep(0.1)
    alice.cancel(again)
    admin = portal.login("admin")
    admin.goto(f"{portal.url}/portal/#/job/{victim}")
    admin.get_by_role("button", name="Resubmit").click()  # the confirmation is accepted
    expect(admin.locator("#action-msg")).to_contain_text(f"job {victim} is alice's")
    expect(admin.locator("#action-msg")).to_contain_text("inherits none")
    theirs = admin.url.rsplit("/", 1)[1]
    assert portal.client("admin").show(theirs)["user"] != "alice"
    portal.client("admin").cancel(theirs)
    admin.context.close()
    never = alice.submit(job(["true"], name="never-started", hold=True))
    alice.cancel(never)  # its wait ended with it: the list does not go on counting
    page.goto(page.url.split("#")[0] + "#/jobs")
    cell = page.locator(f'#jobs tr[data-job="{never}"] td').nth(8)
    expect(cell).to_have_text(re.compile(r"^\d+\.\d s$"))
    first = cell.inner_text()
    page.wait_for_timeout(2_500)  # past a refresh
    assert cell.inner_text() == first
    page.context.close()


def test_a_user_sees_only_their_tenant(portal: Portal) -> None:
    alice = portal.login("alice")
    expect(alice.locator("#jobs tbody tr").first).to_be_visible()
    assert "bob-secret" not in alice.content()
    expect(alice.locator("#jobs")).not_to_contain_text("biology")
    expect(alice.get_by_role("link", name="Cluster")).to_be_hidden()  # no operator pages
    alice.goto(f"{portal.url}/portal/#/job/{portal.bob_job}")
    expect(alice.get_by_role("alert")).to_contain_text("no job")
    portal.shot(alice, "07-other-tenant-job-hidden")
    status = alice.evaluate(
        """async () => (await fetch('/v1/portal/cluster', {headers: {authorization:
            'Bearer ' + sessionStorage.getItem('fusesched.token')}})).status"""
    )
    assert status == 403
    alice.context.close()
    bob = portal.login("bob")
    expect(bob.locator(f'#jobs tr[data-job="{portal.bob_job}"]')).to_contain_text("bob-secret")
    expect(bob.locator("#jobs")).not_to_contain_text("physics")
    bob.context.close()


def test_operator_pages(portal: Portal) -> None:
    admin = portal.client("admin")
    gpu_job = admin.submit(
        {
            "name": "gpu-holder",
            "walltime_s": 600,
            "groups": [
                {
                    "resources": {"cpu": "500m", "memory": "64Mi", "nvidia.com/gpu": 1},
                    "argv": ["sleep", "600"],
                }
            ],
        }
    )
    wait_state(admin, gpu_job, "Running")
    alice = portal.client("alice")
    borrower = alice.submit(
        {
            "name": "borrower",
            "queue": "physics",
            "walltime_s": 600,
            "groups": [{"resources": {"cpu": "2", "memory": "64Mi"}, "argv": ["sleep", "600"]}],
        }
    )
    wait_state(alice, borrower, "Running")
    ctl = portal.cluster.server.controller
    with ctl.lock:
        why = "maintenance: new DIMMs"
        failures.set_node_state(ctl, "node-b", NodeState.DRAINED, why, ctl.clock())
        ctl.persist.flush()
    ctl.wake()
    try:
        page = portal.login("admin")
        expect(page.locator(f'#jobs tr[data-job="{portal.bob_job}"]')).to_be_visible()
        page.get_by_role("link", name="Cluster").click()
        heat = page.locator("#heatmap table")
        for node in ("node-a", "node-b", "node-c"):
            expect(heat.locator(f'tr[data-node="{node}"]')).to_be_visible()
        expect(heat.locator('tr[data-node="node-c"] td.dev')).to_have_count(2)
        expect(heat.locator('tr[data-node="node-c"]')).to_contain_text(f"#{gpu_job}")
        expect(page.locator("#unhealthy")).to_contain_text("maintenance: new DIMMs")
        # quantities in readable units (not "64Mi of 49367544Ki"); CPUs as numbers
        memory = re.compile(r"memory[\d.]+ (B|KiB|MiB|GiB) of [\d.]+ (MiB|GiB|TiB) \(\d+%\)")
        expect(page.locator("#pools")).to_contain_text(memory)
        expect(page.locator("#pools")).not_to_contain_text(re.compile(r"\dKi\b|\dMi\b"))
        in_a_month = time.time() + 30 * 86400
        admin.create_reservation("dimms", ["node-a"], in_a_month, in_a_month + 3600)
        admin.create_reservation("alice-slot", ["node-b"], in_a_month, in_a_month + 60, ["alice"])
        reservations = page.locator("#reservations")
        expect(reservations.locator('tr[data-reservation="dimms"]')).to_contain_text(
            "maintenance: nobody's jobs"
        )
        expect(reservations.locator('tr[data-reservation="alice-slot"]')).to_contain_text(
            "user alice"
        )
        portal.shot(page, "08-cluster-heatmap")
        page.goto(f"{portal.url}/portal/#/job/{gpu_job}")  # placement: node and GPU index
        held = admin.show(gpu_job)["tasks"][0]["gpu_indices"]
        row = page.locator("#placement tbody tr").first
        expect(row).to_contain_text("node-c")
        expect(row.locator("td").nth(2)).to_have_text(", ".join(map(str, held)))
        portal.shot(page, "08b-gpu-job")
        page.get_by_role("link", name="Cluster").click()
        expect(heat.locator('tr[data-node="node-c"]')).to_be_visible()
        page.get_by_role("link", name="Queues").click()
        queues = page.locator("#queues")
        expect(queues).to_contain_text("cpu / cpu: 2 of 1, borrowing 1")
        expect(page.locator("#fairshare")).to_contain_text("lab/physics/physics/alice")
        portal.shot(page, "09-queues")
        page.get_by_role("link", name="Charts").click()
        for chart in ("util", "wait", "energy"):
            expect(page.locator(f"#svg-{chart}")).to_be_visible()
        expect(page.locator('#svg-util path[data-series="CPU"]')).to_have_count(1)
        expect(page.locator("#svg-energy rect")).to_have_count(30)
        portal.shot(page, "10-charts")
        page.get_by_role("link", name="What-if").click()
        page.get_by_label("Queue order").select_option("sjf")
        page.get_by_label("Cluster size").fill("2")
        page.get_by_label("Recent ended jobs to include").fill("20")
        page.get_by_role("button", name="Run what-if").click()
        table = page.locator("#whatif-table")
        expect(table).to_contain_text("Mean wait")
        expect(page.locator("#whatif-result")).to_contain_text("sjf")
        portal.shot(page, "11-whatif")
        page.context.close()
    finally:
        with ctl.lock:
            failures.set_node_state(ctl, "node-b", NodeState.UP, "maintenance done", ctl.clock())
            ctl.persist.flush()
        ctl.wake()
        for name in (r["name"] for r in admin.reservations()):
            admin.delete_reservation(name)
        admin.cancel(gpu_job)
        alice.cancel(borrower)
