"""The job page's Edit form (``POST /v1/jobs/{id}/update``) in Debian's Chromium, headless,
driven by Playwright: a waiting job's priority, QoS and time limit changed from the page and
seen on it and through the API; a user's attempt to raise a priority refused with the
server's reason on the page; a time the page cannot read refused before anything is sent; a
running job's time limit alone shortened by a user, lengthened by an admin, a user's
lengthening refused, a limit passed already said before saving (and the job stopped as timed
out); the open form closed when the job starts or ends; the QoS tiers of a tenancy
configuration; a 390 px screen. A controller with authentication and no agents: a job placed
on a node counts as running, nothing runs."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fusesched.api.wire import NodeInventory
from fusesched.controller.server import ControllerServer
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sdk import Client
from fusesched.store import TokenKind

from .browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, playwright_or_skip

PHONE = {"width": 390, "height": 800}
WAIT_MS = 15_000
GROUP = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["true"]}
WAITING = "Change the waiting job"
RUNNING = "Change the job's time limit"
# a site's own QoS tiers, listed lowest first (the portal lists them highest first)
TIERS = {
    "qos": {"bronze": {"priority": 10}, "gold": {"priority": 100, "preemptible": False}},
    "default_qos": "bronze",
}

playwright_sync = playwright_or_skip()
expect = playwright_sync.expect


@dataclass
class Portal:
    url: str
    tokens: dict[str, str]
    browser: Any
    server: ControllerServer
    errors: list[str]  # uncaught exceptions in any page
    dialogs: list[str]  # alert/confirm/prompt texts (the Edit form opens none)
    nodes: list[str] = field(default_factory=list)  # nodes of running jobs, one each

    def new_page(self, who: str, viewport: dict[str, int] | None = None) -> Any:
        """A page logged in as ``who`` on the job list."""
        context = self.browser.new_context(viewport=viewport or LAPTOP)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(f"{self.url}/portal/")
        page.get_by_label("API token").fill(self.tokens[who])
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
        return page

    def client(self, who: str) -> Client:
        return Client(self.url, token=self.tokens[who])

    def waiting(self, who: str = "alice", **request: Any) -> str:
        """A job that stays Pending: it waits for a held one (which never starts)."""
        client = self.client(who)
        tier = {"qos": request["qos"]} if "qos" in request else {}
        blocker = client.submit(
            {"name": "blocker", "walltime_s": 60, "hold": True, "groups": [GROUP], **tier}
        )
        after = [{"kind": "afterany", "job_id": blocker}]
        body = {"name": "waits", "walltime_s": 600, "dependencies": after, "groups": [GROUP]}
        return client.submit({**body, **request})

    def running(self, who: str = "alice", walltime_s: int = 600) -> str:
        """A job that counts as running: placed on a node of its own that has no agent (its
        task is never sent, nothing runs; it ends only when stopped)."""
        name = f"n-run-{len(self.nodes)}"
        self.nodes.append(name)
        self.server.controller.register(
            NodeInventory(name=name, resources={"cpu": "1", "memory": "1Gi"}, labels={"on": name})
        )
        client = self.client(who)
        job = client.submit(
            {
                "name": "runs",
                "walltime_s": walltime_s,
                "groups": [GROUP],
                "placement": {"node_selector": {"on": name}},
            }
        )
        deadline = time.monotonic() + WAIT_MS / 1000
        while client.show(job)["state"] != "Running":
            assert time.monotonic() < deadline, f"{job} did not start"
            time.sleep(0.05)
        return job

    def stored(self, job_id: str) -> dict[str, Any]:
        """The job's stored request, through the API (as the admin)."""
        call = urllib.request.Request(
            f"{self.url}/v1/portal/jobs/{job_id}",
            headers={"authorization": f"Bearer {self.tokens['admin']}"},
        )
        with urllib.request.urlopen(call, timeout=10) as answer:
            return dict(json.load(answer)["request"])

    def open_job(
        self,
        who: str,
        job_id: str,
        viewport: dict[str, int] | None = None,
        state: str = "Pending",
    ) -> Any:
        """A logged-in page on ``job_id`` (in ``state``), its Edit form open."""
        page = self.new_page(who, viewport)
        page.goto(f"{self.url}/portal/#/job/{job_id}")
        expect(page.locator("#job-state")).to_have_text(state)
        edit = page.get_by_role("button", name="Edit")
        expect(edit).to_have_attribute("aria-expanded", "false")
        edit.click()
        expect(edit).to_have_attribute("aria-expanded", "true")
        heading = WAITING if state == "Pending" else RUNNING
        expect(page.get_by_role("heading", name=heading)).to_be_visible()
        return page


