"""``fusesched up`` with several agents names them ``local-1``, ``local-2``…, names this
machine may not resolve; it says so, and how to make them resolve, since a script that takes
its rendezvous host from ``scontrol show hostnames`` cannot reach an unresolvable name."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from fusesched.agent.config import AgentConfig
from fusesched.cli import servers
from fusesched.cli.local import unresolved

NOWHERE = "fusesched-no-such-node.invalid"


def test_unresolved_names_are_found() -> None:
    assert unresolved(["localhost", NOWHERE]) == [NOWHERE]
    assert unresolved(["localhost"]) == []


def _said(monkeypatch: pytest.MonkeyPatch, names: list[str], tmp_path: Path) -> str:
    out = io.StringIO()
    monkeypatch.setattr(servers, "err", Console(file=out, width=400))
    configs = [
        AgentConfig(name=name, address="127.0.0.1", work_dir=tmp_path / name) for name in names
    ]
    servers._say_unresolved(configs)
    return out.getvalue()


def test_up_says_which_names_do_not_resolve_and_the_hosts_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    said = _said(monkeypatch, ["localhost", NOWHERE], tmp_path)
    assert f"does not resolve the node name(s) {NOWHERE}:" in said
    assert f"add to /etc/hosts: 127.0.0.1 {NOWHERE}" in said


def test_up_says_nothing_when_every_name_resolves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _said(monkeypatch, ["localhost"], tmp_path) == ""
