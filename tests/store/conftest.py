"""Store fixtures: every test that takes ``store`` or ``url`` runs on SQLite and PostgreSQL.

SQLite gets a file in the test's temporary folder. PostgreSQL gets a fresh schema in the
server's database (``FUSESCHED_TEST_PG_URL``, default the local ``test`` database), dropped
after the test. When the server cannot be reached the PostgreSQL cases are skipped, and fail
when the environment variable ``CI`` is set (CI must test both databases).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from fusesched.store import Store

PG_URL = os.environ.get(
    "FUSESCHED_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The PostgreSQL URL, once it is known to answer (skip, or fail under CI, otherwise)."""
    engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            pass
    except OperationalError as error:
        why = " ".join(str(error.orig).split())
        message = (
            f"PostgreSQL at {PG_URL} is unreachable ({why}); start it with "
            "scripts/system_deps.sh or point FUSESCHED_TEST_PG_URL at a server"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message}. CI is set, so the PostgreSQL store tests must run.", False)
        pytest.skip(message)
    finally:
        engine.dispose()
    return PG_URL


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    """The URL of an empty database (no tables yet)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/fusesched.db"
        return
    server: str = request.getfixturevalue("pg_server")
    schema = f"fusesched_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        scoped = make_url(server).update_query_dict({"options": f"-csearch_path={schema}"})
        yield scoped.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store(url) as opened:
        yield opened
