"""`fusesched cancel A B C` tries every id: one refused (unknown) is reported, the others are
still cancelled and reported, and the exit status says something was refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from fusesched.cli import live
from fusesched.cli.id_lists import counted_ids, short_ids
from fusesched.cli.main import app
from fusesched.sdk import ControllerError


class Fake:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def cancel(self, job_id: str) -> list[str]:
        self.asked.append(job_id)
        if job_id == "999":
            raise ControllerError(404, "no job '999'")
        return [] if job_id == "1" else [job_id]


@pytest.mark.parametrize("as_json", [False, True])
def test_an_unknown_id_among_several_is_reported_and_the_rest_cancelled(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    fake = Fake()
    monkeypatch.setattr(live, "_client", lambda *args: fake)
    result = CliRunner().invoke(app, ["cancel", "1", "999", "5", *(["--json"] if as_json else [])])
    assert fake.asked == ["1", "999", "5"]
    assert result.exit_code == 2
    assert "no job '999'" in result.stderr
    if as_json:
        assert json.loads(result.stdout) == {"cancelled": ["5"]}
    else:
        assert "Job 1 had already finished" in result.stdout
        assert "Cancelling 5" in result.stdout


def test_an_arrays_members_are_said_in_brackets_not_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelling an array of 1,000 members printed every id (a screen of them): now the
    members in Slurm's bracket form, counted; hold, release and signals say them so too."""

    class Array:
        def cancel(self, job_id: str) -> list[str]:
            return [f"7_{i}" for i in (*range(3, 1000), 0, 1)]

    monkeypatch.setattr(live, "_client", lambda *args: Array())
    result = CliRunner().invoke(app, ["cancel", "7"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "Cancelling 7_[0-1,3-999] (999 jobs)"


@pytest.mark.parametrize(
    ("ids", "said"),
    [
        (["5"], "5"),
        (["5", "6"], "5, 6"),
        (["12_0", "12_1", "12_2", "12_7", "13", "14_2"], "12_[0-2,7], 13, 14_2"),
        (["12_10", "12_9", "12_8"], "12_[8-10]"),
        (["12_2", "9", "12_1"], "12_[1-2], 9"),
        (["12", "12_3", "12_4"], "12, 12_[3-4]"),  # (a job named as an array: no crash)
        (["12_x", "12_²", "12+0", "12+1"], "12_x, 12_², 12+0, 12+1"),
    ],
)
def test_short_ids(ids: list[str], said: str) -> None:
    assert short_ids(ids) == said
    assert counted_ids(ids).startswith(said)


def test_a_combined_id_from_the_listing_cancels_those_members_in_one_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fusesched jobs`` shows an array's waiting members as ``7_[2-4,9%2]``; scancel takes
    such an id: so does cancel, in one request for all of them; one the listing cut short
    (``,...``) or that cannot be read is refused (exit 2), saying what to do."""

    asked: list[dict[str, Any]] = []

    class Asked:
        token = None

        def cancel_matching(self, **body: Any) -> dict[str, list[str]]:
            asked.append(body)
            return {"cancelled": list(body["id"]), "denied": []}

    monkeypatch.setattr(live, "_client", lambda *args: Asked())
    result = CliRunner().invoke(app, ["cancel", "7_[2-4,9%2]"])
    assert result.exit_code == 0, result.output
    assert [body["id"] for body in asked] == [["7_2", "7_3", "7_4", "7_9"]]
    assert result.stdout.strip() == "Cancelling 7_[2-4,9] (4 jobs)"
    cut = CliRunner().invoke(app, ["cancel", "7_[1,3,5,...%2]"])
    assert cut.exit_code == 2 and "cut short by the listing" in cut.stderr
    assert "jobs -r -j 7" in cut.stderr
    bad = CliRunner().invoke(app, ["cancel", "7_[5-2]"])
    assert bad.exit_code == 2 and "runs backwards" in bad.stderr


def test_many_plain_ids_are_still_tried_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 10,000-id limit is of one request, a combined id's: more plain ids than that
    (each tried alone, as before combined ids were read) are not refused."""
    fake = Fake()
    monkeypatch.setattr(live, "_client", lambda *args: fake)
    ids = [str(i) for i in range(1_000, 11_001)]
    result = CliRunner().invoke(app, ["cancel", *ids, "--json"])
    assert result.exit_code == 0, result.output
    assert fake.asked == ids