@pytest.fixture(scope="module")
def portal() -> Iterator[Portal]:
    expect.set_options(timeout=WAIT_MS)
    root = Path(tempfile.mkdtemp(prefix="fusesched-portal-update-"))
    server = ControllerServer(root / "data", port=0, auth=True)
    try:
        issue = server.authenticator.issue
        tokens = {
            "admin": issue(TokenKind.USER, user="root", tenant="ops", role="cluster-admin")[0],
            "alice": issue(TokenKind.USER, user="alice", tenant="physics", role="user")[0],
        }
        server.controller.register(
            NodeInventory(name="n1", resources={"cpu": "8", "memory": "16Gi"})
        )
        server.start()
        with playwright_sync.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Portal(server.url, tokens, browser, server, [], [])
            finally:
                browser.close()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def clean(portal: Portal) -> Iterator[Portal]:
    """``portal``, failing the test if a page threw an uncaught exception or opened a
    dialog meanwhile."""
    portal.errors.clear()
    portal.dialogs.clear()
    yield portal
    assert portal.errors == []
    assert portal.dialogs == []


def facts(page: Any) -> Any:
    return page.locator("dl.facts").first


def test_a_waiting_job_is_changed_from_its_page(clean: Portal) -> None:
    """The form starts from the job's values; a lower priority and a shorter limit (MM:SS,
    as the CLI reads it) are saved, shown on the page and stored; the QoS, unchanged, is
    not sent."""
    job = clean.waiting()
    page = clean.open_job("alice", job)
    expect(page.get_by_label("Priority")).to_be_focused()
    expect(page.get_by_label("Priority")).to_have_value("0")
    expect(page.get_by_label("QoS tier")).to_have_value("silver")
    # without a tenancy configuration, the default tiers
    expect(page.get_by_label("QoS tier").locator("option")).to_have_text(
        ["gold (highest)", "silver", "bronze (lowest)"]
    )
    expect(page.get_by_label("Time limit")).to_have_value("00:10:00")
    expect(page.locator("#edit-rule")).to_be_visible()  # a user may only lower
    # it waits for a held job: the projection of expected starts never starts it
    expect(facts(page)).to_contain_text("Expected startnot within 7 days")
    expect(page.locator("#efficiency")).to_have_text("—known once it runs")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if "/update" in r.url else None)
    page.get_by_label("Priority").fill("-5")
    page.get_by_label("Time limit").fill("5:00")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(
        f"Changed {job}: priority -5, time limit 00:05:00."
    )
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(page.get_by_role("button", name="Edit")).to_be_focused()
    expect(facts(page)).to_contain_text("Priority-5")
    expect(facts(page)).to_contain_text("Time limit00:05:00 (5 min 0 s)")
    expect(page.locator("#events")).to_contain_text("JobUpdated")
    assert [json.loads(body) for body in sent] == [{"priority": -5, "walltime_s": 300}]
    stored = clean.stored(job)
    assert (stored["priority"], stored["walltime_s"], stored.get("qos", "silver")) == (
        -5,
        300,
        "silver",
    )
    page.get_by_role("button", name="Edit").click()  # opens again from the new values
    expect(page.get_by_label("Priority")).to_have_value("-5")
    expect(page.get_by_label("Time limit")).to_have_value("00:05:00")
    page.context.close()


def test_an_admin_raises_a_priority_a_qos_and_a_limit(clean: Portal) -> None:
    """An admin may raise all three (D-HH: a day); the user rule is not shown to them."""
    job = clean.waiting()
    page = clean.open_job("admin", job)
    expect(page.locator("#edit-rule")).to_be_hidden()
    page.get_by_label("Priority").fill("50")
    page.get_by_label("QoS tier").select_option("gold")
    page.get_by_label("Time limit").fill("1-00")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(
        f"Changed {job}: priority 50, QoS gold, time limit 1-00:00:00."
    )
    expect(facts(page)).to_contain_text("QoSgold")
    stored = clean.stored(job)
    assert (stored["priority"], stored["qos"], stored["walltime_s"]) == (50, "gold", 86400)
    page.context.close()


