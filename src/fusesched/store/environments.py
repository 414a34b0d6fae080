"""Submitting environments kept once each (``JobRequest.submit_env``: what a batch job
inherits from the shell that submitted it, a few kilobytes).

A job's stored request holds no environment: the ``environments`` table keeps each distinct
one under its key (the SHA-256 of its canonical JSON) and the job's ``env_id`` names it, so an
array of 10,000 members, or a user's day of submissions from one shell, stores it once.
:func:`split_environments` takes it out of rows about to be inserted; the controller's
recovery puts it back into a stored request, which it needs to start the job
(:func:`fusesched.controller.records.stored_request`), and a resubmission by the job's own
user carries it to the new job (:mod:`fusesched.api.resubmit_routes`). No view shows it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fusesched.store.schema import environments

#: The request field that holds the environment.
FIELD = "submit_env"
#: How many keys one ``IN`` list holds (well under SQLite's and PostgreSQL's limits).
CHUNK = 500


def environment_key(env: Mapping[str, str]) -> str:
    """The key an environment is kept under: the SHA-256 of its canonical JSON, in hex."""
    text = json.dumps(dict(env), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def split_environments(batch: list[dict[str, Any]]) -> dict[str, Mapping[str, str]]:
    """Take each row's environment out of its ``request`` (a copy: the caller's data is not
    changed) into its ``env_id``; the environments by key. Rows sharing one request (an
    array's members) share the copy and are hashed once."""
    found: dict[str, Mapping[str, str]] = {}
    done: dict[int, tuple[dict[str, Any], str]] = {}  # id(request) -> (its copy, key)
    for values in batch:
        request = values["request"]
        env = request.get(FIELD)
        if env is None:
            continue
        known = done.get(id(request))
        if known is None:
            key = environment_key(env)
            known = done[id(request)] = ({k: v for k, v in request.items() if k != FIELD}, key)
            found[key] = env
        values["request"], values["env_id"] = known
    return found


def insert_environments(conn: Connection, found: Mapping[str, Mapping[str, str]]) -> None:
    """Keep each of ``found`` unless it is kept already."""
    if not found:
        return
    dialect = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    rows = [{"id": key, "env": dict(env)} for key, env in found.items()]
    conn.execute(dialect(environments).on_conflict_do_nothing(index_elements=["id"]), rows)


def read_environments(conn: Connection, keys: Iterable[str | None]) -> dict[str, dict[str, str]]:
    """The kept environments of ``keys`` (None and unknown keys left out)."""
    wanted = sorted({key for key in keys if key})
    found: dict[str, dict[str, str]] = {}
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        stmt = select(environments.c.id, environments.c.env).where(environments.c.id.in_(chunk))
        found.update({key: env for key, env in conn.execute(stmt)})
    return found
