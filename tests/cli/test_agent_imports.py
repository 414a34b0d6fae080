"""``fusesched agent`` does not import the controller (its web framework, store, migrations):
about a second less CPU per agent start, so an agent started again after a crash (or a
machine's boot) registers sooner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONTROLLER_MODULES = ("fastapi", "alembic", "sqlalchemy", "fusesched.controller.server")


def test_the_agent_command_imports_none_of_the_controller(tmp_path: Path) -> None:
    # a configuration that is not there: the command imports what it runs with, then stops
    command = [sys.executable, "-X", "importtime", "-m", "fusesched", "agent"]
    result = subprocess.run(
        [*command, "--config", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "cannot read the agent configuration" in result.stderr
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "fusesched.agent.start" in imported
    assert [m for m in CONTROLLER_MODULES if m in imported] == []
