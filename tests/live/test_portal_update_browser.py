"""The job page's Edit form (``POST /v1/jobs/{id}/update``) in Debian's Chromium, headless,
driven by Playwright: a waiting job's priority, QoS and time limit changed from the page and
seen on it and through the API; a user's attempt to raise a priority refused with the
server's reason on the page; a time the page cannot read refused before anything is sent;
the form offered for waiting jobs only; a 390 px screen. A controller with authentication and
no agents: a job placed on a node counts as running, nothing runs."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fusesched.api.wire import NodeInventory
from fusesched.controller.server import ControllerServer
from fusesched.sdk import Client
from fusesched.store import TokenKind

from .browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, playwright_or_skip

PHONE = {"width": 390, "height": 800}
WAIT_MS = 15_000
GROUP = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["true"]}

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

    def client(self, who: str) -> Client:
        return Client(self.url, token=self.tokens[who])

    def waiting(self, who: str = "alice", **request: Any) -> str:
        """A job that stays Pending: it waits for a held one (which never starts)."""
        client = self.client(who)
        blocker = client.submit(
            {"name": "blocker", "walltime_s": 60, "hold": True, "groups": [GROUP]}
        )
        after = [{"kind": "afterany", "job_id": blocker}]
        body = {"name": "waits", "walltime_s": 600, "dependencies": after, "groups": [GROUP]}
        return client.submit({**body, **request})

    def stored(self, job_id: str) -> dict[str, Any]:
        """The job's stored request, through the API (as the admin)."""
        call = urllib.request.Request(
            f"{self.url}/v1/portal/jobs/{job_id}",
            headers={"authorization": f"Bearer {self.tokens['admin']}"},
        )
        with urllib.request.urlopen(call, timeout=10) as answer:
            return dict(json.load(answer)["request"])

    def open_job(self, who: str, job_id: str, viewport: dict[str, int] | None = None) -> Any:
        """A logged-in page on ``job_id``, its Edit form open."""
        context = self.browser.new_context(viewport=viewport or LAPTOP)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(f"{self.url}/portal/")
        page.get_by_label("API token").fill(self.tokens[who])
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
        page.goto(f"{self.url}/portal/#/job/{job_id}")
        expect(page.locator("#job-state")).to_have_text("Pending")
        edit = page.get_by_role("button", name="Edit")
        expect(edit).to_have_attribute("aria-expanded", "false")
        edit.click()
        expect(edit).to_have_attribute("aria-expanded", "true")
        expect(page.get_by_role("heading", name="Change the waiting job")).to_be_visible()
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
    expect(page.get_by_label("Time limit")).to_have_value("00:10:00")
    expect(page.locator("#edit-rule")).to_be_visible()  # a user may only lower
    # it waits for a held job: the projection of expected starts never starts it
    expect(facts(page)).to_contain_text("Expected startnot within 7 days")
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


def test_the_form_is_offered_for_waiting_jobs_only(clean: Portal) -> None:
    """Edit is there while the job waits; when it starts, the open form closes and says
    so, and Edit goes."""
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
    expect(page.get_by_role("button", name="Edit")).to_be_hidden()
    expect(page.locator("#action-msg")).to_have_text(
        "The job is Running now: it can no longer be changed."
    )
    page.reload()  # a running job's page never offers it
    expect(page.locator("#job-state")).to_have_text("Running")
    expect(page.get_by_role("button", name="Edit")).to_be_hidden()
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
