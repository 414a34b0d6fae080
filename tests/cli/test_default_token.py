"""Which credential a command sends: ``FUSESCHED_TOKEN``, else the user's token file, else
(inside a job) the job's own credential, which the controller takes only for the job's steps:
a batch script's ``squeue`` or ``sbatch`` must speak as the user when the user has a token."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.client_base import default_token, token_file


@pytest.mark.parametrize(
    ("env_token", "file_token", "job_token", "sent"),
    [
        ("env", "file", "job", "env"),
        (None, "file", "job", "file"),  # (the job's credential came first before)
        (None, None, "job", "job"),
        (None, "  \n", "job", "job"),  # (an empty file is no token)
        ("  ", "file", None, "file"),
        (None, None, None, None),
    ],
)
def test_the_users_token_comes_before_the_jobs(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env_token: str | None,
    file_token: str | None,
    job_token: str | None,
    sent: str | None,
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name, value in (("FUSESCHED_TOKEN", env_token), ("FUSESCHED_JOB_TOKEN", job_token)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    if file_token is not None:
        Path(token_file()).parent.mkdir(parents=True)
        Path(token_file()).write_text(file_token)
    assert default_token() == sent
