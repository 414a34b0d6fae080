"""A database a newer release has migrated (an upgrade rolled back without restoring the
database, docs/DEPLOY.md "Upgrades"): refused with a clear reason, not Alembic's traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from fusesched.store import Store, current_revision, head_revision, upgrade
from fusesched.store.engine import make_engine
from fusesched.store.migrate import NewerSchema

FUTURE = "0999_from_a_newer_release"


def migrate_ahead(url: str) -> None:
    """Bring the database to the newest revision, then mark it as a later one."""
    upgrade(url)
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": FUTURE})
    finally:
        engine.dispose()


def test_a_store_ahead_of_the_package_is_refused_with_the_reason(url: str) -> None:
    migrate_ahead(url)
    with pytest.raises(NewerSchema) as refused:
        Store(url)
    assert refused.value.revision == FUTURE
    assert f"newest is {head_revision()!r}" in str(refused.value)
    assert "restore the database backed up before the upgrade" in str(refused.value)
    assert current_revision(url) == FUTURE  # nothing was changed


def test_the_controller_says_so_and_exits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    migrate_ahead(f"sqlite:///{data / 'fusesched.db'}")
    done = subprocess.run(
        [sys.executable, "-m", "fusesched", "controller", "--data-dir", str(data), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = " ".join(done.stderr.split())  # (the console wraps long lines)
    assert done.returncode == 1, said
    assert said.startswith(f"error: the store's schema is at revision {FUTURE!r}, which"), said
    assert "Traceback" not in said
