"""What an audit of the portal found, in Debian's Chromium (headless, driven by Playwright as in
``test_portal.py``): odd links, odd tokens, odd form input, odd names, an empty cluster and a
narrow screen. A controller with authentication and one registered node (no agents: jobs are
placed, nothing runs), and one without authentication and without nodes."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fusesched.api.wire import NodeInventory
from fusesched.controller.server import ControllerServer
from fusesched.store import TokenKind

from .browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, playwright_or_skip

PHONE = {"width": 390, "height": 800}
WAIT_MS = 15_000

playwright_sync = playwright_or_skip()
expect = playwright_sync.expect


@dataclass
class Audit:
    url: str  # with authentication and a node
    empty_url: str  # without authentication, without nodes
    tokens: dict[str, str]
    browser: Any
    errors: list[str]  # uncaught exceptions in any page
    server: ControllerServer

    def fresh_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Register ``name`` now: no agent heartbeats for it, so it counts as up only for the
        controller's node timeout (the module's n1 may be down by the time a test runs)."""
        self.server.controller.register(
            NodeInventory(name=name, resources={"cpu": "4", "memory": "8Gi"}, labels=labels or {})
        )

    def page(self, viewport: dict[str, int] | None = None, prompt: str | None = None) -> Any:
        """A new page whose dialogs are accepted (a prompt with ``prompt`` typed in)."""
        context = self.browser.new_context(viewport=viewport or LAPTOP)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("dialog", lambda dialog: dialog.accept(prompt))
        return page

    def login(
        self, who: str, viewport: dict[str, int] | None = None, prompt: str | None = None
    ) -> Any:
        page = self.page(viewport, prompt)
        page.goto(f"{self.url}/portal/")
        page.get_by_label("API token").fill(self.tokens[who])
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
        return page


@pytest.fixture(scope="module")
def audit() -> Iterator[Audit]:
    expect.set_options(timeout=WAIT_MS)
    root = Path(tempfile.mkdtemp(prefix="fusesched-portal-audit-"))
    server = ControllerServer(root / "auth", port=0, auth=True)
    empty = ControllerServer(root / "empty", port=0)
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
        empty.start()
        with playwright_sync.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield Audit(server.url, empty.url, tokens, browser, [], server)
            finally:
                browser.close()
    finally:
        server.stop()
        empty.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def clean(audit: Audit) -> Iterator[Audit]:
    """``audit``, failing the test if any page threw an uncaught exception meanwhile."""
    audit.errors.clear()
    yield audit
    assert audit.errors == []


def test_a_bad_escape_in_the_link_is_no_uncaught_error(clean: Audit) -> None:
    """``#/job/%ZZ`` (a truncated or hand-typed link) threw "URI malformed" out of the router:
    the page kept showing the previous one."""
    page = clean.login("alice")
    page.goto(f"{clean.url}/portal/#/job/%ZZ")
    expect(page.get_by_role("heading", level=1)).to_have_text("Job %ZZ")
    expect(page.get_by_role("alert")).to_contain_text("no job '%ZZ'")
    page.context.close()


def test_a_token_with_an_invisible_character_is_named(clean: Audit) -> None:
    """A token pasted with a zero-width space was reported as "the controller cannot be
    reached" (fetch refuses such a header before sending anything)."""
    page = clean.page()
    page.goto(f"{clean.url}/portal/")
    page.get_by_label("API token").fill(clean.tokens["alice"] + "\u200b")
    page.get_by_role("button", name="Log in").click()
    error = page.locator("#login-error")
    expect(error).to_contain_text("U+200B")
    expect(error).not_to_contain_text("cannot be reached")
    page.context.close()


def test_an_unreachable_controller_keeps_the_token(clean: Audit) -> None:
    """A reload while the controller could not be reached threw the token away (back to the
    login form, as if it were wrong); now it says so and the next reload works."""
    page = clean.login("alice")
    page.route("**/v1/portal/me", lambda route: route.abort())
    page.reload()
    expect(page.get_by_role("alert")).to_contain_text("cannot be reached")
    page.unroute("**/v1/portal/me")
    page.reload()
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    page.context.close()


