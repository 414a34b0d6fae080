"""What a first-time user met trying docs/LIVE.md at an 80-column terminal: the jobs table cut
states to "Comple…" and ``token list`` cut token ids, the very ids ``token revoke`` takes."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from fusesched.cli import admin, job_list, live

JOB = {
    "id": "1005_4",
    "name": "an-array-with-a-long-name",
    "user": "someone",
    "type": "ai-train",
    "queue": "default",
    "pool": "local",
    "state": "Completed",
    "exit_code": 0,
    "start_time": 1.0,
    "end_time": 2.0,
    "nodes": ["local-1", "local-2"],
}

TOKEN = {
    "id": "a229cfa33f86dd4f",
    "kind": "user",
    "user": "admin",
    "tenant": "default",
    "role": "cluster-admin",
    "node": None,
    "job_id": None,
    "created_at": 1796506961.0,
    "used_at": None,
    "revoked": False,
}


class FakeClient:
    def jobs(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [JOB, JOB | {"id": "1004", "state": "Cancelled", "exit_code": -15}]

    def show(self, job_id: str) -> dict[str, Any]:
        return JOB | {
            "tasks": [{"task_id": "1005_4.main.0", "node": "local-1", "state": "Completed"}]
        }

    def efficiency(self, job_id: str) -> dict[str, Any]:
        return {"id": job_id, "sampled": False}  # (`show` prints no efficiency line then)

    def tokens(self, *args: Any) -> list[dict[str, Any]]:
        return [TOKEN]


@pytest.fixture
def screen(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What the commands print, on an 80-column terminal."""
    out = io.StringIO()
    narrow = Console(file=out, width=80, color_system=None)
    for module in (live, admin, job_list):
        monkeypatch.setattr(module, "console", narrow)
        monkeypatch.setattr(module, "_client", lambda *args: FakeClient())
    return out


def test_the_jobs_table_never_cuts_ids_or_states(screen: io.StringIO) -> None:
    job_list.jobs(SimpleNamespace(info_name="jobs"), limit=50)  # type: ignore[arg-type]
    text = screen.getvalue()
    assert "Completed" in text and "Cancelled" in text and "…" in text  # the name is cut
    assert "1005_4" in text


def test_show_never_cuts_the_task_id(screen: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=40, color_system=None))
    live.show("1005_4")
    assert "1005_4.main.0" in out.getvalue() and "Completed" in out.getvalue()


def test_token_list_shows_whole_ids(screen: io.StringIO) -> None:
    admin.token_list()
    assert "a229cfa33f86dd4f" in screen.getvalue()


def test_show_says_why_a_task_ended_when_its_agent_said(
    screen: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reason column only when some task has one (the OOM killer's, its walltime…)."""
    live.show("1005_4")
    assert "reason" not in screen.getvalue()
    oom = "memory limit exceeded (killed by the kernel's OOM killer)"
    tasks = [
        {"task_id": "9.main.0", "node": "local-1", "state": "Completed", "exit_code": 0},
        {"task_id": "9.remote.1", "node": "local-1", "state": "Failed", "reason": oom},
    ]
    monkeypatch.setattr(FakeClient, "show", lambda self, job_id: JOB | {"tasks": tasks})
    out = io.StringIO()
    monkeypatch.setattr(live, "console", Console(file=out, width=200, color_system=None))
    live.show("9")
    text = out.getvalue()
    header = next(line for line in text.splitlines() if line.split()[:1] == ["task"])
    assert header.split() == ["task", "node", "state", "exit", "gpus", "reason"]
    assert oom in text
