"""``fusesched purge`` (cli/purge.py) against a real controller in this process: a dry run
says what would go; without ``--yes`` it shows that and asks, and removes nothing unless
told yes; a cutoff fair share still needs is refused without ``--force``; bad options are
refused before any controller is asked. And ``--purge-after`` of ``fusesched controller`` /
``up`` (cli/server_options.py): an age, at least fair share's window."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from tests.builders import one_queue_tenancy
from tests.store.rows import job
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.cli.purge import parse_age
from fusesched.cli.server_options import purge_after
from fusesched.controller.reconfigure import read_tenancy_file
from fusesched.controller.server import ControllerServer
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.store import JobState

runner = CliRunner()
DAY = 86400.0
NOWHERE = "http://127.0.0.1:9"


def ended(seq: int, days_ago: float) -> Any:
    end = time.time() - days_ago * DAY
    return job(seq, state=JobState.COMPLETED, phase="completed", start_time=end, end_time=end)


def serve(data: Path, tenancy: TenancyPolicy | None = None) -> ControllerServer:
    core = CoreConfig(placement="best-fit", tenancy=tenancy)
    server = ControllerServer(data, port=0, core=core, auto_schedule=False).start()
    store = server.controller.persist.store
    store.add_jobs([ended(1, 100), ended(2, 95), ended(3, 1), job(4)])
    for job_id in ("1", "2"):
        folder = data / "logs" / job_id
        folder.mkdir(parents=True)
        (folder / f"{job_id}.main.0.log").write_text("x" * 1000)
    return server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ControllerServer]:
    found = serve(tmp_path / "data")
    try:
        yield found
    finally:
        found.stop()


def purge(server: ControllerServer, *args: str, stdin: str | None = None) -> Any:
    return runner.invoke(app, ["purge", *args, "--controller", server.url], input=stdin)


def stored(server: ControllerServer) -> set[str]:
    return {r.id for r in server.controller.persist.store.list_jobs(limit=100)}


def test_a_dry_run_says_what_would_go(server: ControllerServer) -> None:
    result = purge(server, "--older-than", "90d", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would remove 2 jobs, 0 tasks" in result.output
    assert "2 files (2.0 KiB)" in result.output
    assert stored(server) == {"1", "2", "3", "4"}
    shown = purge(server, "--older-than", "90d", "--dry-run", "--json")
    found = json.loads(shown.stdout)
    assert found["jobs"] == 2 and found["dry_run"] is True and found["bytes"] == 2000


def test_it_asks_first_and_removes_nothing_unless_told_yes(server: ControllerServer) -> None:
    for answer in ("n\n", "", None):
        result = purge(server, "--before", "-90d", stdin=answer)
        assert result.exit_code == 1, result.output
        assert "would remove 2 jobs" in result.output and "Remove them?" in result.output
        assert "not confirmed: nothing was purged" in result.output
        assert stored(server) == {"1", "2", "3", "4"}
    result = purge(server, "--older-than", "90d", stdin="y\n")
    assert result.exit_code == 0, result.output
    assert "removed 2 jobs, 0 tasks" in result.output
    assert stored(server) == {"3", "4"}
    assert not (server.data_dir / "logs" / "1").exists()
    # nothing left: said so, and nothing asked
    again = purge(server, "--older-than", "90d")
    assert again.exit_code == 0 and "nothing to purge" in again.output
    assert "Remove them?" not in again.output


def test_with_json_the_question_goes_to_stderr(server: ControllerServer) -> None:
    result = purge(server, "--older-than", "90d", "--json", stdin="y\n")
    assert result.exit_code == 0, result.output
    # stdout: the answer alone (after the echo of what was typed, which CliRunner adds)
    out = result.stdout
    assert json.loads(out[out.index("{") :])["jobs"] == 2 and "would remove" not in out
    assert "would remove 2 jobs" in result.stderr and "Remove them?" in result.stderr


def test_yes_purges_at_once(server: ControllerServer) -> None:
    result = purge(server, "--before", str(time.time() - 2 * DAY), "--yes", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["jobs"] == 2 and found["dry_run"] is False and found["files"] == 2
    assert stored(server) == {"3", "4"}


def test_a_cutoff_fair_share_needs_is_refused_without_force(tmp_path: Path) -> None:
    path = tmp_path / "tenancy.yaml"
    body = one_queue_tenancy({"cpu": 8}, scheduling={"half_life_s": 7 * DAY})
    path.write_text(yaml.safe_dump(body))
    server = serve(tmp_path / "data", read_tenancy_file(path))  # the window: 140 days
    try:
        refused = purge(server, "--older-than", "90d", "--yes")
        assert refused.exit_code == 2
        assert "would erase usage fair share still counts" in refused.output
        assert stored(server) == {"1", "2", "3", "4"}
        assert purge(server, "--older-than", "20w", "--yes").exit_code == 0  # 140 days: fine
        forced = purge(server, "--older-than", "90d", "--yes", "--force")
        assert forced.exit_code == 0 and "removed 2 jobs" in forced.output
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give one of --older-than AGE (90d) or --before TIME (2026-01-01)"),
        (["--older-than", "9d", "--before", "2026-01-01"], "give one of --older-than"),
        (["--older-than", "90"], "--older-than '90': give a number and a unit"),
        (["--older-than", "-5d"], "give a number and a unit"),
        (["--older-than", "0d"], "must be more than nothing"),
        (["--older-than", "1e9w"], "give a number and a unit"),
        (["--older-than", "9999999999w"], "outside the years 1 to 9999"),
        (["--before", "someday"], "--before: not a time: 'someday'"),
        (["--before", "1969-06-01"], "--before 1969-06-01: that is before 1970"),
        (["--older-than", "3000w"], "--older-than 3000w: that is before 1970"),
    ],
)
def test_bad_options_are_refused_before_asking(args: list[str], says: str) -> None:
    result = runner.invoke(app, ["purge", *args, "--controller", NOWHERE])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


def test_ages() -> None:
    assert parse_age("90d") == pytest.approx(90 * DAY)
    assert parse_age("12h") == pytest.approx(12 * 3600)
    assert parse_age(" 2W ") == pytest.approx(14 * DAY)
    assert parse_age("1.5d") == pytest.approx(1.5 * DAY)
    assert parse_age("30m") == pytest.approx(1800)


def test_purge_after_is_an_age_at_least_fair_shares_window(
    capsys: pytest.CaptureFixture[str],
) -> None:
    week = TenancyPolicy(half_life_s=7 * DAY)
    assert purge_after(None, week) is None
    assert purge_after("90d", None) == pytest.approx(90 * DAY)
    assert purge_after("20w", week) == pytest.approx(140 * DAY)
    for text, tenancy, says in (
        ("ninety", None, "--purge-after 'ninety': give a number and a unit"),
        ("90d", week, "--purge-after 90d is shorter than the usage fair share reads back"),
        ("90d", TenancyPolicy(half_life_s=math.inf), "its half_life_s is infinite"),
    ):
        with pytest.raises(typer.Exit) as stopped:
            purge_after(text, tenancy)
        assert stopped.value.exit_code == 2
        assert says in " ".join(capsys.readouterr().err.split())


def test_the_server_commands_take_purge_after() -> None:
    for command in ("controller", "up"):
        shown = runner.invoke(app, [command, "--help"])
        assert shown.exit_code == 0 and "--purge-after" in shown.output