def test_a_user_raising_a_priority_sees_the_reason_on_the_page(clean: Portal) -> None:
    """The server's 403 is shown in the form, in words (no dialog, no JSON), and nothing
    changes."""
    job = clean.waiting()
    page = clean.open_job("alice", job)
    page.get_by_label("Priority").fill("7")
    page.get_by_role("button", name="Save changes").click()
    box = page.locator("#edit-errors")
    expect(box).to_contain_text("only an admin may raise a priority (0 → 7)")
    expect(box).not_to_contain_text("{")
    expect(box).to_be_focused()
    expect(page.locator("#edit-form")).to_be_visible()
    expect(page.get_by_role("button", name="Save changes")).to_be_enabled()
    assert clean.stored(job).get("priority", 0) == 0
    page.context.close()


def test_a_time_the_page_cannot_read_is_refused_and_nothing_is_sent(clean: Portal) -> None:
    """A time not in the CLI's formats, a limit lifted (0) and a fractional priority are
    named at their fields; no request leaves the page."""
    job = clean.waiting()
    page = clean.open_job("alice", job)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "/update" in r.url else None)
    limit = page.get_by_label("Time limit")
    limit.fill("1h30")
    page.get_by_role("button", name="Save changes").click()
    error = page.locator("#e-limit-err")
    expect(error).to_contain_text('"1h30" is not a time')
    expect(error).to_contain_text("MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
    expect(limit).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#edit-errors")).to_contain_text("Time limit:")
    limit.fill("0")
    page.get_by_label("Priority").fill("1.5")
    page.get_by_role("button", name="Save changes").click()
    expect(error).to_contain_text("cannot be lifted")
    expect(page.locator("#e-priority-err")).to_contain_text("whole number")
    limit.fill("00:10:00")  # back to the job's own values: nothing to send
    page.get_by_label("Priority").fill("0")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#edit-errors")).to_contain_text("Nothing to change")
    expect(limit).not_to_have_attribute("aria-invalid", "true")
    time.sleep(0.3)  # a request, had one been made, would have been seen by now
    assert sent == []
    page.context.close()


def test_an_open_form_closes_when_the_job_starts_or_ends(clean: Portal) -> None:
    """Edit is there while the job waits; when it starts, the open form closes and says
    that only the time limit can still be changed, and Edit stays (for the limit); requeued,
    the running job's form closes and says what can be changed again; when the job ends,
    the open form closes and says so, and Edit goes."""
    clean.server.controller.register(
        NodeInventory(
            name="n-edit", resources={"cpu": "4", "memory": "8Gi"}, labels={"edit": "yes"}
        )
    )
    client = clean.client("alice")
    job = client.submit(
        {
            "name": "held",
            "walltime_s": 60,
            "hold": True,
            "groups": [GROUP],
            "placement": {"node_selector": {"edit": "yes"}},
        }
    )
    page = clean.open_job("alice", job)
    expect(facts(page)).to_contain_text("Pending (held)")
    client.release(job)
    expect(page.locator("#job-state")).to_have_text("Running")
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(page.locator("#action-msg")).to_have_text(
        "The job is Running now: only its time limit can still be changed."
    )
    edit = page.get_by_role("button", name="Edit")
    expect(edit).to_be_focused()  # the focus was in the form: back to its button
    edit.click()
    expect(page.get_by_role("heading", name=RUNNING)).to_be_visible()
    client.requeue(job, hold=True)  # waiting again: the running job's form closes
    expect(page.locator("#job-state")).to_have_text("Pending")
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(page.locator("#action-msg")).to_have_text(
        "The job is Pending now: its priority, QoS and time limit can be changed again."
    )
    edit.click()
    expect(page.get_by_role("heading", name=WAITING)).to_be_visible()
    expect(page.get_by_label("Priority")).to_be_visible()
    client.cancel(job)
    expect(page.locator("#job-state")).to_have_text("Cancelled")
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(page.get_by_role("button", name="Edit")).to_be_hidden()
    expect(page.locator("#action-msg")).to_have_text(
        "The job is Cancelled now: it can no longer be changed."
    )
    page.reload()  # an ended job's page never offers it
    expect(page.locator("#job-state")).to_have_text("Cancelled")
    expect(page.get_by_role("button", name="Edit")).to_be_hidden()
    page.context.close()


def test_a_user_shortens_a_running_jobs_time_limit(clean: Portal) -> None:
    """A running job's form has its time limit alone (the priority and the QoS hidden, and
    why), the user's rule for it; a shorter limit is sent alone, shown and stored, and the
    job runs on."""
    job = clean.running()
    page = clean.open_job("alice", job, state="Running")
    limit = page.get_by_label("Time limit", exact=True)
    expect(limit).to_be_focused()
    expect(limit).to_have_value("00:10:00")
    expect(page.get_by_label("Priority")).to_be_hidden()
    expect(page.get_by_label("QoS tier")).to_be_hidden()
    expect(page.locator("#edit-only")).to_contain_text("only its time limit can be changed")
    expect(page.locator("#edit-rule")).to_have_text(
        "You may shorten the time limit; only an admin may lengthen it."
    )
    expect(page.locator("#e-limit-hint")).to_contain_text("It has run for")
    # no agent runs it, so nothing was sampled: the panel says so (GET …/efficiency's notes)
    expect(page.locator("#efficiency")).to_contain_text("Notenot sampled yet")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if "/update" in r.url else None)
    limit.fill("5:00")
    expect(page.locator("#edit-passed")).to_have_text("")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(f"Changed {job}: time limit 00:05:00.")
    expect(page.locator("#edit-form")).to_be_hidden()
    expect(facts(page)).to_contain_text("Time limit00:05:00 (5 min 0 s)")
    expect(page.locator("#job-state")).to_have_text("Running")
    assert [json.loads(body) for body in sent] == [{"walltime_s": 300}]
    assert clean.stored(job)["walltime_s"] == 300
    client = clean.client("alice")
    assert client.show(job)["state"] == "Running"
    client.cancel(job)
    page.context.close()