def submit(page: Any, url: str, **fields: str) -> None:
    page.goto(f"{url}/portal/#/jobs")
    page.goto(f"{url}/portal/#/submit")
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    page.get_by_label("Command").fill("echo hi")
    for name, value in fields.items():
        page.locator(f"#s-{name}").fill(value)
    page.get_by_role("button", name="Submit job").click()


def test_an_astronomical_time_limit_is_not_dropped(clean: Audit) -> None:
    """1e308 minutes is Infinity seconds, which JSON sends as null: the job was submitted
    without any time limit, silently."""
    page = clean.login("alice")
    submit(page, clean.url, walltime="1e308")
    expect(page.locator("#s-walltime-err")).to_contain_text("positive number of minutes")
    expect(page).to_have_url(f"{clean.url}/portal/#/submit")
    page.context.close()


def test_a_resource_error_is_shown_at_its_field(clean: Audit) -> None:
    """The server reports quantities at ``groups.0.resources`` with the resource named in the
    message ("memory: quantity ... is too large"): it was shown at the CPU field."""
    page = clean.login("alice")
    submit(page, clean.url, memory="99999999999999999999Ei")
    expect(page.locator("#s-memory-err")).to_contain_text("too large")
    expect(page.locator("#s-cpu-err")).to_be_hidden()
    expect(page.locator("#submit-errors")).to_contain_text("Memory per task")
    page.context.close()


def test_a_right_to_left_name_stays_inside_the_heading(clean: Audit) -> None:
    """A job name with a right-to-left override (U+202E) reordered the heading around it:
    the state badge landed inside the name. The name is isolated (``bdi``)."""
    page = clean.login("alice")
    name = "\u202eevil name"
    submit(page, clean.url, name=name)
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("evil name")
    expect(heading.locator("bdi")).to_have_text(name)
    page.context.close()


def test_resubmitting_an_array_member_lands_on_a_job(clean: Audit) -> None:
    """An array's id has no page of its own: submitting (or resubmitting) an array went to
    "No such job". It goes to the first member."""
    page = clean.login("alice")
    made = page.evaluate(
        """async () => (await fetch('/v1/jobs', {method: 'POST', headers: {
            authorization: 'Bearer ' + sessionStorage.getItem('fusesched.token'),
            'content-type': 'application/json'}, body: JSON.stringify({name: 'sweep',
            walltime_s: 60, array: {start: 0, stop: 2}, groups: [{resources: {cpu: '1',
            memory: '64Mi'}, argv: ['true']}]})})).json()"""
    )
    member = made["ids"][1]
    page.goto(f"{clean.url}/portal/#/job/{member}")
    expect(page.locator("dl.facts").first).to_contain_text(f"member of job array {made['id']}")
    page.get_by_role("button", name="Resubmit").click()  # the confirmation is accepted
    expect(page).not_to_have_url(f"{clean.url}/portal/#/job/{member}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("sweep")
    expect(page.get_by_role("alert")).to_have_count(0)
    page.context.close()


def test_a_held_job_is_released_and_held_from_its_page(clean: Audit) -> None:
    """The job page holds a waiting job and releases a held one (the prompt for the reason
    is accepted empty)."""
    page = clean.login("alice")
    post = """async (body) => (await fetch('/v1/jobs', {method: 'POST', headers: {
        authorization: 'Bearer ' + sessionStorage.getItem('fusesched.token'),
        'content-type': 'application/json'}, body: JSON.stringify(body)})).json()"""
    group = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["true"]}
    first = page.evaluate(post, {"name": "first", "walltime_s": 60, "groups": [group]})
    after = [{"kind": "afterany", "job_id": first["id"]}]  # no agent: first never ends
    body = {"name": "later", "walltime_s": 60, "hold": True, "dependencies": after}
    made = page.evaluate(post, {**body, "groups": [group]})
    page.goto(f"{clean.url}/portal/#/job/{made['id']}")
    facts = page.locator("dl.facts").first
    expect(facts).to_contain_text("Pending (held)")
    page.get_by_role("button", name="Release").click()
    expect(page.locator("#action-msg")).to_have_text(f"Released {made['id']}.")
    expect(facts).not_to_contain_text("(held)")
    page.get_by_role("button", name="Hold").click()
    expect(page.locator("#action-msg")).to_have_text(f"Held {made['id']}.")
    expect(facts).to_contain_text("held: held by user")
    page.context.close()


