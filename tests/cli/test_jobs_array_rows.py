"""``fusesched jobs`` shows an array's members that wait (never started) for one reason as
one row, as squeue does without ``-r`` (``9_[2-99%2]``); ``-r``/``--array-members`` a row a
member; ``--limit`` counts rows, and a listing cut there says so on stderr only; a
controller older than ``combine_arrays`` (rows without ``array_tasks``) is combined here."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from fusesched.cli import job_list
from fusesched.cli.array_rows import combine
from fusesched.cli.main import app
from fusesched.model.array_tasks import combined_id, index_ranges

Job = dict[str, Any]


def view(job_id: str, state: str = "Pending", **fields: Any) -> Job:
    parent = job_id.partition("_")[0] if "_" in job_id else None
    return {
        "id": job_id,
        "name": "sweep",
        "user": "ann",
        "queue": "cpu",
        "state": state,
        "phase": state.lower(),
        "reason": "" if state != "Pending" else "Priority",
        "array_parent": parent,
        "start_time": None if state == "Pending" else 100.0,
        "nodes": [] if state == "Pending" else ["n1"],
        **fields,
    }


class Controller:
    """``GET /v1/jobs`` as a controller answers it: ``combining`` (one that knows
    ``combine_arrays``) or not (an older one: a row a member, no ``array_tasks``)."""

    def __init__(self, jobs: list[Job], combining: bool = True) -> None:
        self.members = jobs
        self.combining = combining
        self.asked: list[dict[str, Any]] = []

    def jobs(self, *args: Any, **kwargs: Any) -> list[Job]:
        limit = args[3]
        self.asked.append({"limit": limit, "combine_arrays": kwargs["combine_arrays"]})
        if not self.combining:
            return self.members[:limit]
        if not kwargs["combine_arrays"]:
            return [{**j, "array_tasks": None, "array_count": None} for j in self.members][:limit]
        rows = combine(self.members)
        return [{"array_tasks": None, "array_count": None, **r} for r in rows][:limit]


#: Array 9 (-a 0-99): 9_0 running, 9_1..9_99 waiting; job 8 ended before it.
ARRAY = [
    *(view(f"9_{i}") for i in range(99, 0, -1)),
    view("9_0", "Running"),
    view("8", "Completed"),
]


def run(monkeypatch: pytest.MonkeyPatch, controller: Controller, *args: str) -> Any:
    monkeypatch.setattr(job_list, "_client", lambda *a: controller)
    result = CliRunner().invoke(app, ["jobs", *args])
    assert result.exit_code == 0, result.output
    return result


def test_waiting_members_are_one_row_in_the_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    ctl = Controller(ARRAY)
    result = run(monkeypatch, ctl, "-h", "-o", "%i %t %R|%A %F %K")
    assert result.stdout.splitlines() == [
        "9_[1-99] PD (Priority)|9 9 1-99",
        "9_0 R n1|9_0 9 0",
        "8 CD n1|8 8 N/A",
    ]
    assert ctl.asked == [{"limit": 51, "combine_arrays": True}]
    assert result.stderr == ""
    table = run(monkeypatch, ctl)
    assert "9_[1-99]" in table.stdout and "9_98" not in table.stdout


def test_array_members_lists_each_member(monkeypatch: pytest.MonkeyPatch) -> None:
    ctl = Controller(ARRAY)
    result = run(monkeypatch, ctl, "-r", "-o", "%i %t", "--limit", "3")
    assert result.stdout.splitlines() == ["JOBID ST", "9_99 PD", "9_98 PD", "9_97 PD"]
    assert ctl.asked == [{"limit": 4, "combine_arrays": False}]
    assert "showing the newest 3 rows; --limit N for more" in result.stderr
    assert run(monkeypatch, ctl, "--array-members", "-h", "-o", "%i").stdout.count("\n") == 50


def test_limit_counts_rows_and_a_cut_listing_says_so_on_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctl = Controller(ARRAY)
    cut = run(monkeypatch, ctl, "-o", "%i", "--limit", "2")
    assert cut.stdout.splitlines() == ["JOBID", "9_[1-99]", "9_0"]
    assert (
        cut.stderr.strip()
        == "fusesched: showing the newest 2 rows; --limit N for more (at most 1000)"
    )
    whole = run(monkeypatch, ctl, "-o", "%i", "--limit", "3")
    assert whole.stdout.splitlines() == ["JOBID", "9_[1-99]", "9_0", "8"]
    assert whole.stderr == ""
    table = run(monkeypatch, ctl, "--limit", "1")
    assert "showing the newest 1 rows" in table.stderr and "showing" not in table.stdout
    most = run(monkeypatch, Controller(ARRAY * 10), "-r", "-o", "%i", "--limit", "1000")
    assert "narrow it with -u, -t, -p, -j or -n" in most.stderr


def test_json_keeps_a_job_an_object(monkeypatch: pytest.MonkeyPatch) -> None:
    ctl = Controller(ARRAY)
    shown = json.loads(run(monkeypatch, ctl, "--json", "--limit", "2").stdout)
    assert [j["id"] for j in shown] == ["9_99", "9_98"]
    assert ctl.asked == [{"limit": 2, "combine_arrays": False}]


def test_an_older_controller_is_combined_here(monkeypatch: pytest.MonkeyPatch) -> None:
    older = Controller(ARRAY, combining=False)
    whole = run(monkeypatch, older, "-h", "-o", "%i %K", "--limit", "1000")
    assert whole.stdout.splitlines() == ["9_[1-99] 1-99", "9_0 0", "8 N/A"]
    assert whole.stderr == ""
    cut = run(monkeypatch, older, "-o", "%i")  # 51 members asked, 51 answered
    assert cut.stdout.splitlines() == ["JOBID", "9_[49-99]"]
    assert "showing the newest 1 rows" in cut.stderr


def test_combine_keeps_reasons_and_started_members_apart() -> None:
    jobs = [
        view("5_6", reason="JobHeldUser"),
        view("5_5"),
        view("5_3", start_time=50.0),  # requeued: started once
        view("5_2"),
        view("5_0"),
        view("5_1", reason="JobHeldUser"),
        view("4"),
    ]
    rows = combine(jobs)
    assert [r["id"] for r in rows] == ["5_[1,6]", "5_[0,2,5]", "5_3", "4"]
    assert (rows[1]["array_tasks"], rows[1]["array_count"]) == ("0,2,5", 3)
    assert combine([view("5_4"), view("5_2"), view("5_0")])[0]["id"] == "5_[0-4:2]"
    assert combine([view("5_4")]) == [view("5_4")]  # one alone: as it is


@pytest.mark.parametrize(
    ("indices", "step", "said"),
    [
        ([5], 1, "5"),
        ([3, 1, 2, 2, 7, 9, 8], 1, "1-3,7-9"),
        ([0, 3], 3, "0,3"),
        ([0, 3, 6, 9, 20], 3, "0-9:3,20"),
        (range(2, 100_000), 1, "2-99999"),
    ],
)
def test_index_ranges(indices: Any, step: int, said: str) -> None:
    assert index_ranges(indices, step) == said


def test_combined_ids_carry_the_throttle() -> None:
    assert combined_id("1009", "2-999", 2) == "1009_[2-999%2]"
    assert combined_id("7", "1,3", None) == "7_[1,3]"
    with pytest.raises(ValueError, match="step"):
        index_ranges([1], 0)


def test_noheader_prints_no_note_and_the_note_counts_the_rows_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """-h is a script's: its lines and nothing else, even on stderr (as squeue). The note
    counts the rows shown, after -t has left out those an older controller answered."""
    ctl = Controller(ARRAY)
    cut = run(monkeypatch, ctl, "-h", "-o", "%i", "--limit", "2")
    assert cut.stdout.splitlines() == ["9_[1-99]", "9_0"]
    assert cut.stderr == ""
    completing = [view("7", "Cancelled", completing=True), view("6", "Completed")] * 2
    older = Controller(completing, combining=False)  # (answers every job to -t CG)
    shown = run(monkeypatch, older, "-t", "CG", "-o", "%i", "--limit", "3")
    assert shown.stdout.splitlines() == ["JOBID", "7", "7"]
    assert "showing the newest 2 rows" in shown.stderr


def test_scattered_members_are_cut_as_squeue_cuts_them() -> None:
    """Two of every three members wait: their indices cut after a whole run at 64
    characters (an older controller's answer, combined here)."""
    members = [view(f"3_{i}", start_time=1.0 if i % 3 == 0 else None) for i in range(400, 0, -1)]
    waiting = [r for r in combine(members) if r.get("array_tasks")]
    assert [r["id"] for r in waiting] == [
        "3_[1-2,4-5,7-8,10-11,13-14,16-17,19-20,22-23,25-26,28-29,31-32,...]"
    ]
    assert waiting[0]["array_count"] == 267
