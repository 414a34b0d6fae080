"""`fusesched cancel A B C` tries every id: one refused (unknown) is reported, the others are
still cancelled and reported, and the exit status says something was refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fusesched.cli import live
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