def test_a_running_job_is_requeued_from_its_page(clean: Audit) -> None:
    """Requeue on a running job's page (after a confirmation); the job's events then show
    the request."""
    clean.fresh_node("n-run", {"audit": "requeue"})
    page = clean.login("alice")
    made = page.evaluate(
        """async () => (await fetch('/v1/jobs', {method: 'POST', headers: {
            authorization: 'Bearer ' + sessionStorage.getItem('fusesched.token'),
            'content-type': 'application/json'}, body: JSON.stringify({name: 'again',
            walltime_s: 60, groups: [{resources: {cpu: '1', memory: '64Mi'},
            argv: ['true']}], placement: {node_selector: {audit: 'requeue'}}})})).json()"""
    )
    page.goto(f"{clean.url}/portal/#/job/{made['id']}")
    button = page.get_by_role("button", name="Requeue")
    button.click()
    expect(page.locator("#action-msg")).to_have_text(f"Requeueing {made['id']}.")
    expect(page.locator("#events")).to_contain_text("JobRequeueRequested")
    page.context.close()


def test_an_operator_drains_and_undrains_a_node_from_the_cluster_page(clean: Audit) -> None:
    """The heat map's Drain button asks the reason; the row then shows the node drained;
    Undrain gives it back."""
    clean.fresh_node("n-drain")
    page = clean.login("admin", prompt="disk swap")
    page.goto(f"{clean.url}/portal/#/cluster")
    row = page.locator('#heatmap tr[data-node="n-drain"]')
    row.get_by_role("button", name="Drain n-drain").click()
    expect(page.locator("#drain-msg")).to_contain_text("n-drain: drain")
    expect(page.locator("#drain-msg")).to_contain_text("(disk swap)")
    expect(row).to_contain_text("drain")
    row.get_by_role("button", name="Undrain n-drain").click()
    expect(page.locator("#drain-msg")).to_have_text("n-drain: up.")
    expect(row.get_by_role("button", name="Drain n-drain")).to_be_visible()
    page.context.close()


def test_whatif_checks_the_cluster_size_it_is_given(clean: Audit) -> None:
    """A cleared size was sent as 0 and answered "scale: Input should be greater than 0",
    naming a field the page does not have."""
    page = clean.login("admin")
    page.goto(f"{clean.url}/portal/#/whatif")
    page.get_by_label("Cluster size").fill("")
    page.get_by_role("button", name="Run what-if").click()
    result = page.locator("#whatif-result")
    expect(result).to_contain_text("Cluster size")
    expect(result).not_to_contain_text("scale:")
    expect(page.get_by_label("Cluster size")).to_have_attribute("aria-invalid", "true")
    page.context.close()


def test_an_empty_cluster_says_so(clean: Audit) -> None:
    """Without nodes the cluster page showed an empty heat map and "Every node is up and
    powered on"; without authentication it offered "Log out", which led to a login form
    that has nothing to log in to."""
    page = clean.page()
    page.goto(f"{clean.empty_url}/portal/#/cluster")
    expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
    expect(page.locator("#no-nodes")).to_contain_text("No node has registered yet")
    expect(page.locator("#unhealthy")).not_to_contain_text("Every node is up")
    expect(page.get_by_role("button", name="Log out")).to_be_hidden()
    page.context.close()


def test_the_submit_form_fits_a_narrow_screen(clean: Audit) -> None:
    """At 390 px the job-type list (its longest option) made the page scroll sideways."""
    page = clean.login("alice", PHONE)
    page.goto(f"{clean.url}/portal/#/submit")
    expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    time.sleep(0.2)  # layout
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    page.context.close()
