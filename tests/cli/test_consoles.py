"""The CLI's tables come out whole when piped (``fusesched jobs | grep``), not cut to 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
from rich.table import Table
from fusesched.cli.live import console
table = Table()
for k in range(10):
    table.add_column(f"column-{k}")
table.add_row(*[f"value-number-{k}" for k in range(10)])
console.print(table)
"""


def _run(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def test_a_piped_table_is_not_cut() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = _run(env)
    assert "…" not in out
    for k in range(10):
        assert f"value-number-{k}" in out and f"column-{k}" in out
    assert max(len(line) for line in out.splitlines()) < 250  # only as wide as it needs


def test_columns_still_wins() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"COLUMNS": "60"}
    out = _run(env)
    assert max(len(line) for line in out.splitlines()) <= 60
