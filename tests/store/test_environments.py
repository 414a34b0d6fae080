"""Submitting environments kept once each (store/environments.py): a job's stored request
holds none, its ``env_id`` names the one kept; an array's members and later jobs with the
same environment share one row; the caller's request is not changed; reading gives them back.
On SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import func, select
from tests.store.rows import job

from fusesched.store import Store
from fusesched.store.environments import environment_key
from fusesched.store.schema import environments

SHELL = {"PATH": "/home/ana/venv/bin:/usr/bin", "VIRTUAL_ENV": "/home/ana/venv", "Z": "é"}


def kept(store: Store) -> int:
    with store._read() as conn:
        return int(conn.execute(select(func.count()).select_from(environments)).scalar_one())


def test_an_environment_is_kept_once(store: Store) -> None:
    request = {"name": "arr", "submit_env": SHELL}
    members = [job(i, id=f"1_{i}", request=request, array_parent="1") for i in range(1, 4)]
    assert store.add_jobs(members) == 3
    assert request == {"name": "arr", "submit_env": SHELL}  # (the caller's, unchanged)
    store.add_jobs([job(9, request={"name": "later", "submit_env": dict(SHELL)})])
    store.add_jobs([job(10, request={"name": "other", "submit_env": {"PATH": "/bin"}})])
    store.add_jobs([job(11, request={"name": "none"})])
    assert kept(store) == 2
    rows = {r.id: r for r in store.list_jobs(limit=50)}
    assert all("submit_env" not in r.request for r in rows.values())
    key = environment_key(SHELL)
    assert rows["1_2"].env_id == rows["9"].env_id == key and rows["11"].env_id is None
    found = store.environments([key, rows["10"].env_id, None, "unknown"])
    assert found == {key: SHELL, environment_key({"PATH": "/bin"}): {"PATH": "/bin"}}
    assert found[rows["9"].env_id or ""] == SHELL


def test_the_key_does_not_depend_on_order() -> None:
    assert environment_key({"A": "1", "B": "2"}) == environment_key({"B": "2", "A": "1"})
    assert environment_key({"A": "1"}) != environment_key({"A": "2"})