def test_an_admin_lengthens_a_running_jobs_time_limit(clean: Portal) -> None:
    job = clean.running()
    page = clean.open_job("admin", job, state="Running")
    expect(page.locator("#edit-rule")).to_be_hidden()
    page.get_by_label("Time limit", exact=True).fill("2:00:00")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(f"Changed {job}: time limit 02:00:00.")
    expect(facts(page)).to_contain_text("Time limit02:00:00 (2 h 0 min)")
    assert clean.stored(job)["walltime_s"] == 7200
    clean.client("admin").cancel(job)
    page.context.close()


def test_a_user_lengthening_a_running_jobs_limit_sees_the_reason(clean: Portal) -> None:
    """The server's 403 in the form, in words; the limit stays."""
    job = clean.running()
    page = clean.open_job("alice", job, state="Running")
    page.get_by_label("Time limit", exact=True).fill("20:00")
    page.get_by_role("button", name="Save changes").click()
    box = page.locator("#edit-errors")
    expect(box).to_contain_text("only an admin may lengthen a time limit (600 s → 1200 s)")
    expect(box).to_be_focused()
    expect(page.locator("#edit-form")).to_be_visible()
    assert clean.stored(job)["walltime_s"] == 600
    clean.client("alice").cancel(job)
    page.context.close()


def test_a_limit_passed_already_is_said_before_it_is_saved(clean: Portal) -> None:
    """A new limit shorter than the job has run is said in the form as it is typed, nothing
    sent; a limit not passed takes the note away; saved, the job is stopped as timed out."""
    job = clean.running()
    time.sleep(2.5)  # it has run longer than the limit below
    page = clean.open_job("alice", job, state="Running")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if "/update" in r.url else None)
    limit = page.get_by_label("Time limit", exact=True)
    note = page.locator("#edit-passed")
    limit.fill("0:02")
    expect(note).to_contain_text("This limit has passed already")
    expect(note).to_contain_text("the job will be stopped now as timed out")
    limit.fill("9:00")
    expect(note).to_have_text("")
    limit.fill("0:02")
    expect(note).to_contain_text("the job will be stopped now as timed out")
    time.sleep(0.3)  # a request, had one been made, would have been seen by now
    assert sent == []
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(
        f"Changed {job}: time limit 00:00:02 (passed already: the job is stopped as timed out)."
    )
    expect(page.locator("#job-state")).to_have_text("Failed")
    expect(facts(page)).to_contain_text("Failed (timeout)")
    expect(page.get_by_role("button", name="Edit")).to_be_hidden()
    assert [json.loads(body) for body in sent] == [{"walltime_s": 2}]
    page.context.close()


