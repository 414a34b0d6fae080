"""Who is calling: API tokens, roles and the principal every route checks.

A token is ``fsk_<id>_<secret>``: ``id`` (16 hex digits) is public and names the stored row,
``secret`` (``secrets.token_urlsafe(32)``) is shown once, when the token is made, and only its
SHA-256 is stored; a presented secret is compared with the stored hash in constant time.

Kinds of token (:class:`~fusesched.store.TokenKind`):

* ``user`` — a person, with a role: ``user`` < ``tenant-admin`` < ``cluster-admin``;
* ``join`` — lets one node join once (``POST /v1/agents/join``), optionally bound to a node name;
* ``agent`` — a joined node's own credential, bound to its node name;
* ``job`` — a running job's credential (``FUSESCHED_JOB_TOKEN``), valid only for that job's
  remote launches and revoked when the job ends.

With authentication off (the embedded demo) every request is the :data:`ANONYMOUS` principal,
which may do everything, as before authentication existed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fusesched.store import Store, TokenKind, TokenRow

PREFIX: Final = "fsk"
_TOKEN_RE: Final = re.compile(r"^fsk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,100})$")


class Role(StrEnum):
    USER = "user"
    TENANT_ADMIN = "tenant-admin"
    CLUSTER_ADMIN = "cluster-admin"
    AGENT = "agent"  # a node's agent
    JOB = "job"  # a running job's helpers (mpirun's remote launcher)
    JOIN = "join"  # a node that has not joined yet

    @property
    def person(self) -> bool:
        return self in _PEOPLE


_PEOPLE: Final = (Role.USER, Role.TENANT_ADMIN, Role.CLUSTER_ADMIN)
PERSON_ROLES: Final = tuple(r.value for r in _PEOPLE)


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request."""

    user: str
    tenant: str
    role: Role
    node: str | None = None
    job_id: str | None = None
    token_id: str | None = None  # None: authentication is off

    @property
    def person(self) -> bool:
        return self.role.person

    def at_least(self, role: Role) -> bool:
        """A person whose role is ``role`` or above."""
        return self.person and _PEOPLE.index(self.role) >= _PEOPLE.index(role)


#: Every request's principal when authentication is off.
ANONYMOUS: Final = Principal(user="", tenant="", role=Role.CLUSTER_ADMIN)


class AuthError(Exception):
    """No valid credential: missing, malformed, unknown, wrong, revoked or expired (401)."""


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token() -> tuple[str, str, str]:
    """(token, id, hash of the secret) for a fresh token."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return f"{PREFIX}_{token_id}_{secret}", token_id, hash_secret(secret)


def split_token(token: str) -> tuple[str, str]:
    """(id, secret) of a well-formed token; :class:`AuthError` otherwise."""
    found = _TOKEN_RE.fullmatch(token.strip())
    if found is None:
        raise AuthError("malformed token")
    return found.group(1), found.group(2)


def token_id_of(token: str) -> str:
    """The public id of a token (what ``token revoke`` takes), for display."""
    return split_token(token)[0]


class Authenticator:
    """Issues and checks tokens against the store. ``enabled=False``: everyone is
    :data:`ANONYMOUS` (and issuing job tokens is skipped)."""

    def __init__(
        self, store: Store, *, enabled: bool, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.enabled = enabled
        self.clock = clock

    # ------------------------------------------------------------------ checking

    def authenticate(self, token: str | None) -> Principal:
        """The principal a bearer token stands for; :class:`AuthError` when it is not valid."""
        if not self.enabled:
            return ANONYMOUS
        if not token:
            raise AuthError("a bearer token is required")
        token_id, secret = split_token(token)
        row = self.store.get_token(token_id)
        # compare even for an unknown id, so timing does not tell known ids from unknown ones
        expected = row.hash if row is not None else hash_secret("")
        if not hmac.compare_digest(hash_secret(secret), expected) or row is None:
            raise AuthError("invalid token")
        if not row.usable(self.clock()):
            raise AuthError("the token was revoked, has expired or was already used")
        return principal_of(row)

    # ------------------------------------------------------------------ issuing

    def issue(
        self,
        kind: TokenKind,
        *,
        user: str = "",
        tenant: str = "",
        role: str = "",
        node: str | None = None,
        job_id: str | None = None,
        expires_in_s: float | None = None,
    ) -> tuple[str, TokenRow]:
        """Make and store a token; returns the token (shown once) and its stored row."""
        token, token_id, digest = new_token()
        now = self.clock()
        row = TokenRow(
            id=token_id,
            hash=digest,
            kind=kind,
            created_at=now,
            user=user,
            tenant=tenant,
            role=role,
            node=node,
            job_id=job_id,
            expires_at=None if expires_in_s is None else now + expires_in_s,
        )
        self.store.add_token(row)
        return token, row

    def issue_agent(self, node: str) -> str:
        """A node's own credential (what a join returns; local agents get one directly)."""
        return self.issue(TokenKind.AGENT, role=Role.AGENT.value, node=node)[0]

    def issue_job(self, job_id: str, user: str, tenant: str) -> str:
        return self.issue(
            TokenKind.JOB, user=user, tenant=tenant, role=Role.JOB.value, job_id=job_id
        )[0]

    def join(self, principal: Principal, node: str) -> str | None:
        """Use the join token behind ``principal`` for ``node``; the node's new credential,
        or ``None`` when the token cannot be used (already used by a concurrent join)."""
        assert principal.token_id is not None
        if self.store.use_join_token(principal.token_id, self.clock()) is None:
            return None
        return self.issue_agent(node)


def principal_of(row: TokenRow) -> Principal:
    if row.kind is TokenKind.USER:
        role = Role(row.role) if row.role in PERSON_ROLES else Role.USER
    else:
        role = {TokenKind.JOIN: Role.JOIN, TokenKind.AGENT: Role.AGENT, TokenKind.JOB: Role.JOB}[
            row.kind
        ]
    return Principal(
        user=row.user,
        tenant=row.tenant,
        role=role,
        node=row.node,
        job_id=row.job_id,
        token_id=row.id,
    )