def test_a_job_running_in_an_external_cluster_offers_no_edit(clean: Portal) -> None:
    """The external cluster keeps its own time limit (the server refuses a change, 409):
    the page does not offer one. The detail says so (``external``, set here in the page's
    answer: this controller has no external pool)."""
    job = clean.running()
    page = clean.new_page("alice")

    def external(route: Any) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "external": True})

    page.route(f"**/v1/portal/jobs/{job}", external)
    page.goto(f"{clean.url}/portal/#/job/{job}")
    expect(page.locator("#job-state")).to_have_text("Running")
    expect(page.get_by_role("button", name="Requeue")).to_be_visible()  # the page is drawn
    expect(page.get_by_role("button", name="Edit")).to_be_hidden()
    clean.client("alice").cancel(job)
    page.context.close()


def test_a_tier_no_longer_configured_stays_shown(clean: Portal) -> None:
    """A job's QoS that the tiers the portal is given no longer hold (the configuration
    changed since it was submitted) is offered as it is, and not sent unless changed."""
    page = clean.new_page("alice")

    def fewer_tiers(route: Any) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "qos_tiers": ["gold", "bronze"]})

    page.route("**/v1/portal/me", fewer_tiers)
    page.reload()  # the page asks again who it is
    job = clean.waiting()
    page.goto(f"{clean.url}/portal/#/job/{job}")
    expect(page.locator("#job-state")).to_have_text("Pending")
    page.get_by_role("button", name="Edit").click()
    qos = page.get_by_label("QoS tier")
    expect(qos.locator("option")).to_have_text(
        ["gold (highest)", "bronze (lowest)", "silver (not a configured tier)"]
    )
    expect(qos).to_have_value("silver")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.post_data or "") if "/update" in r.url else None)
    page.get_by_label("Priority").fill("-1")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(f"Changed {job}: priority -1.")
    assert [json.loads(body) for body in sent] == [{"priority": -1}]
    page.context.close()


@pytest.fixture(scope="module")
def tiered(portal: Portal) -> Iterator[Portal]:
    """A second controller, with a tenancy configuration of its own QoS tiers (bronze and
    gold, bronze the default), seen in the same browser."""
    root = Path(tempfile.mkdtemp(prefix="fusesched-portal-tiers-"))
    core = CoreConfig(placement="best-fit", tenancy=TenancyPolicy(TenancyConfig.from_dict(TIERS)))
    server = ControllerServer(root / "data", port=0, auth=True, core=core)
    try:
        issue = server.authenticator.issue
        tokens = {
            "admin": issue(TokenKind.USER, user="root", tenant="ops", role="cluster-admin")[0],
            "alice": issue(TokenKind.USER, user="alice", tenant="physics", role="user")[0],
        }
        server.controller.register(
            NodeInventory(name="t1", resources={"cpu": "8", "memory": "16Gi"})
        )
        server.start()
        yield Portal(server.url, tokens, portal.browser, server, portal.errors, portal.dialogs)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_qos_tiers_are_the_sites_own(clean: Portal, tiered: Portal) -> None:
    """With a tenancy configuration, the Edit form and the submit form offer its tiers,
    highest first (the submit form starting from its default), and a change to one of them
    is saved."""
    job = tiered.waiting(qos="bronze")
    page = tiered.open_job("admin", job)
    qos = page.get_by_label("QoS tier")
    expect(qos.locator("option")).to_have_text(["gold (highest)", "bronze (lowest)"])
    expect(qos).to_have_value("bronze")
    qos.select_option("gold")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#action-msg")).to_have_text(f"Changed {job}: QoS gold.")
    assert tiered.stored(job)["qos"] == "gold"
    page.goto(f"{tiered.url}/portal/#/submit")
    chosen = page.get_by_label("QoS tier")
    expect(chosen.locator("option")).to_have_text(["gold (highest)", "bronze (lowest)"])
    expect(chosen).to_have_value("bronze")
    page.context.close()


def test_the_form_fits_a_narrow_screen(clean: Portal) -> None:
    """At 390 px the open form and the job page's buttons do not scroll sideways."""
    page = clean.open_job("alice", clean.waiting(), PHONE)
    page.get_by_label("Time limit").fill("bad")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#e-limit-err")).to_be_visible()
    time.sleep(0.2)  # layout
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    page.context.close()
